"""The co-divide callback of NCR/LNC: at the end of every training epoch, divide the
training set for the next epoch (LNC Eq. 1-3 and 7; spec 4.2.3-4.2.5).

The computation is :func:`ncl.training.division.compute_division`; the method owns the
result (``module.division``, part of its checkpointed training state) and says which epochs
need one (:meth:`~ncl.methods.ncr.NCR.prepare_division`). Dividing at the end of epoch
``e`` for epoch ``e + 1`` uses exactly the weights the official code divides with at the
start of ``e + 1`` (nothing changes them in between), and it runs before the checkpoint
callbacks (Lightning calls monitoring callbacks last), so the checkpoint written at the end
of an epoch already holds the next epoch's division: a resumed run builds its first batch
plan from it. When no division is ready for an epoch (the first co-training epoch without
warm-up, a checkpoint written mid-epoch), the method computes it when it builds that epoch's
plan, from the same weights and seeds, so the result is the same either way.
"""

from __future__ import annotations

from typing import Protocol

import lightning as L


class DividingMethod(Protocol):
    """What :class:`CoDivide` needs from a method."""

    def prepare_division(self, epoch: int) -> None:
        """Make ``module.division`` hold epoch ``epoch``'s division if that epoch needs one."""


class CoDivide(L.Callback):
    """Divides the training set for the next epoch, at the end of every training epoch."""

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        following = trainer.current_epoch + 1
        if trainer.max_epochs is not None and 0 <= trainer.max_epochs <= following:
            return  # no next epoch to divide for
        pl_module.prepare_division(following)  # type: ignore[attr-defined]
