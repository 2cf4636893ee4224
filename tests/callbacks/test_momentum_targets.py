"""LNC momentum targets (ncl.callbacks.momentum; LNC Eq. 5): the update rule applied by the
callback after a step, to the method's PerSampleState."""

from __future__ import annotations

import pytest
import torch

from ncl.callbacks.momentum import MomentumTargets
from ncl.training.state import PerSampleState


class _Module:
    def __init__(self, rows: int, n: int) -> None:
        self.momentum_targets = PerSampleState(rows, fill=1.0)
        self.momentum_targets.reset(n)


def _apply(cb: MomentumTargets, module: _Module, net: int, index: list[int], pred: list[float]) -> None:
    outputs = {"momentum_update": (net, torch.tensor(index), torch.tensor(pred))}
    cb.on_train_batch_end(None, module, outputs, None, 0)  # type: ignore[arg-type]


def test_targets_start_at_one_and_follow_eq5() -> None:
    cb, module = MomentumTargets(momentum=0.75), _Module(2, 5)
    table = module.momentum_targets
    assert torch.equal(table.get(1, torch.tensor([0, 4])), torch.ones(2))
    _apply(cb, module, 0, [3, 1], [0.2, 0.6])
    # gamma = 0.75 * 1 + 0.25 * P
    torch.testing.assert_close(table.get(0, torch.tensor([1, 3, 0])), torch.tensor([0.9, 0.8, 1.0]))
    assert torch.equal(table.get(1, torch.arange(5)), torch.ones(5))  # the other net untouched
    _apply(cb, module, 0, [3], [1.0])
    torch.testing.assert_close(table.get(0, torch.tensor([3])), torch.tensor([0.75 * 0.8 + 0.25]))


def test_repeated_index_moves_once_per_occurrence_and_no_update_is_a_no_op() -> None:
    cb, module = MomentumTargets(momentum=0.5), _Module(1, 3)
    _apply(cb, module, 0, [2, 0, 2], [0.0, 0.0, 0.0])
    torch.testing.assert_close(module.momentum_targets.values[0], torch.tensor([0.5, 1.0, 0.25]))
    cb.on_train_batch_end(None, module, None, None, 0)  # type: ignore[arg-type]
    cb.on_train_batch_end(None, module, {"loss": torch.tensor(1.0)}, None, 0)  # type: ignore[arg-type]
    torch.testing.assert_close(module.momentum_targets.values[0], torch.tensor([0.5, 1.0, 0.25]))


def test_bad_momentum() -> None:
    with pytest.raises(ValueError, match="momentum"):
        MomentumTargets(1.5)
