"""What a Weights & Biases run of ``ncl`` holds besides the logged scalars.

:class:`WandbRunContent` is added by ``ncl fit|validate|test`` to every run whose loggers
include an enabled :class:`~ncl.runs.loggers.NclWandbLogger` (the configs need not name it). On
rank 0 it

* at the start of the run: puts the run's provenance in the W&B config (``ncl_version``,
  ``git_commit``, ``git_dirty``, ``run_dir``; the noise SHA-256 ``noise_sha256`` is already
  there, from the DataModule's hyperparameters) and saves the run folder's ``config.yaml``
  and ``noise.json`` as W&B run files (``ncl/config.yaml``, ``ncl/noise.json``);
* at the end of a test: logs the test results as one W&B Table ``test/results``, one row per
  system x protocol, columns ``rsum`` and R@1/5/10 in both directions.

The best checkpoint is uploaded as an artifact by the logger itself
(``NclWandbLogger(log_best_checkpoint=true)``), since only the logger sees the checkpoints.
The helpers here are plain functions; the callback only decides when they run.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

import ncl

#: Files of a run folder saved as W&B run files (when present).
RUN_FILES = ("config.yaml", "noise.json")
#: Metric columns of the test table, in the order of the paper tables.
METRICS = ("rsum", "i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10")
TABLE_KEY = "test/results"
_GIT_TIMEOUT_S = 5.0


def ncl_version() -> str:
    """The version of the ncl code that runs (``ncl.__version__``)."""
    return str(getattr(ncl, "__version__", "unknown"))


def _git(folder: Path, *args: str) -> str | None:
    """``git -C folder args`` stdout, or ``None`` on any failure.

    Never prompts (stdin closed, ``GIT_TERMINAL_PROMPT=0``), never takes the index lock
    (``GIT_OPTIONAL_LOCKS=0``: other processes may be using the same checkout) and only runs
    local commands, so no network is touched.
    """
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, env=env, timeout=_GIT_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.SubprocessError):  # no git, a hung file system, ...
        return None
    return done.stdout if done.returncode == 0 else None


def source_commit(package_dir: Path | None = None) -> tuple[str, bool | None]:
    """``(commit, dirty)`` of the ncl source tree, or ``("unknown", None)``.

    Only a checkout whose top level is the parent of the ``ncl`` package counts: an
    installed copy that happens to lie inside some other repository (a virtual environment
    in a project folder) must not report that repository's commit. ``dirty`` is true when
    tracked files differ from the commit (untracked files are ignored).
    """
    package = (package_dir or Path(ncl.__file__).parent).resolve()
    out = _git(package, "rev-parse", "--show-toplevel", "HEAD")
    lines = out.split() if out else []
    if len(lines) != 2 or Path(lines[0]).resolve() != package.parent:
        return "unknown", None
    status = _git(package.parent, "status", "--porcelain", "--untracked-files=no")
    return lines[1], (None if status is None else bool(status.strip()))


def provenance(run_dir: Path) -> dict[str, Any]:
    """The W&B config entries that say which code made the run and where its files are."""
    commit, dirty = source_commit()
    return {"ncl_version": ncl_version(), "git_commit": commit, "git_dirty": dirty,
            "run_dir": str(run_dir.resolve())}


def results_table(metrics: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``(columns, rows)`` of the test results among logged metrics.

    Args:
        metrics: logged values by key; the test results are the keys
            ``test/<system>/<protocol>/<metric>`` (``RetrievalMethod.on_test_epoch_end``),
            values floats or 0-dim tensors.

    Returns:
        Columns ``system, protocol, rsum, i2t_r1 ... t2i_r10`` and one row per (system,
        protocol) in the order the metrics were logged; a metric not logged is ``None``.
    """
    cells: dict[tuple[str, str], dict[str, float]] = {}
    for key, value in metrics.items():
        parts = key.split("/")
        if len(parts) == 4 and parts[0] == "test" and parts[3] in METRICS:
            cells.setdefault((parts[1], parts[2]), {})[parts[3]] = float(value)
    columns = ["system", "protocol", *METRICS]
    rows = [[system, protocol, *(values.get(m) for m in METRICS)]
            for (system, protocol), values in cells.items()]
    return columns, rows


def _wandb_loggers(trainer: L.Trainer) -> list[Any]:
    """The trainer's NclWandbLoggers that write a W&B run (not ``mode: disabled``)."""
    from ncl.runs.loggers import NclWandbLogger

    return [lg for lg in trainer.loggers if isinstance(lg, NclWandbLogger) and lg.enabled]


class WandbRunContent(Callback):
    """Provenance, run files and the test table for every enabled NclWandbLogger (rank 0)."""

    def _record_run(self, trainer: L.Trainer) -> None:
        if not trainer.is_global_zero:
            return
        for logger in _wandb_loggers(trainer):
            folder = Path(logger.save_dir)
            logger.log_config(provenance(folder))
            logger.save_run_files(folder, RUN_FILES)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record_run(trainer)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # ``ncl validate`` only: during fit the fit start has recorded the run already.
        if trainer.state.fn == "validate":
            self._record_run(trainer)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._record_run(trainer)

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Log the test results (already in ``callback_metrics``: the method logs them in
        ``on_test_epoch_end``, which runs before this hook) as one W&B Table."""
        if not trainer.is_global_zero:
            return
        columns, rows = results_table(trainer.callback_metrics)
        if not rows:
            return
        for logger in _wandb_loggers(trainer):
            logger.log_table(TABLE_KEY, columns=columns, data=rows, step=trainer.global_step)
