"""ReCon's three-way division (CVPR 2025, Sect. 3.3): when it is made, and what is logged.

The division lives on the method (``module.division``, a
:class:`~ncl.division.three_way.ThreeWayDivision`, with the pseudo-label table
``module.pseudo_labels``, both in its checkpointed training state); the method computes it
(:meth:`ncl.methods.recon.ReCon.prepare_division`, idempotent). These callbacks only say when:

* :class:`ThreeWayDivide` - ``on_train_epoch_end``: the next epoch's division, from the
  weights at the end of this epoch. It runs before the checkpoint callbacks (Lightning calls
  them last), so the checkpoint of epoch ``e`` already holds epoch ``e + 1``'s division and a
  resumed run trains on it unchanged. ``on_train_epoch_start``: the same as a fallback when it
  is missing (the first epoch without warm-up, a run whose ``max_epochs`` was raised on resume),
  from the same weights, so the result is the same either way.
* :class:`ThreeWayDiagnostics` - ``on_train_epoch_start`` (after :class:`ThreeWayDivide`): the
  sizes of ``D_c``, ``D_l``, ``D_n`` in effect for the epoch and, when the DataModule knows the
  ground truth (``clean_mask``; read here only, never in a loss), how many truly noisy pairs
  each holds.
"""

from __future__ import annotations

import lightning as L
import torch
from torch import Tensor

from ncl.callbacks.diagnostics import _ground_truth
from ncl.division.three_way import ThreeWayDivision
from ncl.losses.recon import SUBSET_CLEAN, SUBSET_LOCAL, SUBSET_NOISY

_NAMES = (("clean", SUBSET_CLEAN), ("local", SUBSET_LOCAL), ("noisy", SUBSET_NOISY))


class ThreeWayDivide(L.Callback):
    """Makes the division an epoch trains on: one epoch ahead, or at its start if missing."""

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pl_module.prepare_division(trainer.current_epoch)  # type: ignore[attr-defined]

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        following = trainer.current_epoch + 1
        if trainer.max_epochs is not None and 0 <= trainer.max_epochs <= following:
            return  # no next epoch to divide for
        pl_module.prepare_division(following)  # type: ignore[attr-defined]


def three_way_stats(division: ThreeWayDivision,
                    true_clean: Tensor | None = None) -> dict[str, float]:
    """Scalar diagnostics of one division.

    Args:
        division: the division (``subset`` is ``(N,)``).
        true_clean: ``(N,)`` bool ground truth, or ``None``.

    Returns:
        ``division/{clean,local,noisy}`` (subset sizes), ``division/made_for_epoch``,
        ``division/pseudo_label_mean`` (mean ``y_hat`` over ``D_n``, when it is not empty),
        ``division/penalty_mean`` (mean ``lambda`` over ``D_l``, when not empty) and, with the
        ground truth, ``division/{clean,local,noisy}_true_noisy`` (truly noisy pairs in each).
    """
    subset = division.subset
    out: dict[str, float] = {"division/made_for_epoch": float(division.epoch)}
    for name, code in _NAMES:
        members = subset == code
        out[f"division/{name}"] = float(members.sum())
        if true_clean is not None:
            out[f"division/{name}_true_noisy"] = float((members & ~true_clean).sum())
    noisy, local = subset == SUBSET_NOISY, subset == SUBSET_LOCAL
    if bool(noisy.any()):
        out["division/pseudo_label_mean"] = float(division.labels[noisy].mean())
    if bool(local.any()):
        out["division/penalty_mean"] = float(division.penalty[local].mean())
    return out


class ThreeWayDiagnostics(L.Callback):
    """Logs :func:`three_way_stats` of the division in effect, at every epoch that has one."""

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        division = getattr(pl_module, "division", None)
        if division is None or division.epoch > trainer.current_epoch:
            return
        truth = _ground_truth(trainer, division.subset.shape[0])
        stats = three_way_stats(division, None if truth is None else truth.to(torch.bool))
        # Identical on every rank; sync_dist only keeps Lightning from warning about it.
        pl_module.log_dict(stats, on_step=False, on_epoch=True, sync_dist=True)
