"""Division diagnostics (ncl.division.stats; LNC Table 7)."""

from __future__ import annotations

import pytest
import torch

from ncl.division.stats import division_stats
from ncl.division.co_divide import Division


def _division(keep: bool = False) -> Division:
    clean = torch.tensor([[True, True, False, False, True, True],
                          [True, False, False, True, True, True]])
    return Division(epoch=4, losses=torch.rand(2, 6), prob=clean.float(), clean=clean,
                    keep=torch.tensor([True, True, False, True, True, True]) if keep else None)


def test_stats_hand_computed() -> None:
    truth = torch.tensor([True, True, True, False, False, True])  # noisy: 3, 4
    stats = division_stats(_division(keep=True), ["A", "B"], truth)
    # A predicts noisy {2, 3}: TP 1 (3), FP 1 (2), FN 1 (4), TN 3.
    assert stats["division/A/clean"] == 4 and stats["division/A/noisy"] == 2
    assert stats["division/A/precision"] == pytest.approx(0.5)
    assert stats["division/A/recall"] == pytest.approx(0.5)
    assert stats["division/A/f1"] == pytest.approx(0.5)
    assert stats["division/A/clean_recall"] == pytest.approx(3 / 4)
    # B predicts noisy {1, 2}: TP 0, FP 2, FN 2, TN 2.
    assert stats["division/B/precision"] == 0.0 and stats["division/B/f1"] == 0.0
    assert stats["division/B/clean_recall"] == pytest.approx(0.5)
    assert stats["division/abandoned"] == 1


def test_stats_without_ground_truth_and_name_check() -> None:
    stats = division_stats(_division(), ["A", "B"])
    assert set(stats) == {"division/A/clean", "division/A/noisy", "division/B/clean", "division/B/noisy"}
    with pytest.raises(ValueError, match="names"):
        division_stats(_division(), ["A"])
