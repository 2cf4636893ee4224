"""CREAM's agreement split and targets, SPS's per-network split, on fixed probabilities
(values from the official ``split_prob`` / ``split_samples`` and ``train_one_epoch``)."""

from __future__ import annotations

import torch

from ncl.division.cream import (CLEAN, HARD, NOISY, STRICT, SubsetDivision, agreement_split,
                                clean_targets, hard_targets, mined_targets, official_clean_mask,
                                sps_split)


def test_clean_mask_is_strictly_above_the_threshold() -> None:
    prob = torch.tensor([0.2, 0.5, 0.51, 0.9, 0.0])
    assert official_clean_mask(prob, 0.5).tolist() == [False, False, True, True, False]
    assert not official_clean_mask(torch.tensor([0.1, 0.3]), 0.5).any()  # stays empty


def test_one_percent_rule_when_everything_is_clean() -> None:
    prob = torch.linspace(0.6, 0.99, 250)  # all > 0.5: the threshold becomes sorted[250 // 100]
    mask = official_clean_mask(prob, 0.5)
    assert mask.tolist() == [False] * 3 + [True] * 247  # sorted[2] itself is not above itself


def test_agreement_split() -> None:
    prob = torch.tensor([[0.9, 0.9, 0.1, 0.1, 0.5, 0.7],
                         [0.8, 0.2, 0.7, 0.3, 0.6, 0.5]])
    assert agreement_split(prob, 0.5).tolist() == [CLEAN, HARD, HARD, NOISY, HARD, HARD]


def test_targets_by_value() -> None:
    w_peer, p_own = torch.tensor([1.0, 0.5, 0.0]), torch.tensor([0.2, 0.4, 0.6])
    assert torch.allclose(clean_targets(w_peer, p_own), torch.tensor([1.0, 0.7, 0.6]))
    w_a, w_b = torch.tensor([0.9, 0.2]), torch.tensor([0.3, 0.4])
    # m = [0.6, 0.3]: 0.6 + 0.4 * 0.5 = 0.8, 0.3 + 0.7 * 0.1 = 0.37
    assert torch.allclose(hard_targets(w_a, w_b, torch.tensor([0.5, 0.1])), torch.tensor([0.8, 0.37]))
    assert torch.allclose(mined_targets(torch.tensor([0.2, 0.8]), torch.tensor([0.4, 0.0])),
                          torch.tensor([0.3, 0.4]))


def test_sps_split() -> None:
    prob = torch.tensor([0.95, 0.61, 0.6, 0.55, 0.5, 0.1])
    assert sps_split(prob, 0.5, 0.6).tolist() == [STRICT, STRICT, CLEAN, CLEAN, NOISY, NOISY]


def test_division_record_round_trip() -> None:
    subset = torch.tensor([CLEAN, HARD, NOISY, NOISY], dtype=torch.int8)
    record = SubsetDivision(epoch=3, losses=torch.rand(2, 4), prob=torch.rand(2, 4),
                            clean=torch.ones(2, 4, dtype=torch.bool), subset=subset)
    again = SubsetDivision.from_state(record.state())
    assert again.epoch == 3 and torch.equal(again.subset, subset)
    assert again.sizes() == {"clean": 1, "hard": 1, "noisy": 2}
