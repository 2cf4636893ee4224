"""LNC's momentum targets (LNC Eq. 5) moved by MomentumRefinement after a step: NCR states
them as a per-step Refinable (its table, ``momentum_update`` with ``mr_momentum``)."""

from __future__ import annotations

import torch

from ncl.callbacks.protocols import Refinable
from ncl.callbacks.refinement import MomentumRefinement
from ncl.methods.ncr import NCR
from ncl.models.sgraf import SGRAF


def _lnc(n: int, momentum: float) -> NCR:
    model = NCR(30, lambda vocab: SGRAF(vocab, img_dim=16, num_regions=6, word_dim=8,
                                        embed_size=16, sim_dim=8),
                momentum_regularization=True, mr_momentum=momentum)
    model.momentum_targets.reset(n)
    return model


def _apply(model: NCR, net: int, index: list[int], pred: list[float]) -> None:
    outputs = {"refine": (net, torch.tensor(index), torch.tensor(pred))}
    MomentumRefinement().on_train_batch_end(None, model, outputs, None, 0)  # type: ignore[arg-type]


def test_targets_start_at_one_and_follow_eq5() -> None:
    model = _lnc(5, momentum=0.75)
    assert isinstance(model, Refinable) and model.refinement_when() == "step"
    table = model.momentum_targets
    assert torch.equal(table.get(1, torch.tensor([0, 4])), torch.ones(2))
    _apply(model, 0, [3, 1], [0.2, 0.6])
    # gamma = 0.75 * 1 + 0.25 * P
    torch.testing.assert_close(table.get(0, torch.tensor([1, 3, 0])), torch.tensor([0.9, 0.8, 1.0]))
    assert torch.equal(table.get(1, torch.arange(5)), torch.ones(5))  # the other net untouched
    _apply(model, 0, [3], [1.0])
    torch.testing.assert_close(table.get(0, torch.tensor([3])), torch.tensor([0.75 * 0.8 + 0.25]))


def test_repeated_index_moves_once_per_occurrence_and_no_update_is_a_no_op() -> None:
    model = _lnc(3, momentum=0.5)
    _apply(model, 1, [2, 0, 2], [0.0, 0.0, 0.0])
    torch.testing.assert_close(model.momentum_targets.values[1], torch.tensor([0.5, 1.0, 0.25]))
    callback = MomentumRefinement()
    callback.on_train_batch_end(None, model, None, None, 0)  # type: ignore[arg-type]
    callback.on_train_batch_end(None, model, {"loss": torch.tensor(1.0)}, None, 0)  # type: ignore[arg-type]
    torch.testing.assert_close(model.momentum_targets.values[1], torch.tensor([0.5, 1.0, 0.25]))
