"""A ReCon division whose data pass is replaced by given per-sample values (tests of the
division's rules without a network pass: tests/methods/test_recon*.py)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch

from ncl.callbacks.division import divide_if_due
from ncl.methods.recon import ReCon


def fake_division_pass(model: ReCon, monkeypatch: pytest.MonkeyPatch,
                       passes: dict[int, torch.Tensor]) -> tuple[list[int], Callable[[int], bool]]:
    """The division pass replaced by ``passes[epoch]`` (``(N, 3)``); returns the epochs it ran
    for and ``divide(epoch)``, GMMDivision's own work (GMM on column 0, accept_division)."""
    calls: list[int] = []

    def fake(spec, nets, pairs, epoch, *args, **kwargs) -> torch.Tensor:
        calls.append(epoch)
        return passes[epoch][None]  # (1, N, 3)

    data = SimpleNamespace(train_pairs=lambda: None, num_workers=0, batch_size=8)
    monkeypatch.setattr("ncl.callbacks.epoch_pass.run_pass", fake)
    monkeypatch.setattr("ncl.callbacks.epoch_pass.retrieval_data", lambda trainer, name: data)
    monkeypatch.setattr("ncl.methods.recon.retrieval_data", lambda trainer, name: data)
    monkeypatch.setattr(ReCon, "trainer", property(lambda self: None))
    trainer = SimpleNamespace(global_rank=0, world_size=1)
    return calls, lambda epoch: divide_if_due(trainer, model, epoch)
