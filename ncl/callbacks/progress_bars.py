"""Lightning progress bars of the ``ncl`` command: Rich on a terminal, plain lines in a log.

Lightning 2.6 draws its Rich bar whenever ``rich`` is installed. In a log file
(``ncl fit ... > log.txt``, a batch job) a Rich bar is not redrawn in place: it prints
nothing while an epoch runs and a stale render of the finished bar at the end, so the log shows
no progress at all inside an epoch. :func:`ncl.cli.app.added_callbacks` therefore picks

* :class:`NclRichProgressBar` when stdout is a terminal (Lightning's bar, without ``v_num``),
* :class:`LineProgressBar` otherwise: one plain, complete line every ``every_n_steps`` steps,
  e.g. ``epoch 3 step 40/120 (33%)  2.1 it/s  eta 0:00:38  loss 0.1234  val/rsum 412.3``.

Either can be chosen in a config instead (``trainer.callbacks``); a configured progress bar is
never replaced. Both drop ``v_num`` (the logger's version number, shown by Lightning as
``v_num: 0.000``): it is the run folder's name, not a measurement.

A line shows only the training values logged in the current epoch: Lightning's
``trainer.callback_metrics`` keeps every key ever logged with its last value, so a warm-up's
loss (ReCon's ``warmup_infonce``) would otherwise stay on every later line
(:func:`logged_since`). The progress-bar metrics (``val/rsum``) are the latest validation's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ProgressBar, RichProgressBar

#: Lines per pass when ``every_n_steps`` is not given (a pass of unknown length: every 100 steps).
LINES_PER_PASS = 10
_UNKNOWN_LENGTH_EVERY = 100
_TRAIN_PREFIX, _STEP_SUFFIX = "train/", "_step"


def without_version(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` without Lightning's ``v_num`` entry."""
    return {k: v for k, v in metrics.items() if k != "v_num"}


class NclRichProgressBar(RichProgressBar):
    """Lightning's :class:`RichProgressBar` without ``v_num`` among the bar's metrics."""

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        return without_version(super().get_metrics(trainer, pl_module))


def interval(total: float, every_n_steps: int | None) -> int:
    """Steps between two lines: ``every_n_steps``, else about :data:`LINES_PER_PASS` per pass."""
    if every_n_steps is not None:
        return every_n_steps
    if not math.isfinite(total) or total <= 0:
        return _UNKNOWN_LENGTH_EVERY
    return max(1, math.ceil(total / LINES_PER_PASS))


def clock(seconds: float) -> str:
    """``h:mm:ss`` of a duration."""
    whole = round(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def number(value: Any) -> str:
    """A metric for the line: floats with 4 significant digits (``72.00``, ``0.1234``), anything
    else as ``str``."""
    if hasattr(value, "item"):
        value = value.item()
    return f"{value:#.4g}" if isinstance(value, float) else str(value)


def logged_since(metrics: Mapping[str, Any], snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``metrics`` logged after ``snapshot`` (a copy of it taken earlier).

    Lightning's metric dicts are updated, never cleared, during a fit: a key logged in an
    earlier epoch only keeps the value object it had then, while a key logged again holds a
    new one (Lightning hands out a freshly detached tensor at every update). So an entry is
    new when its key is not in the snapshot or its value is another object."""
    return {key: value for key, value in metrics.items()
            if key not in snapshot or snapshot[key] is not value}


def step_values(trainer: L.Trainer, epoch_start: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The training values logged for the latest step, ``train/<k>_step`` shown as ``<k>``.

    ncl logs them with ``prog_bar=False`` (a bar has no room for NCR's per-network values), but
    a line has: they are what tells a reader of a log that training moves. With
    ``epoch_start`` (a copy of ``trainer.callback_metrics`` at the start of the epoch), only
    the values logged in this epoch (:func:`logged_since`)."""
    metrics = trainer.callback_metrics
    if epoch_start is not None:
        metrics = logged_since(metrics, epoch_start)
    return {key[len(_TRAIN_PREFIX):-len(_STEP_SUFFIX)]: value
            for key, value in metrics.items()
            if key.startswith(_TRAIN_PREFIX) and key.endswith(_STEP_SUFFIX)}


class LineProgressBar(ProgressBar):
    """Progress as plain lines on stdout, for logs: nothing is redrawn, every line is complete.

    Training prints a line every ``every_n_steps`` steps and at the last step of each epoch:
    epoch, step of the epoch, percentage, speed, time left of the epoch, the step's logged
    training values (``loss``, ...; only those logged in this epoch) and the progress-bar
    metrics (``val/rsum`` of the latest validation). A standalone
    ``ncl validate``/``test``/``predict`` prints the same kind of line for its pass; the
    validation inside ``fit`` prints none (it is short, and ncl prints its
    ``epoch N validation`` summary line right after it). Rank 0 only.

    Args:
        every_n_steps: steps between two lines; ``None`` (default): about
            :data:`LINES_PER_PASS` lines per epoch or pass (every 100 steps when the length
            of a pass is unknown).

    Lines go to ``sys.stdout`` (as Lightning's bars do), flushed one by one.
    """

    def __init__(self, every_n_steps: int | None = None) -> None:
        super().__init__()
        if every_n_steps is not None and (not isinstance(every_n_steps, int) or every_n_steps < 1):
            raise ValueError(f"LineProgressBar: every_n_steps must be an integer >= 1 or null, "
                             f"got {every_n_steps!r}")
        self.every_n_steps = every_n_steps
        self._enabled = True
        self._started = time.monotonic()
        self._done = 0  # batches of the current pass run by this process (for the speed)
        self._epoch_start: dict[str, Any] = {}  # trainer.callback_metrics as the epoch started

    # ------------------------------------------------------------------ ProgressBar API
    @property
    def is_enabled(self) -> bool:
        return self._enabled

    @property
    def is_disabled(self) -> bool:
        return not self._enabled

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def print(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("flush", True)  # a log file shows each line as soon as it is written
        print(*args, **kwargs)

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        return without_version(super().get_metrics(trainer, pl_module))

    # ------------------------------------------------------------------ Lightning hooks
    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restart()
        self._epoch_start = dict(trainer.callback_metrics)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        values = {**step_values(trainer, self._epoch_start), **self.get_metrics(trainer, pl_module)}
        self._advance(f"epoch {trainer.current_epoch}", batch_idx, self.total_train_batches, values)

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restart()

    def on_validation_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule,
                                  batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._loader(dataloader_idx)

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                                outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        if trainer.state.fn == "fit":  # sanity check and in-fit validation: no lines
            return
        self._advance(f"validation loader {dataloader_idx}", batch_idx,
                      self.total_val_batches_current_dataloader, {})

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restart()

    def on_test_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                          batch_idx: int, dataloader_idx: int = 0) -> None:
        self._loader(dataloader_idx)

    def on_test_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                          batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._advance(f"test loader {dataloader_idx}", batch_idx,
                      self.total_test_batches_current_dataloader, {})

    def on_predict_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restart()

    def on_predict_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                          batch_idx: int, dataloader_idx: int = 0) -> None:
        self._loader(dataloader_idx)

    def on_predict_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                             batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._advance(f"predict loader {dataloader_idx}", batch_idx,
                      self.total_predict_batches_current_dataloader, {})

    # ------------------------------------------------------------------ helpers
    def _restart(self) -> None:
        self._started, self._done = time.monotonic(), 0
        self.reset_dataloader_idx_tracker()

    def _loader(self, dataloader_idx: int) -> None:
        """Track the evaluation loader (Lightning's totals need it); a new loader is a new pass."""
        if self.has_dataloader_changed(dataloader_idx):
            self._started, self._done = time.monotonic(), 0

    def _advance(self, label: str, batch_idx: int, total: float, values: dict[str, Any]) -> None:
        """Count one batch; print a line if it is due (every n-th batch and the last one)."""
        self._done += 1
        step = batch_idx + 1
        last = math.isfinite(total) and step >= total
        if not self._enabled or not (step % interval(total, self.every_n_steps) == 0 or last):
            return
        self.print(self._line(label, step, total, values))

    def _line(self, label: str, step: int, total: float, values: dict[str, Any]) -> str:
        elapsed = max(time.monotonic() - self._started, 1e-9)
        rate = self._done / elapsed
        parts = [f"{label} step {step}"]
        if math.isfinite(total) and total > 0:
            parts = [f"{label} step {step}/{int(total)} ({100 * step / total:.0f}%)"]
        parts.append(f"{rate:.2f} it/s" if rate >= 0.1 else f"{1 / rate:.1f} s/it")
        if math.isfinite(total) and rate > 0:
            parts.append(f"eta {clock(max(total - step, 0) / rate)}")
        parts += [f"{key} {number(value)}" for key, value in values.items()]
        return "  ".join(parts)
