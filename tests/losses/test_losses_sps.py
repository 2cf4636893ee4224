"""SPS's consistency terms, proxy captions and labels against hand values and loops of the
official ``SIM_PAIR`` / ``InfoNCELoss(mode="train_sc")`` / ``process_noisy_p1`` formulas."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.losses.cream import per_sample_infonce
from ncl.losses.sps import (cosine_matrix, mean_word_embeddings, proxy_captions, proxy_labels,
                            structure_penalty, symmetry_penalty, weighted_infonce)


def test_cosine_matrix_matches_loops() -> None:
    a = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    b = torch.tensor([[2.0, 0.0], [0.0, 3.0]])
    expected = [[1.0, 0.0], [1 / math.sqrt(2), 1 / math.sqrt(2)], [0.0, 0.0]]  # zero row: eps
    assert torch.allclose(cosine_matrix(a, b), torch.tensor(expected))


def test_mean_word_embeddings_skip_padding() -> None:
    cap = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]],
                        [[5.0, 6.0], [7.0, 8.0], [9.0, 10.0]]])
    assert torch.allclose(mean_word_embeddings(cap, torch.tensor([2, 3])),
                          torch.tensor([[2.0, 3.0], [7.0, 8.0]]))


def test_symmetry_penalty_by_hand() -> None:
    s = torch.tensor([[0.9, 0.2], [0.6, 0.8]])  # (S - S^T) off-diagonal: -0.4, 0.4
    assert symmetry_penalty(s, 25.0) == pytest.approx(25 * (0.16 + 0.16) / 4)


def test_structure_penalty_by_hand() -> None:
    images = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # orthogonal: cosine matrix I
    captions = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # identical: all ones
    assert structure_penalty(images, captions, 25.0) == pytest.approx(25 * 2 / 4)
    assert structure_penalty(images, images, 25.0) == 0.0


def test_proxy_caption_is_the_most_similar_clean_image() -> None:
    clean = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    noisy = torch.tensor([[0.1, 1.0], [3.0, 0.2], [1.0, 0.9]])
    index, cosine = proxy_captions(clean, noisy)
    assert index.tolist() == [1, 0, 2]
    assert torch.allclose(cosine, cosine_matrix(noisy, clean).max(1).values)


def test_proxy_labels_are_zeroed_below_half() -> None:
    labels = proxy_labels(torch.tensor([0.9, 0.8, 1.0, 0.2]), torch.tensor([0.6, 0.5, 0.5, 1.0]))
    assert torch.allclose(labels, torch.tensor([0.54, 0.0, 0.5, 0.0]))  # 0.4 -> 0, 0.5 stays


def test_weighted_infonce_is_the_labelled_mean() -> None:
    s = torch.rand(4, 4, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([1.0, 0.0, 0.5, 0.25])
    assert weighted_infonce(s, y, 0.07) == pytest.approx(float((per_sample_infonce(s, 0.07) * y).sum() / 4))
