"""Tests for ncl.division.rectify (LNC Eq. 8; spec 4.2.7)."""

import pytest
import torch

from ncl.division import rectify_labels, rectify_labels_official_2023, rectify_noisy_labels

PROB = torch.tensor([0.9, 0.5, 0.0])
PRED = torch.tensor([0.2, 0.6, 1.0])


def test_per_sample_hand_computed():
    torch.testing.assert_close(rectify_labels(PROB, PRED), torch.tensor([0.92, 0.8, 1.0]))


def test_per_sample_with_labels():
    labels = torch.tensor([1.0, 0.0, 1.0])
    torch.testing.assert_close(rectify_labels(PROB, PRED, labels), torch.tensor([0.92, 0.3, 1.0]))


def test_official_2023_broadcast_hand_computed():
    expected = torch.tensor(
        [
            [0.92, 0.96, 1.0],
            [0.60, 0.80, 1.0],
            [0.20, 0.60, 1.0],
        ]
    )
    out = rectify_labels_official_2023(PROB, PRED)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out.diagonal(), rectify_labels(PROB, PRED))


def test_noisy_labels_average():
    out = rectify_noisy_labels(torch.tensor([0.2, 0.6]), torch.tensor([0.4, 0.0]))
    torch.testing.assert_close(out, torch.tensor([0.3, 0.3]))


def test_rectify_rejects_mismatch():
    with pytest.raises(ValueError, match="same shape"):
        rectify_labels(PROB, PRED[:2])
    with pytest.raises(ValueError, match="1-D"):
        rectify_labels_official_2023(PROB.unsqueeze(1), PRED)
    with pytest.raises(ValueError, match="NaN/Inf"):
        rectify_noisy_labels(torch.tensor([float("nan")]), torch.tensor([0.0]))
