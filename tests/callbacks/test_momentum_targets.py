"""LNC momentum targets (ncl.callbacks.momentum; LNC Eq. 5)."""

from __future__ import annotations

import pytest
import torch

from ncl.callbacks.momentum import MomentumTargets
from ncl.training.state import unique_runs as _unique_runs


def test_targets_start_at_one_and_follow_eq5() -> None:
    cb = MomentumTargets(momentum=0.75, num_networks=2)
    cb.reset(5)
    assert torch.equal(cb.targets(1, torch.tensor([0, 4])), torch.ones(2))
    cb.update(0, torch.tensor([3, 1]), torch.tensor([0.2, 0.6]))
    # gamma = 0.75 * 1 + 0.25 * P
    torch.testing.assert_close(cb.targets(0, torch.tensor([1, 3, 0])), torch.tensor([0.9, 0.8, 1.0]))
    assert torch.equal(cb.targets(1, torch.arange(5)), torch.ones(5))  # the other net untouched
    cb.update(0, torch.tensor([3]), torch.tensor([1.0]))
    torch.testing.assert_close(cb.targets(0, torch.tensor([3])), torch.tensor([0.75 * 0.8 + 0.25]))


def test_repeated_index_moves_once_per_occurrence() -> None:
    cb = MomentumTargets(momentum=0.5, num_networks=1)
    cb.reset(3)
    cb.update(0, torch.tensor([2, 0, 2]), torch.tensor([0.0, 0.0, 0.0]))
    torch.testing.assert_close(cb.gamma[0], torch.tensor([0.5, 1.0, 0.25]))
    assert [g.tolist() for g in _unique_runs(torch.tensor([1, 2, 1, 3, 2]))] == [[0, 1], [2, 3, 4]]


def test_state_round_trip_and_bad_args() -> None:
    cb = MomentumTargets(0.9)
    cb.reset(4)
    cb.update(1, torch.tensor([2]), torch.tensor([0.0]))
    other = MomentumTargets(0.9)
    other.load_state_dict(cb.state_dict())
    assert torch.equal(other.gamma, cb.gamma)
    with pytest.raises(ValueError, match="momentum"):
        MomentumTargets(1.5)
    with pytest.raises(RuntimeError, match="setup"):
        MomentumTargets().targets(0, torch.tensor([0]))
