"""The :class:`Diagnostics` observer: logs what a method says about each training epoch.

Generic: it knows no method. Before an epoch's first training batch it asks the method for
its :meth:`~ncl.callbacks.protocols.Diagnosable.epoch_diagnostics` and logs the scalars
(division sizes and noise-detection P/R/F1 of NCR/LNC, ReCon's subsets, CRCL's label
distribution; :mod:`ncl.division.stats`) and, for a method that divides the data, its noise
detection in the one schema every such method reports, ``train/detection/{precision,recall,f1}``
and extras (:mod:`ncl.division.detection`). The methods attach it themselves when their
``diagnostics`` option is on; the :class:`~ncl.callbacks.figures.Figures` observer draws from
the same report.

The ground truth comes from the DataModule (``clean_mask``, synthetic or injected noise) and is
read only by observers, never in a loss. With real noise (CC152K, ``clean_mask_known`` false)
it is ``None``, with one info line per run saying why.
"""

from __future__ import annotations

from typing import Any, cast

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from ncl.callbacks.protocols import Diagnosable
from ncl.data.contracts import clean_mask_known
from ncl.division.detection import PREFIX

#: Set on a trainer once it was told that its data has no ground truth (one line per run).
_TOLD_NO_TRUTH = "_ncl_told_no_ground_truth"


def ground_truth(trainer: L.Trainer, num_samples: int | None = None) -> Tensor | None:
    """The DataModule's clean mask as a ``(N,)`` bool tensor, if it has one (of length
    ``num_samples`` when given).

    ``None`` too when the data has real noise (CC152K, ``clean_mask_known`` false): its mask
    calls every pair clean, and scores against it (noise-detection F1 = 0, "clean" label
    histograms) would be wrong rather than missing. One info line says so, once per run.
    """
    datamodule = trainer.datamodule
    if datamodule is not None and not clean_mask_known(datamodule):
        _tell_no_truth(trainer)
        return None
    try:
        mask = datamodule.clean_mask
    except (AttributeError, RuntimeError):
        return None
    mask = torch.as_tensor(np.asarray(mask), dtype=torch.bool)
    return mask if num_samples is None or mask.shape == (num_samples,) else None


def _tell_no_truth(trainer: L.Trainer) -> None:
    """Log, once per trainer, why the ground-truth diagnostics are missing."""
    if getattr(trainer, _TOLD_NO_TRUTH, False):
        return
    setattr(trainer, _TOLD_NO_TRUTH, True)
    rank_zero_info("ncl: noise-detection diagnostics against the ground truth are skipped: the "
                   "training pairs have real noise (data.real_noise, e.g. CC152K), so which "
                   "pairs are clean is unknown; division sizes and label statistics are still "
                   "logged")


class Diagnostics(L.Callback):
    """Logs the scalars of the method's ``epoch_diagnostics`` once per epoch.

    Called before the epoch's first training batch, when every epoch-start hook (the division
    made for the epoch included) has run, whatever the order of the callbacks. The values are
    identical on every rank; ``sync_dist`` only keeps Lightning from warning about it.
    """

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if batch_idx != 0:
            return
        method = cast(Diagnosable, pl_module)
        report = method.epoch_diagnostics(trainer.current_epoch, ground_truth(trainer))
        if report.scalars:
            pl_module.log_dict(report.scalars, on_step=False, on_epoch=True, sync_dist=True)
        if report.noise_detection:
            pl_module.log_dict(detection_metrics(report.noise_detection), on_step=False, on_epoch=True,
                               sync_dist=True, batch_size=1)


def detection_metrics(noise_detection: dict[str, float]) -> dict[str, Tensor]:
    """The schema's keys (``train/detection/<key>``) with float64 values: Lightning would log
    a Python float as float32, and the grid reads these numbers to the last digit
    (:mod:`ncl.division.detection`). ``batch_size=1`` keeps the epoch mean ``value * 1 / 1``."""
    return {f"{PREFIX}{key}": torch.tensor(value, dtype=torch.float64)
            for key, value in noise_detection.items()}
