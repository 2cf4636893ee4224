"""Interrupted runs: a test callback (used through ``--trainer.callbacks+=``) that kills the
process, and the forked child process that runs ``ncl fit`` with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import lightning as L

TESTS = Path(__file__).resolve().parent


class KillAtStep(L.Callback):
    """SIGKILL the process after optimiser step ``step``: no teardown, no final checkpoint,
    exactly what a pre-empted job or an out-of-memory kill leaves behind."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def fit_killed_at(config: Path, cwd: Path, step: int,
                  extra: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """``ncl fit --config config *extra`` in a forked child process, SIGKILLed after optimiser
    step ``step`` (its return code is then -9; the caller checks, with its stderr in the
    message).

    Forked, not a new interpreter: the child inherits this process's imports (a fresh
    ``python -m ncl.cli`` spends about 5 s importing torch and Lightning before its first step)
    and runs the CLI in-process, as the tests' other runs do. What the test needs of a process
    is the same: it dies by SIGKILL with no teardown and no final checkpoint, and leaves only
    what it had written. Its output goes to ``<cwd>/killed-<step>.log``; any way out other than
    the kill (an error, a finished run) ends it with ``os._exit`` and a non-zero status, so it
    never returns into pytest."""
    cmd = ["fit", "--config", str(config), *extra,
           "--trainer.callbacks+=resume_helpers.KillAtStep", f"--trainer.callbacks.step={step}"]
    log = Path(cwd) / f"killed-{step}.log"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: run, and never come back
        status = 3
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            os.chdir(cwd)
            os.environ["WANDB_MODE"] = "disabled"
            from ncl.cli import main

            main(cmd)
        except SystemExit as done:
            status = done.code if isinstance(done.code, int) and done.code else 4
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    _, wait_status = os.waitpid(pid, 0)
    code = (-os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status)
            else os.WEXITSTATUS(wait_status))
    text = log.read_text(errors="replace") if log.exists() else ""
    return subprocess.CompletedProcess(["ncl", *cmd], code, stdout=text, stderr=text)


class InterruptAtStep(L.Callback):
    """Ctrl-C (SIGINT to this process) after optimiser step ``step``, as a user at the terminal."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGINT)
