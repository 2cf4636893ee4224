"""Helpers of tests/cli/test_self_refining_cli.py that the CLI imports by name (a test module
is not importable under ``--import-mode=importlib``): a callback that checks the weights at
every piece boundary, and a killed run with extra arguments."""

from __future__ import annotations

import subprocess
from pathlib import Path

import lightning as L
import torch

from ncl.callbacks.self_refining import REINIT_STREAM
from ncl.data.samplers import epoch_seed
import resume_helpers

TESTS = Path(__file__).resolve().parent


class BoundaryCheck(L.Callback):
    """At the first batch of every piece after the first: the weights are the backbone factory's
    draw under the piece's stream, the optimiser state is empty and the learning rate is the
    initial one. Appends the epoch to ``<marker_dir>/boundary_ok``."""

    def __init__(self, starts: list[int], marker_dir: str) -> None:
        self.starts, self.marker_dir = starts, marker_dir

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: object,
                             batch_idx: int) -> None:
        epoch = trainer.current_epoch
        if batch_idx != 0 or epoch not in self.starts[1:]:
            return
        piece, method = self.starts.index(epoch), pl_module
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(epoch_seed(method.training_seed, piece, REINIT_STREAM))
            fresh = [method.backbone_factory(method.hparams.vocab_size) for _ in method.nets]
        for net, new in zip(method.nets, fresh):
            for key, value in new.state_dict().items():
                assert torch.equal(net.state_dict()[key].cpu(), value), key
        for optimizer in trainer.optimizers:
            assert not optimizer.state
            assert all(g["lr"] == g["initial_lr"] for g in optimizer.param_groups)
        if trainer.is_global_zero:
            with open(Path(self.marker_dir, "boundary_ok"), "a") as handle:
                handle.write(f"{epoch}\n")


def fit_killed_at(config: Path, step: int, extra: list[str]) -> subprocess.CompletedProcess:
    """``ncl fit --config config *extra`` in a forked child process, SIGKILLed after optimiser
    step ``step`` (``resume_helpers.fit_killed_at``, run in the config's folder; its return
    code is then -9)."""
    return resume_helpers.fit_killed_at(config, config.parent, step, extra)
