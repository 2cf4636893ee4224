"""Tests for ncl.division.split (spec 4.2.3 fallback, 4.2.5, 7.2)."""

import pytest
import torch

from ncl.division import partition_indices, split_by_probability


def test_threshold_rules():
    prob = torch.tensor([0.9, 0.4, 0.5, 0.7])
    assert split_by_probability(prob).tolist() == [True, False, False, True]
    assert split_by_probability(prob, clean_rule="greater_equal").tolist() == [True, False, True, True]
    assert split_by_probability(prob, threshold=0.8).tolist() == [True, False, False, False]


def test_fallback_forces_one_percent_noisy():
    # N = 200, every probability > 0.5: threshold -> sorted[200 // 100] = 3rd smallest.
    values = torch.linspace(0.6, 0.99, 200)
    perm = torch.randperm(200, generator=torch.Generator().manual_seed(0))
    prob = values[perm]
    clean = split_by_probability(prob)
    noisy_idx = torch.nonzero(~clean).flatten()
    expected = torch.sort(perm.argsort()[:3]).values  # positions of the 3 smallest values
    assert torch.equal(torch.sort(noisy_idx).values, expected)


def test_fallback_small_n_marks_only_minimum():
    prob = torch.tensor([0.8, 0.6, 0.9, 0.7])
    assert split_by_probability(prob).tolist() == [True, False, True, True]


def test_empty_clean_set_keep_all_and_raise():
    prob = torch.full((6,), 0.2)
    with pytest.warns(RuntimeWarning, match="empty clean set"):
        clean = split_by_probability(prob)
    assert bool(clean.all())
    with pytest.raises(ValueError, match="no sample is predicted clean"):
        split_by_probability(prob, on_empty_clean="raise")


def test_saturated_fallback_would_empty_clean_set():
    # > 99 % exactly 1.0 and min > 0.5: official fallback threshold is 1.0 -> nothing clean.
    prob = torch.ones(150)
    prob[7] = 0.9
    with pytest.warns(RuntimeWarning):
        clean = split_by_probability(prob)
    assert bool(clean.all())


def test_split_rejects_bad_input():
    with pytest.raises(ValueError, match="threshold"):
        split_by_probability(torch.rand(4), threshold=1.5)
    with pytest.raises(ValueError, match="NaN/Inf"):
        split_by_probability(torch.tensor([0.1, float("nan")]))
    with pytest.raises(ValueError, match="clean_rule"):
        split_by_probability(torch.rand(4), clean_rule="gt")  # type: ignore[arg-type]


def test_partition_indices_increasing():
    clean = torch.tensor([False, True, True, False, True])
    clean_idx, noisy_idx = partition_indices(clean)
    assert clean_idx.tolist() == [1, 2, 4]
    assert noisy_idx.tolist() == [0, 3]
    with pytest.raises(ValueError, match="bool"):
        partition_indices(torch.tensor([0, 1]))
