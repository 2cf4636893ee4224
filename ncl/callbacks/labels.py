"""CRCL's soft correspondence labels: their correction (SCC, Eq. 10-12) and their diagnostics.

The labels live on the method (``module.labels``, a :class:`~ncl.training.state.PerSampleState`
saved with its training state); these callbacks only decide *when* they move and what is
logged about them.

* :class:`LabelCorrection`:

  - ``on_train_batch_end``: the official (and ``prediction``) rule corrects the labels of a
    batch in its training step, from that step's estimate; the step returns
    ``label_update = (index, stored)`` and this hook writes it into the table, all-gathered
    by index so every rank holds the same table after every step (spec 4.4.2 steps 4-6);
  - ``on_train_epoch_end``: the paper rule's labels for the next epoch (Eq. 11: from
    ``p_hat`` of the epoch just finished), from an eval-mode pass over the training set. It
    runs before the checkpoint callbacks (Lightning calls them last), so the checkpoint of
    the epoch already holds the next epoch's labels;
  - ``on_train_epoch_start``: the same, as a fallback when they are missing (a checkpoint
    written before the epoch-end hook, a run whose ``max_epochs`` was raised on resume).

* :class:`LabelDiagnostics`, ``on_train_epoch_end`` (placed before :class:`LabelCorrection`
  by :meth:`ncl.methods.crcl.CRCL.configure_callbacks`, so it reads the labels the epoch
  trained with): the piece, label flips since the previous epoch, and the distribution of the
  corrected labels ``y_hat``, split by true clean/noisy pairs when the DataModule knows them
  (``clean_mask``; read here only, never in a loss; not with real noise such as CC152K,
  where the split and the detection scores are skipped with one info line). These are the
  numbers behind the paper's Fig. 1 (b, c, e, f).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import Tensor

from ncl.callbacks.diagnostics import _ground_truth
from ncl.metrics.noise_detection import detection_metrics

#: Bins of the logged label histograms over [0, 1] (the last bin includes 1).
HISTOGRAM_BINS = 10
#: A label at or above this counts as "clean" for flips and detection scores.
CLEAN_AT = 0.5


class LabelCorrection(L.Callback):
    """Moves the method's labels: per step (official rule) or per epoch (paper rule)."""

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        update = outputs.get("label_update") if isinstance(outputs, dict) else None
        if update is not None:
            index, stored = update
            pl_module.apply_label_update(index, stored)  # type: ignore[attr-defined]

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pl_module.prepare_labels(trainer.current_epoch)  # type: ignore[attr-defined]

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        following = trainer.current_epoch + 1
        if trainer.max_epochs is not None and 0 <= trainer.max_epochs <= following:
            return  # no next epoch to prepare for
        pl_module.prepare_labels(following)  # type: ignore[attr-defined]


def _quantiles(x: Tensor) -> tuple[float, float, float]:
    q = torch.quantile(x.double(), torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64))
    return float(q[0]), float(q[1]), float(q[2])


def _distribution(prefix: str, y: Tensor) -> dict[str, float]:
    """Mean, 10/50/90 % quantiles, zeros and histogram counts of labels ``y`` (n,)."""
    if y.numel() == 0:
        return {f"{prefix}/count": 0.0}
    q10, q50, q90 = _quantiles(y)
    out = {f"{prefix}/count": float(y.numel()), f"{prefix}/mean": float(y.mean()),
           f"{prefix}/q10": q10, f"{prefix}/q50": q50, f"{prefix}/q90": q90,
           f"{prefix}/zero": float((y == 0).sum())}
    counts = torch.histc(y.double(), bins=HISTOGRAM_BINS, min=0.0, max=1.0)
    for k, count in enumerate(counts.tolist()):
        out[f"{prefix}/hist{k:02d}"] = float(count)
    return out


def label_stats(labels: Tensor, true_clean: Tensor | None = None,
                previous: Tensor | None = None) -> dict[str, float]:
    """Scalar diagnostics of the corrected labels ``y_hat`` of the whole training set.

    Args:
        labels: ``(N,)`` corrected labels in [0, 1].
        true_clean: ``(N,)`` bool ground truth, or ``None``.
        previous: ``(N,)`` the labels at the previous report, or ``None``.

    Returns:
        ``labels/all/*`` (mean, quantiles, zeros, histogram counts over ``HISTOGRAM_BINS`` bins of
        [0, 1]); with ``previous``: ``labels/flips`` (pairs whose side of ``CLEAN_AT`` changed),
        ``labels/flips_to_noisy``, ``labels/flips_to_clean``, ``labels/mean_abs_change``; with
        the ground truth: ``labels/clean/*`` and ``labels/noisy/*`` (the same statistics per
        true subset) and ``labels/noisy_precision``, ``labels/noisy_recall``, ``labels/noisy_f1``
        of "label below ``CLEAN_AT``" as a noise detector (fractions).
    """
    y = labels.detach().float().cpu()
    out = _distribution("labels/all", y)
    clean_now = y >= CLEAN_AT
    if previous is not None and previous.shape == y.shape:
        before = previous.detach().float().cpu()
        clean_before = before >= CLEAN_AT
        out["labels/flips"] = float((clean_now != clean_before).sum())
        out["labels/flips_to_noisy"] = float((clean_before & ~clean_now).sum())
        out["labels/flips_to_clean"] = float((~clean_before & clean_now).sum())
        out["labels/mean_abs_change"] = float((y - before).abs().mean())
    if true_clean is not None:
        truth = true_clean.bool().cpu()
        out.update(_distribution("labels/clean", y[truth]))
        out.update(_distribution("labels/noisy", y[~truth]))
        m = detection_metrics(clean_now, truth)
        out["labels/noisy_precision"] = float(m["precision"])
        out["labels/noisy_recall"] = float(m["recall"])
        out["labels/noisy_f1"] = float(m["f1"])
    return out


class LabelDiagnostics(L.Callback):
    """Logs the piece and :func:`label_stats` of the method's labels at every epoch end.

    ``crcl/piece`` and ``crcl/epoch_in_piece`` are 0-based. The previous epoch's labels are
    kept on the method (``label_snapshot``, checkpointed) so flips are counted across a resume
    too.
    """

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        piece, within = pl_module.location(trainer.current_epoch)  # type: ignore[attr-defined]
        labels = pl_module.corrected_labels()  # type: ignore[attr-defined]
        stats = {"crcl/piece": float(piece), "crcl/epoch_in_piece": float(within)}
        stats.update(label_stats(labels, _ground_truth(trainer, labels.shape[0]),
                                 pl_module.label_snapshot))  # type: ignore[attr-defined]
        pl_module.label_snapshot = labels.clone()  # type: ignore[attr-defined]
        # Identical on every rank; sync_dist only keeps Lightning from warning about it.
        pl_module.log_dict(stats, on_step=False, on_epoch=True, sync_dist=True)
