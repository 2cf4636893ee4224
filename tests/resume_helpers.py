"""Interrupted runs: a test callback (used through ``--trainer.callbacks+=``) that kills the
process, and the subprocess that runs ``ncl fit`` with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
from launch import launch

TESTS = Path(__file__).resolve().parent


class KillAtStep(L.Callback):
    """SIGKILL the process after optimiser step ``step``: no teardown, no final checkpoint,
    exactly what a pre-empted job or an out-of-memory kill leaves behind."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def fit_killed_at(config: Path, cwd: Path, step: int) -> subprocess.CompletedProcess:
    """``ncl fit --config config`` in a child process, SIGKILLed after optimiser step ``step``
    (its return code is then -9; the caller checks, with its stderr in the message)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "ncl.cli", "fit", "--config", str(config),
           "--trainer.callbacks+=resume_helpers.KillAtStep", f"--trainer.callbacks.step={step}"]
    return launch(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


class InterruptAtStep(L.Callback):
    """Ctrl-C (SIGINT to this process) after optimiser step ``step``, as a user at the terminal."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGINT)
