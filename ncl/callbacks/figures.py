"""The :class:`Figures` callback: PNG figures of a run in ``<run dir>/figures/``, also sent to
W&B as images when a ``WandbLogger`` (e.g. :class:`ncl.loggers.NclWandbLogger`) is among
``trainer.loggers``.

It works with every method and draws only what the method has (duck-typed on its state):

=================================  ============================================================
file                               drawn when / from
=================================  ============================================================
``loss_gmm_epoch<e>.png``          a division was made for epoch ``e``: NCR/LNC's co-divide
                                   (:class:`~ncl.training.division.Division`, one panel per
                                   network) or ReCon's three-way division (``l^CM``); the GMM
                                   is refitted with the division's settings and seed
``labels_epoch<e>.png``            per-sample labels in effect in epoch ``e``: CRCL's corrected
                                   labels, NCR/LNC's clean probabilities ``w`` (and LNC's
                                   momentum targets in warm-up), ReCon's final labels
``detection.png``                  noise-detection precision/recall/F1 per epoch (needs the
                                   ground truth: synthetic or injected noise)
``rsum.png``                       validation rSum per epoch (``val/rsum``, ``val_<net>/rsum``,
                                   ``val_warmup*/rsum``; warm-up epochs shaded)
=================================  ============================================================

The per-epoch files are pruned to the newest ``keep_last`` of each kind; the two curves are
rewritten in place. Everything happens on rank 0 only (the method's state is identical on
every rank); the curves' history is part of the callback's checkpoint state, so a resumed run
continues them. The plotting itself is :mod:`ncl.figures` (pure functions).

Hooks: ``on_train_epoch_start`` (the division of the epoch, made at the end of the previous
epoch or by the epoch's loader), ``on_validation_end`` (rSum of the epoch), and
``on_train_epoch_end`` (a division made only at this epoch's start, the labels the epoch
trained with, the curves). Added to ``trainer.callbacks``, it runs before the callbacks the
methods attach themselves, so at the epoch end it still sees the epoch's labels and division,
not the next epoch's.
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

from ncl.callbacks.diagnostics import division_loss_panels, division_stats, ground_truth
from ncl.callbacks.labels import CLEAN_AT
from ncl.division import minmax_normalize
from ncl.division.three_way import ThreeWayDivision
from ncl.figures import (
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
from ncl.losses.recon import SUBSET_NOISY
from ncl.metrics.noise_detection import detection_metrics
from ncl.training.division import Division

#: Sub-folder of the run folder that receives the figures.
FIGURES = "figures"
#: ``val[_warmup][_<net>]/rsum``: group 1 says warm-up, group 2 names the network.
_RSUM_KEY = re.compile(r"^val(_warmup)?(?:_([^/]+))?/rsum$")


def run_folder(trainer: L.Trainer) -> Path:
    """The run folder: where the config, ``noise.json`` and the results go too."""
    return Path(trainer.log_dir or trainer.default_root_dir)


def rsum_series(metrics: dict[str, Any], warmup: bool) -> dict[str, float]:
    """The rSum values of one validation, by series name (warm-up keys under their network's).

    Args:
        metrics: ``trainer.callback_metrics`` after the validation.
        warmup: whether the validation was logged as warm-up (``val_warmup*``). Lightning keeps
            old keys in ``callback_metrics``, so only the keys of this validation's kind count.

    Returns:
        ``{"val/rsum": v, "val_A/rsum": v, ...}``.
    """
    out: dict[str, float] = {}
    for key, value in metrics.items():
        match = _RSUM_KEY.match(key)
        if match is None or (match.group(1) is not None) != warmup:
            continue
        net = match.group(2)
        out["val/rsum" if net is None else f"val_{net}/rsum"] = float(value)
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
        self._drawn: set[tuple[str, int]] = set()  # (kind, epoch) already written this run
        self._division: Any = None  # the division in effect, kept from the epoch's start
        self._folder: Path | None = None  # <run dir>/figures, resolved in setup

    # ------------------------------------------------------------------ Lightning hooks
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # trainer.log_dir is a broadcast from rank 0 under DDP: every rank must ask, so it is
        # asked here (all ranks), never in the rank-0-only drawing code.
        if self.enabled:
            self._folder = run_folder(trainer) / FIGURES

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._active(trainer):
            self._division = self._division_in_effect(pl_module, trainer.current_epoch)
            self._division_figure(trainer, pl_module, self._division)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._active(trainer) or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        epoch = trainer.current_epoch
        is_warmup = getattr(pl_module, "is_warmup_epoch", lambda e: False)(epoch)
        logged_as_warmup = is_warmup and not _hparam(pl_module, "select_warmup", False)
        values = rsum_series(dict(trainer.callback_metrics), logged_as_warmup)
        for name, value in values.items():
            self.rsum.setdefault(name, {})[epoch] = value
        if values and is_warmup:
            self.warmup_epochs.add(epoch)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._active(trainer):
            return
        epoch = trainer.current_epoch
        division = self._division_in_effect(pl_module, epoch) or self._division
        self._division_figure(trainer, pl_module, division)
        self._label_detection(trainer, pl_module)
        if self._due(trainer, epoch):
            self._label_figure(trainer, pl_module, division)
            if any(self.detection.values()):
                self._write(trainer, "detection", None, lambda: detection_figure(self.detection))
            if any(self.rsum.values()):
                self._write(trainer, "rsum", None,
                            lambda: rsum_figure(self.rsum, self.warmup_epochs))
        self._division = None

    def state_dict(self) -> dict[str, Any]:
        return {"detection": self.detection, "rsum": self.rsum,
                "warmup_epochs": sorted(self.warmup_epochs)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.detection = {k: dict(v) for k, v in state_dict.get("detection", {}).items()}
        self.rsum = {k: dict(v) for k, v in state_dict.get("rsum", {}).items()}
        self.warmup_epochs = set(state_dict.get("warmup_epochs", ()))

    # ------------------------------------------------------------------ what to draw
    def _active(self, trainer: L.Trainer) -> bool:
        return self.enabled and trainer.is_global_zero

    def _due(self, trainer: L.Trainer, epoch: int) -> bool:
        last = trainer.max_epochs is not None and epoch == trainer.max_epochs - 1
        return epoch % self.every_n_epochs == 0 or last

    @staticmethod
    def _division_in_effect(pl_module: L.LightningModule, epoch: int) -> Any:
        """The module's division that epoch ``epoch`` trains on, or ``None``.

        NCR/LNC make one for every epoch that needs one (``division.epoch == epoch``);
        ReCon's stays in effect until the next one (``division.epoch <= epoch``).
        """
        division = getattr(pl_module, "division", None)
        if isinstance(division, Division) and division.epoch == epoch:
            return division
        if isinstance(division, ThreeWayDivision) and division.epoch <= epoch:
            return division
        return None

    def _division_figure(self, trainer: L.Trainer, pl_module: L.LightningModule,
                         division: Any) -> None:
        """Record the detection scores of ``division`` and draw its loss histogram (once)."""
        if division is None or ("loss_gmm", division.epoch) in self._drawn:
            return
        self._drawn.add(("loss_gmm", division.epoch))
        epoch, seed = division.epoch, _hparam(pl_module, "gmm_seed", 0)
        method = method_label(pl_module)
        if isinstance(division, Division):
            names = list(getattr(pl_module, "network_names", ()))[: division.losses.shape[0]]
            truth = ground_truth(trainer, division.losses.shape[1])
            stats = division_stats(division, names, truth)
            for name in names:
                scores = {m: stats[f"division/{name}/{m}"] for m in DETECTION_METRICS
                          if f"division/{name}/{m}" in stats}
                if scores:
                    self.detection.setdefault(name, {})[epoch] = scores
            kind = "abandon draw" if division.keep is not None else "co-divide"
            panels = lambda: division_loss_panels(division, names, truth, seed)  # noqa: E731
            title = f"{method}, epoch {epoch} {kind}: per-sample loss (mean hinge) and GMM"
        else:
            truth = ground_truth(trainer, division.subset.shape[0])
            if truth is not None:
                noisy = division.subset == SUBSET_NOISY
                m = detection_metrics(~noisy, truth)
                self.detection.setdefault("D_n", {})[epoch] = {k: float(m[k]) for k in DETECTION_METRICS}
            name = (list(getattr(pl_module, "network_names", ())) or ["net"])[0]
            panels = lambda: [_recon_loss_panel(division, name, truth, seed)]  # noqa: E731
            title = f"{method}, epoch {epoch} division: loss l^CM and GMM (Eq. 6)"
        if self._due(trainer, epoch):
            self._write(trainer, "loss_gmm", epoch,
                        lambda: loss_gmm_figure(panels(), title, self.bins))

    def _label_detection(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Record CRCL's "corrected label below ``CLEAN_AT``" as a noise detector (the
        ``labels/noisy_{precision,recall,f1}`` of :class:`~ncl.callbacks.labels.LabelDiagnostics`)."""
        corrected = getattr(pl_module, "corrected_labels", None)
        if not callable(corrected):
            return
        labels = corrected().detach().float().cpu()
        truth = ground_truth(trainer, labels.shape[0])
        if truth is not None:
            m = detection_metrics(labels >= CLEAN_AT, truth)
            scores = {k: float(m[k]) for k in DETECTION_METRICS}
            self.detection.setdefault(f"y_hat < {CLEAN_AT:g}", {})[trainer.current_epoch] = scores

    def _label_figure(self, trainer: L.Trainer, pl_module: L.LightningModule,
                      division: Any) -> None:
        """Draw the labels the epoch trained with (nothing when the method keeps none)."""
        epoch = trainer.current_epoch
        panels = _label_panels(trainer, pl_module, division, epoch)
        if panels:
            title = f"{method_label(pl_module)}, epoch {epoch}: per-sample labels"
            self._write(trainer, "labels", epoch, lambda: label_histogram_figure(panels, title))

    # ------------------------------------------------------------------ writing
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


def method_label(pl_module: L.LightningModule) -> str:
    """The method's name for a figure title: the class name, and ``LNC`` for NCR with LNC's
    momentum regulariser or Randomly Noise Abandon (one class implements both papers)."""
    name = type(pl_module).__name__
    if name == "NCR" and (_hparam(pl_module, "momentum_regularization", False)
                          or _hparam(pl_module, "noise_abandon", False)):
        return "LNC"
    return name


def _hparam(pl_module: L.LightningModule, name: str, default: Any) -> Any:
    hparams = getattr(pl_module, "hparams", None)
    return hparams.get(name, default) if hparams is not None else default


def _recon_loss_panel(division: ThreeWayDivision, name: str, truth: Tensor | None,
                      seed: int | None) -> LossPanel:
    """ReCon's ``l^CM`` normalised as its GMM saw it (Eq. 6), with that GMM refitted."""
    x = minmax_normalize(division.cm_loss.float().cpu()).numpy()
    gmm = fit_loss_gmm(x, seed) if float(x.max(initial=0.0)) > 0 else None
    return LossPanel(f"network {name}", x, gmm, None if truth is None else truth.numpy())


def _label_panels(trainer: L.Trainer, pl_module: L.LightningModule, division: Any,
                  epoch: int) -> list[LabelPanel]:
    """The per-sample label sets a method keeps, for the epoch (empty when it keeps none)."""
    panels: list[LabelPanel] = []

    def add(title: str, values: Tensor, xlabel: str) -> None:
        v = values.detach().float().cpu()
        truth = ground_truth(trainer, v.shape[0])
        panels.append(LabelPanel(title, v.numpy(), None if truth is None else truth.numpy(),
                                 xlabel))

    corrected = getattr(pl_module, "corrected_labels", None)
    if callable(corrected):  # CRCL (Eq. 12: SCC-corrected, confident noise filtered to 0)
        add("CRCL corrected labels y_hat (Eq. 12)", corrected(),
            "corrected label y_hat (0 = noisy, 1 = clean)")
    if isinstance(division, Division) and division.keep is None:
        # Net k trains on the peer's division: its rectified label is w + (1 - w) P >= w.
        names = list(getattr(pl_module, "network_names", ()))
        for k, name in enumerate(names[: division.prob.shape[0]]):
            add(f"clean probability w from network {name}'s GMM (Eq. 3)", division.prob[k],
                "clean probability w (0 = noisy, 1 = clean)")
    targets = getattr(pl_module, "momentum_targets", None)
    in_warmup = getattr(pl_module, "is_warmup_epoch", lambda e: False)(epoch)
    if targets is not None and getattr(targets, "values", None) is not None and in_warmup:
        names = list(getattr(pl_module, "network_names", ()))
        for k, name in enumerate(names[: targets.values.shape[0]]):
            add(f"momentum targets gamma of network {name} (LNC Eq. 5)", targets.values[k],
                "momentum target gamma (0 = noisy, 1 = clean)")
    if isinstance(division, ThreeWayDivision):
        add("ReCon final labels y_hat (Eq. 11)", division.labels,
            "final label y_hat (0 = noisy, 1 = clean)")
    return panels


def _prune(folder: Path, kind: str, keep: int) -> None:
    """Delete all but the ``keep`` newest ``<kind>_epoch<e>.png`` (by epoch number)."""
    pattern = re.compile(rf"^{re.escape(kind)}_epoch(\d+)\.png$")
    found = sorted((int(m.group(1)), p) for p in folder.iterdir()
                   if (m := pattern.match(p.name)) is not None)
    for _, path in found[:-keep]:
        path.unlink(missing_ok=True)

