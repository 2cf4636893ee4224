"""Test callbacks for interrupted runs (used through ``--trainer.callbacks+=``)."""

from __future__ import annotations

import os
import signal

import lightning as L


class KillAtStep(L.Callback):
    """SIGKILL the process after optimiser step ``step``: no teardown, no final checkpoint,
    exactly what a pre-empted job or an out-of-memory kill leaves behind."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)
