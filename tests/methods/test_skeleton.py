"""The skeleton every method shares (ncl/methods/skeleton.py, issue 37): warm-up epochs counted
for selection wherever the option exists, one warm-up-then-step schedule, the callbacks a method
names plus the base's Diagnostics, range checks with one message per rule, and the Division
record L2RM now keeps (with its older checkpoints' keys)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ncl.callbacks.diagnostics import Diagnostics
from ncl.callbacks.division import GMMDivision
from ncl.errors import ConfigError
from ncl.methods.baselines import Triplet
from ncl.methods.decl import DECL
from ncl.methods.l2rm import L2RM
from ncl.methods.l2rm_support import legacy_division
from ncl.methods.ncr import NCR
from ncl.methods.rcl import RCL
from ncl.methods.recon import ReCon
from ncl.methods.skeleton import check_ranges
from ncl.models import SGRAF

DIMS = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8}


def sgraf(vocab_size: int) -> nn.Module:
    return SGRAF(vocab_size, **DIMS)


def test_triplet_warmup_epochs_are_warmup_for_selection() -> None:
    """'SGR*' (Triplet with warm-up): its summed-negative epochs are warm-up epochs, left out
    of model selection unless select_warmup (before issue 37 every epoch could be selected)."""
    method = Triplet(10, sgraf, warmup_epochs=2)
    assert [method.is_warmup_epoch(e) for e in range(4)] == [True, True, False, False]
    assert [method.selectable(e) for e in range(4)] == [False, False, True, True]
    assert all(Triplet(10, sgraf, warmup_epochs=2, select_warmup=True).selectable(e) for e in range(4))
    assert not any(RCL(10, sgraf).is_warmup_epoch(e) for e in range(3))  # no option: no warm-up


@pytest.mark.parametrize(("make", "start"), [
    (lambda: Triplet(10, sgraf, warmup_epochs=3, lr_update=2), 0),  # SGR* counts from epoch 0
    (lambda: NCR(10, sgraf, warmup_epochs=3, lr_update=2), 3),  # NCR/LNC: after the warm-up
    (lambda: L2RM(10, sgraf, warmup_epochs=3, lr_update=2), 3),
    (lambda: ReCon(10, sgraf, warmup_epochs=3, lr_update=2), 3),
    (lambda: ReCon(10, sgraf, warmup_epochs=3, lr_update=2, lr_schedule="global"), 0),
    (lambda: DECL(10, sgraf, warmup_epochs=3, lr_update=2, lr_schedule="global"), 0),
])
def test_one_warmup_then_step_schedule(make, start: int) -> None:  # noqa: ANN001
    method = make()
    assert method.lr_schedule_start() == start
    factors = [method.lr_factor(e) for e in range(start + 5)]
    assert factors[:start + 2] == [1.0] * (start + 2)
    assert factors[start + 2:start + 4] == pytest.approx([0.1, 0.1])
    assert factors[start + 4] == pytest.approx(0.01)


def test_callbacks_are_the_methods_then_diagnostics() -> None:
    assert [type(c) for c in NCR(10, sgraf).configure_callbacks()] == [GMMDivision, Diagnostics]
    assert [type(c) for c in NCR(10, sgraf, diagnostics=False).configure_callbacks()] == [GMMDivision]
    assert RCL(10, sgraf, diagnostics=False).configure_callbacks() == []
    assert RCL(10, sgraf).hparams.diagnostics is True  # a base option, declared once


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"integers": {"n": 1}}, "model.n must be an integer >= 1, got 0"),
    ({"positive": ["n"]}, "model.n must be > 0, got 0"),
    ({"unit": ["x"]}, r"model.x must lie in \[0, 1\], got 1.5"),
    ({"nonnegative": ["y"]}, "model.y must be >= 0, got -1"),
    ({"batch_sizes": ["b"]}, "model.b must be >= 2 or null, got 1"),
])
def test_check_ranges_names_the_option(kwargs: dict, message: str) -> None:
    hp = {"n": 0, "x": 1.5, "y": -1, "b": 1}
    with pytest.raises(ConfigError, match=message):
        check_ranges(hp, **kwargs)
    check_ranges({"n": 2, "x": 0.5, "y": 0, "b": None}, integers={"n": 1}, positive=["n"],
                 unit=["x"], nonnegative=["y"], batch_sizes=["b"])  # all in range


def test_l2rm_division_record_and_older_checkpoints() -> None:
    """L2RM keeps the Division record of NCR/ReCon (one row); a checkpoint of ncl before it
    (``division_epoch``, ``clean_prob``, ``division_losses``) loads into the same record."""
    prob, losses = torch.tensor([0.9, 0.2, 0.6]), torch.tensor([0.1, 0.8, 0.3])
    old = {"division_epoch": 4, "clean_prob": prob, "division_losses": losses}
    division = legacy_division(old)
    assert division.epoch == 4 and division.clean.tolist() == [[True, False, True]]
    assert torch.equal(division.prob, prob[None]) and torch.equal(division.losses, losses[None])
    assert legacy_division({"division_epoch": -1, "clean_prob": None}) is None
    method = L2RM(10, sgraf)
    method.load_training_state(old)
    assert method.division.epoch == 4
    method.load_training_state(method.training_state())  # the new keys round-trip
    assert method.division.epoch == 4 and method.division.clean.shape == (1, 3)
