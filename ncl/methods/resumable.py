"""What makes a method resume exactly: its seed and its per-sample state in the checkpoint.

A mixin of :class:`~ncl.methods.base.RetrievalMethod`; kept apart so that the base reads as
networks, optimisation and evaluation. The checkpoint keys are ``ncl_training_seed`` and
``ncl_training_state`` (spec 7: a resumed run draws what the uninterrupted run drew).
"""

from __future__ import annotations

from typing import Any

import torch

from ncl.data.samplers import GLOBAL_TORCH_STREAM, epoch_seed, global_seed
from ncl.errors import ConfigError


class Resumable:
    """Seed and training-state hooks of a LightningModule (used as its first base class)."""

    _training_seed: int | None = None
    current_epoch: int  # given by the LightningModule it is mixed into
    global_rank: int
    trainer: Any

    @property
    def training_seed(self) -> int:
        """The run's seed (``seed_everything``), fixed at the first epoch and checkpointed."""
        if self._training_seed is None:
            self._training_seed = global_seed()
        return self._training_seed

    def reseed_epoch(self) -> None:
        """Reseed torch's global stream from ``(seed, epoch, rank)``: same draws after a resume."""
        torch.manual_seed(epoch_seed(self.training_seed, self.current_epoch, GLOBAL_TORCH_STREAM,
                                     self.global_rank))

    def training_state(self) -> dict[str, Any]:
        """Per-sample and schedule state, checkpointed as ``ncl_training_state`` (none here)."""
        return {}

    def load_training_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`training_state` returned."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["ncl_training_seed"] = self.training_seed
        if state := self.training_state():
            checkpoint["ncl_training_state"] = state

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "ncl_training_seed" in checkpoint:  # kept even if seed_everything is ``true``
            self._training_seed = int(checkpoint["ncl_training_seed"])
        if "ncl_training_state" in checkpoint:
            self.load_training_state(checkpoint["ncl_training_state"])
        elif self.training_state() and self.trainer.state.fn == "fit":
            raise ConfigError(f"cannot resume from {self.trainer.ckpt_path}: it holds no ncl_training_state "
                f"({type(self).__name__}'s per-sample state), so an older ncl wrote it (in its "
                f"callbacks' state); start a new run, or evaluate it with ncl test --ckpt_path")
