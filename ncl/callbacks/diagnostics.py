"""Diagnostics of the co-divide: division sizes, noise-detection quality, loss histograms.

* Sizes of each network's clean/noisy split and of the noise-abandon drop, every epoch
  with a division.
* When the DataModule knows the ground truth (``clean_mask``, synthetic or injected noise):
  precision, recall and F1 of the detected *noisy* pairs and the recall of the clean pairs,
  per network (LNC Table 7 and Fig. 6). The ground truth is read here only; it never
  reaches a loss. With real noise (CC152K, ``clean_mask_known`` false) they are skipped,
  with one info line saying why.
* Optionally a figure per division: the histogram of the min-max normalised per-sample
  losses, split by true clean/noisy when known, with the fitted two-component GMM
  (LNC Fig. 5b), drawn by :func:`ncl.figures.loss_gmm_figure`. The
  :class:`~ncl.callbacks.figures.Figures` callback draws the same figure (and more) for
  every method, with a bounded number of files; this option is the per-method switch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from ncl.data.contracts import clean_mask_known
from ncl.training.division import Division
from ncl.division import minmax_normalize
from ncl.figures import LossPanel, fit_loss_gmm, loss_gmm_figure, save_figure
from ncl.metrics.noise_detection import detection_metrics


def division_stats(division: Division, names: Sequence[str],
                   true_clean: Tensor | None = None) -> dict[str, float]:
    """Scalar diagnostics of one division.

    Args:
        division: the division (``clean`` is ``(K, N)``).
        names: the networks' names (``("A", "B")``), one per row of ``clean``.
        true_clean: ``(N,)`` bool ground truth, or ``None``.

    Returns:
        ``division/<name>/{clean,noisy}`` counts, ``division/abandoned`` when the division
        has a keep mask, and with the ground truth ``division/<name>/{precision,recall,f1,
        clean_recall}`` (fractions; positives are the noisy pairs, LNC Table 7).
    """
    if len(names) != division.clean.shape[0]:
        raise ValueError(f"names has {len(names)} entries for {division.clean.shape[0]} networks")
    out: dict[str, float] = {}
    for name, clean in zip(names, division.clean):
        out[f"division/{name}/clean"] = float(clean.sum())
        out[f"division/{name}/noisy"] = float((~clean).sum())
        if true_clean is not None:
            m = detection_metrics(clean, true_clean)
            out[f"division/{name}/precision"] = m["precision"]
            out[f"division/{name}/recall"] = m["recall"]
            out[f"division/{name}/f1"] = m["f1"]
            out[f"division/{name}/clean_recall"] = m["tn"] / max(m["tn"] + m["fp"], 1)
    if division.keep is not None:
        out["division/abandoned"] = float((~division.keep).sum())
    return out


def division_loss_panels(division: Division, names: Sequence[str],
                         true_clean: Tensor | None = None,
                         gmm_seed: int | None = 0) -> list[LossPanel]:
    """One :class:`~ncl.figures.LossPanel` per network of a division: its min-max normalised
    losses, the GMM refitted on them with the division's settings and seed (the division keeps
    only the posteriors, not the mixture), and the ground truth.

    Args:
        division: the division (``losses`` is ``(K, N)``).
        names: the networks' names, one per row.
        true_clean: ``(N,)`` bool ground truth, or ``None``.
        gmm_seed: seed of the refit (the division's own).
    """
    truth = None if true_clean is None else true_clean.cpu().numpy().astype(bool)
    panels = []
    for name, losses in zip(names, division.losses):
        x = minmax_normalize(losses.float().cpu()).numpy()
        gmm = fit_loss_gmm(x, gmm_seed) if float(x.max(initial=0.0)) > 0 else None
        panels.append(LossPanel(f"network {name}", x, gmm, truth))
    return panels


def plot_division(division: Division, names: Sequence[str], path: Path,
                  true_clean: Tensor | None = None, gmm_seed: int | None = 0, bins: int = 50) -> Path:
    """Save the per-sample loss histogram with the fitted GMM, one panel per network
    (:func:`ncl.figures.loss_gmm_figure`), atomically.

    Args:
        division: the division (``losses`` is ``(K, N)``).
        names: the networks' names.
        path: the PNG to write (parent folders are created).
        true_clean: ``(N,)`` ground truth to split the histogram by, or ``None``.
        gmm_seed: seed of the GMM refit shown (same settings as the division's).
        bins: histogram bins.

    Returns:
        ``path``.
    """
    panels = division_loss_panels(division, names, true_clean, gmm_seed)
    title = f"co-divide losses for epoch {division.epoch}"
    return save_figure(loss_gmm_figure(panels, title, bins), path)


class DivisionDiagnostics(L.Callback):
    """Logs :func:`division_stats` and (optionally) saves :func:`plot_division` figures.

    Runs at the start of every epoch that has a division (``module.division`` made for it),
    reading the division from the module. Figures go to
    ``<run dir>/figures/division_epoch<e>.png`` (rank 0).

    Args:
        figure: save the histogram figure (about a second per epoch on large sets).
        gmm_seed: seed of the GMM refit drawn in the figure (the division's own).
    """

    def __init__(self, figure: bool = False, gmm_seed: int | None = 0) -> None:
        self.figure, self.gmm_seed = figure, gmm_seed

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        division = getattr(pl_module, "division", None)
        if division is None or division.epoch != trainer.current_epoch:
            return
        true_clean = ground_truth(trainer, division.clean.shape[1])
        names = list(getattr(pl_module, "network_names", ()))[: division.clean.shape[0]]
        stats = division_stats(division, names, true_clean)
        # Identical on every rank; sync_dist only keeps Lightning from warning about it.
        pl_module.log_dict(stats, on_step=False, on_epoch=True, sync_dist=True)
        # trainer.log_dir is a broadcast under DDP: asked on every rank, drawn on rank 0 only.
        out = Path(trainer.log_dir or trainer.default_root_dir) / "figures" if self.figure else None
        if out is not None and trainer.is_global_zero:
            plot_division(division, names, out / f"division_epoch{division.epoch:03d}.png",
                          true_clean, self.gmm_seed)


#: Set on a trainer once it was told that its data has no ground truth (one line per run).
_TOLD_NO_TRUTH = "_ncl_told_no_ground_truth"


def ground_truth(trainer: L.Trainer, num_samples: int) -> Tensor | None:
    """The DataModule's clean mask as a bool tensor, if it has one of the right length.

    ``None`` too when the data has real noise (CC152K, ``clean_mask_known`` false): its mask
    calls every pair clean, and scores against it (noise-detection F1 = 0, "clean" label
    histograms) would be wrong rather than missing. One info line says so, once per run.
    """
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is not None and not clean_mask_known(datamodule):
        _tell_no_truth(trainer)
        return None
    try:
        mask = trainer.datamodule.clean_mask
    except (AttributeError, RuntimeError):
        return None
    mask = torch.as_tensor(np.asarray(mask), dtype=torch.bool)
    return mask if mask.shape == (num_samples,) else None


#: The former private name, still imported by :mod:`ncl.callbacks.labels` and others.
_ground_truth = ground_truth


def _tell_no_truth(trainer: L.Trainer) -> None:
    """Log, once per trainer, why the ground-truth diagnostics are missing."""
    if getattr(trainer, _TOLD_NO_TRUTH, False):
        return
    setattr(trainer, _TOLD_NO_TRUTH, True)
    rank_zero_info("ncl: noise-detection diagnostics against the ground truth are skipped: the "
                   "training pairs have real noise (data.real_noise, e.g. CC152K), so which "
                   "pairs are clean is unknown; division sizes and label statistics are still "
                   "logged")
