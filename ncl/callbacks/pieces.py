"""CRCL's self-refining pieces (Algorithm 1; spec 4.4.3): re-initialise at every piece boundary.

At the start of the first epoch of every piece after the first, the method's networks get
fresh weights and the optimiser's state is cleared (:meth:`ncl.methods.crcl.CRCL.start_piece`);
the per-sample labels carry over and the learning-rate schedule restarts through the
method's ``lr_factor`` (``LambdaLR`` already set the new piece's first rate when it stepped at
the end of the previous epoch).

Lightning calls callbacks' ``on_train_epoch_start`` before the module's, which then reseeds
torch's global stream for the epoch; the re-initialisation draws from a private stream seeded
by ``(seed, piece)`` instead, so it neither depends on nor moves the global stream. A resumed
run re-initialises at the same boundary with the same weights: a checkpoint written at the end
of a piece holds that piece's weights and ``initialised_piece`` of that piece, and a checkpoint
written after the boundary holds ``initialised_piece`` of the new piece, which makes
``start_piece`` a no-op.
"""

from __future__ import annotations

from typing import Protocol

import lightning as L

from ncl.training.pieces import PieceLocation


class PiecewiseMethod(Protocol):
    """What :class:`SelfRefiningPieces` needs from a method."""

    def location(self, epoch: int | None = None) -> PieceLocation:
        """``(piece, epoch_in_piece)`` of a global epoch."""

    def start_piece(self, piece: int, optimizers: list) -> bool:
        """Re-initialise for ``piece`` unless already done; returns whether it did."""


class SelfRefiningPieces(L.Callback):
    """Re-initialises the method (networks and optimiser state) at every piece boundary."""

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        piece, within = pl_module.location(trainer.current_epoch)  # type: ignore[attr-defined]
        if piece > 0 and within == 0:
            pl_module.start_piece(piece, trainer.optimizers)  # type: ignore[attr-defined]
