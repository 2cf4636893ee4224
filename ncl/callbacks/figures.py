"""The :class:`Figures` callback: PNG figures of a run in ``<run dir>/figures/``, also sent to
W&B as images when a ``WandbLogger`` (e.g. :class:`ncl.runs.loggers.NclWandbLogger`) is among
``trainer.loggers``.

A generic observer: it knows no method. What it draws comes from the method's
:meth:`~ncl.callbacks.protocols.Diagnosable.epoch_diagnostics` (the base class returns an
empty one, so RCL draws only the rSum curve) and from the logged validation rSum:

=================================  ============================================================
file                               drawn from
=================================  ============================================================
``loss_gmm_epoch<e>.png``          the division made for epoch ``e`` (``EpochDiagnostics.losses``:
                                   one panel per network, the GMM refitted with its seed)
``labels_epoch<e>.png``            the per-sample labels epoch ``e`` trains with
                                   (``EpochDiagnostics.labels``)
``detection.png``                  noise-detection precision/recall/F1 per epoch of every
                                   predicted-clean mask (``EpochDiagnostics.detection``) against
                                   the ground truth (synthetic or injected noise only)
``rsum.png``                       validation rSum per epoch (``val/rsum``, ``val_<net>/rsum``;
                                   the method's warm-up epochs shaded)
=================================  ============================================================

The per-epoch files are pruned to the newest ``keep_last`` of each kind; the two curves are
rewritten in place. Everything happens on rank 0 only (the method's state is identical on
every rank); the curves' history is part of the callback's checkpoint state, so a resumed run
continues them. ``ncl`` adds the callback to ``validate``/``test``/``predict`` as well, so
that Lightning finds a callback for that state when it loads a fit checkpoint there (it
warns otherwise); outside ``fit`` it draws nothing. The plotting itself is :mod:`ncl.evaluation.plots`
(pure functions).

Hooks: the epoch's first training batch (``on_train_batch_start`` with ``batch_idx == 0``: every
epoch-start hook, the division made for the epoch included, has run by then, whatever the order
of the callbacks), ``on_validation_end`` (rSum of the epoch) and ``on_train_epoch_end`` (the
curves).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.loggers import WandbLogger
from matplotlib.figure import Figure
from torch import Tensor

from ncl.callbacks.diagnostics import ground_truth
from ncl.callbacks.protocols import Diagnosable, EpochDiagnostics, LossView
from ncl.division import minmax_normalize
from ncl.evaluation.plots import (
    DETECTION_METRICS,
    LabelPanel,
    LossPanel,
    detection_figure,
    fit_loss_gmm,
    label_histogram_figure,
    loss_gmm_figure,
    rsum_figure,
    save_figure,
)
from ncl.metrics.noise_detection import detection_metrics

#: Sub-folder of the run folder that receives the figures.
FIGURES = "figures"
#: ``val[_<net>]/rsum``: group 1 names the network.
_RSUM_KEY = re.compile(r"^val(?:_([^/]+))?/rsum$")


def run_folder(trainer: L.Trainer) -> Path:
    """The run folder: where the config, ``noise.json`` and the results go too."""
    return Path(trainer.log_dir or trainer.default_root_dir)


def rsum_series(metrics: dict[str, Any]) -> dict[str, float]:
    """The rSum values of one validation by series name: ``{"val/rsum": v, "val_A/rsum": v}``
    (``val/rsum_selected`` is the model-selection key, not a series)."""
    return {key: float(value) for key, value in metrics.items() if _RSUM_KEY.match(key)}


def loss_panels(view: LossView, true_clean: Tensor | None) -> list[LossPanel]:
    """One panel per network: min-max normalised losses (as the mixture saw them, LNC Eq. 3)
    with the GMM refitted on them with the division's seed (a Gaussian division only)."""
    truth = None if true_clean is None else true_clean.cpu().numpy().astype(bool)
    panels = []
    for name, losses in view.losses.items():
        x = minmax_normalize(losses.float().cpu()).numpy()
        drawn = view.mixture == "gaussian" and float(x.max(initial=0.0)) > 0
        gmm = fit_loss_gmm(x, view.gmm_seed) if drawn else None
        panels.append(LossPanel(f"network {name}", x, gmm, truth))
    return panels


def detection_scores(diag: EpochDiagnostics, true_clean: Tensor | None) -> dict[str, dict[str, float]]:
    """Precision/recall/F1 of the noisy pairs of every predicted-clean mask (empty without a
    ground truth)."""
    if true_clean is None:
        return {}
    out = {}
    for name, clean in diag.detection.items():
        m = detection_metrics(clean.bool().cpu(), true_clean)
        out[name] = {k: float(m[k]) for k in DETECTION_METRICS}
    return out


class Figures(L.Callback):
    """Writes the run's figures (see the module docstring) and logs them to W&B.

    Args:
        enabled: false turns the callback off (nothing is computed or written).
        every_n_epochs: draw the figures of every n-th epoch (0, n, 2n, ...) and of the last;
            the curves' data are collected every epoch all the same.
        keep_last: how many per-epoch files of each kind to keep (the newest).
        bins: bins of the loss histograms (the label histograms use 20).
        dpi: resolution of the PNGs.
    """

    def __init__(self, enabled: bool = True, every_n_epochs: int = 1, keep_last: int = 5,
                 bins: int = 50, dpi: int = 100) -> None:
        for name, value, least in (("every_n_epochs", every_n_epochs, 1),
                                   ("keep_last", keep_last, 1), ("bins", bins, 2),
                                   ("dpi", dpi, 20)):
            if not isinstance(value, int) or value < least:
                raise ValueError(f"Figures: {name} must be an integer >= {least}, got {value!r}")
        self.enabled, self.every_n_epochs, self.keep_last = enabled, every_n_epochs, keep_last
        self.bins, self.dpi = bins, dpi
        # Curves' data (checkpointed): series -> epoch -> scores, series -> epoch -> rSum.
        self.detection: dict[str, dict[int, dict[str, float]]] = {}
        self.rsum: dict[str, dict[int, float]] = {}
        self.warmup_epochs: set[int] = set()
        self._folder: Path | None = None  # <run dir>/figures, resolved in setup

    # ------------------------------------------------------------------ Lightning hooks
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # trainer.log_dir is a broadcast from rank 0 under DDP: every rank must ask, so it is
        # asked here (all ranks), never in the rank-0-only drawing code. Outside fit (ncl adds
        # the callback to validate/test/predict too, so that a fit checkpoint's state has its
        # callback) nothing is drawn.
        if self.enabled and stage == "fit":
            self._folder = run_folder(trainer) / FIGURES

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if batch_idx != 0 or not self._active(trainer):
            return
        method: Diagnosable = pl_module  # type: ignore[assignment]
        epoch = trainer.current_epoch
        truth = ground_truth(trainer)
        diag = method.epoch_diagnostics(epoch, truth)
        for name, scores in detection_scores(diag, truth).items():
            self.detection.setdefault(name, {})[epoch] = scores
        if not self._due(trainer, epoch):
            return
        title = f"{method.display_name}, epoch {epoch}"
        if diag.losses is not None:
            view = diag.losses
            self._write(trainer, "loss_gmm", epoch, lambda: loss_gmm_figure(
                loss_panels(view, truth), f"{title} {view.title}", self.bins))
        if diag.labels:
            panels = [LabelPanel(v.title, v.values.detach().float().cpu().numpy(),
                                 None if truth is None else truth.numpy(), v.xlabel)
                      for v in diag.labels]
            self._write(trainer, "labels", epoch,
                        lambda: label_histogram_figure(panels, f"{title}: per-sample labels"))

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._active(trainer) or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        epoch = trainer.current_epoch
        values = rsum_series(dict(trainer.callback_metrics))
        for name, value in values.items():
            self.rsum.setdefault(name, {})[epoch] = value
        method: Diagnosable = pl_module  # type: ignore[assignment]
        if values and method.is_warmup_epoch(epoch):
            self.warmup_epochs.add(epoch)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._active(trainer) or not self._due(trainer, trainer.current_epoch):
            return
        if any(self.detection.values()):
            self._write(trainer, "detection", None, lambda: detection_figure(self.detection))
        if any(self.rsum.values()):
            self._write(trainer, "rsum", None, lambda: rsum_figure(self.rsum, self.warmup_epochs))

    def state_dict(self) -> dict[str, Any]:
        return {"detection": self.detection, "rsum": self.rsum,
                "warmup_epochs": sorted(self.warmup_epochs)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.detection = {k: dict(v) for k, v in state_dict.get("detection", {}).items()}
        self.rsum = {k: dict(v) for k, v in state_dict.get("rsum", {}).items()}
        self.warmup_epochs = set(state_dict.get("warmup_epochs", ()))

    # ------------------------------------------------------------------ helpers
    def _active(self, trainer: L.Trainer) -> bool:
        return self.enabled and trainer.is_global_zero and trainer.state.fn == "fit"

    def _due(self, trainer: L.Trainer, epoch: int) -> bool:
        last = trainer.max_epochs is not None and epoch == trainer.max_epochs - 1
        return epoch % self.every_n_epochs == 0 or last

    def _write(self, trainer: L.Trainer, kind: str, epoch: int | None,
               draw: Callable[[], Figure]) -> Path:
        """Draw, save atomically, prune old files of the kind, and send to W&B."""
        folder = self._folder or run_folder(trainer) / FIGURES  # setup not run: one process
        name = kind if epoch is None else f"{kind}_epoch{epoch:03d}"
        path = save_figure(draw(), folder / f"{name}.png", self.dpi)
        if epoch is not None:
            _prune(folder, kind, self.keep_last)
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_image(key=f"{FIGURES}/{kind}", images=[str(path)],
                                 step=trainer.global_step)
        return path


def _prune(folder: Path, kind: str, keep: int) -> None:
    """Delete all but the ``keep`` newest ``<kind>_epoch<e>.png`` (by epoch number)."""
    pattern = re.compile(rf"^{re.escape(kind)}_epoch(\d+)\.png$")
    found = sorted((int(m.group(1)), p) for p in folder.iterdir()
                   if (m := pattern.match(p.name)) is not None)
    for _, path in found[:-keep]:
        path.unlink(missing_ok=True)
