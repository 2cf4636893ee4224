"""Self-refining (SR) pieces as a plug-in (CRCL Algorithm 1; spec 4.4.3), for any method.

Training is split into consecutive pieces of ``pieces[i]`` epochs. At the first epoch of every
piece after the first, :class:`SelfRefining`

* gives every network of the method fresh weights from its backbone factory, drawn under a
  private random stream seeded by ``(seed, piece)`` (:data:`REINIT_STREAM`) and copied into the
  existing parameters, so the optimiser (and DDP) keep their references, every rank gets the
  same weights and torch's global stream does not move;
* clears the optimisers' state (Adam's moments and step), as the official code builds a new
  optimiser;
* restarts the step learning-rate schedule: every ``LambdaLR`` factor ``f`` is replaced, once
  at the start of training, by ``epoch -> f(epoch - start of its piece)`` (epochs past the last
  piece continue it), so ``LambdaLR``'s step at the end of a piece already sets the new piece's
  first rate;
* carries everything else over (CRCL's soft labels, any per-sample state of the method).

The re-initialisation runs in ``on_train_epoch_start``, before the module's own hook reseeds
torch's global stream for the epoch. The last re-initialised piece is saved with the callback's
state, so a run resumed from a checkpoint written inside a piece does not re-initialise again,
and a run resumed from the checkpoint of a piece's last epoch re-initialises at the boundary
exactly as the uninterrupted run did. Use it from the command line on any method::

    ncl fit --config configs/quickstart.yaml --trainer.callbacks+=ncl.callbacks.SelfRefining \\
        --trainer.callbacks.pieces=[2,2] --trainer.max_epochs=4

CRCL attaches it itself from ``model.pieces`` (:meth:`ncl.methods.crcl.CRCL.method_callbacks`).
Manual-optimisation methods (NCR/LNC) set their learning rates from the same ``LambdaLR``
factors at every epoch start (:meth:`~ncl.methods.base.RetrievalMethod.apply_lr_factor`), so
they see the restarted schedule too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast, runtime_checkable

import lightning as L
import torch
from torch import nn

from ncl.data.samplers import epoch_seed
from ncl.errors import ConfigError
from ncl.training.pieces import PieceSchedule
from ncl.streams import declare_stream

#: Stream id of :func:`~ncl.data.samplers.epoch_seed` for the weights of a re-initialised
#: piece (the ``epoch`` slot of the seed holds the piece).
REINIT_STREAM = declare_stream(21, "self_refining.reinit")


@runtime_checkable
class Rebuildable(Protocol):
    """What :class:`SelfRefining` needs from a method (any ncl ``RetrievalMethod``)."""

    nets: nn.ModuleList
    backbone_factory: Callable[[int], nn.Module]
    hparams: Any  # holds ``vocab_size``, the factory's argument
    training_seed: int  # the run's seed (checkpointed)


def fresh_weights(method: Rebuildable, piece: int) -> None:
    """Copy freshly built networks of piece ``piece`` into ``method.nets`` (seeded, in place).

    One private stream seeded ``epoch_seed(training_seed, piece, REINIT_STREAM)`` builds all
    networks in order; torch's global stream is left where it was.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(epoch_seed(method.training_seed, piece, REINIT_STREAM))
        fresh = [method.backbone_factory(method.hparams.vocab_size) for _ in method.nets]
    with torch.no_grad():
        for net, new in zip(method.nets, fresh):
            net.load_state_dict(new.state_dict())


def restart_at(factor: Callable[[int], float], starts: Sequence[int]) -> Callable[[int], float]:
    """``epoch -> factor(epoch - s)`` with ``s`` the last of ``starts`` at or before ``epoch``.

    A plain closure: ``LambdaLR.state_dict`` saves the ``__dict__`` of a callable object (and
    so whatever it holds) but nothing of a function.
    """
    def restarted(epoch: int) -> float:
        return factor(epoch - max(s for s in starts if s <= epoch))
    return restarted


class SelfRefining(L.Callback):
    """Re-initialises the method at the first epoch of every piece after the first.

    Args:
        pieces: epochs of each piece, the paper's ``[e_1, ..., e_m]`` (each >= 1). Epochs past
            their sum continue the last piece.
    """

    def __init__(self, pieces: list[int]) -> None:
        try:
            self.schedule = PieceSchedule(tuple(pieces))
        except (TypeError, ValueError) as err:
            raise ConfigError(f"SelfRefining: pieces must be a non-empty list of epochs per "
                              f"piece (each >= 1), got {pieces!r}") from err
        self.initialised_piece = 0  # the last piece whose re-initialisation was applied

    def piece_of(self, epoch: int) -> int:
        """The piece of global ``epoch`` (the last one for epochs past the schedule)."""
        return sum(1 for s in self.schedule.starts if s <= epoch) - 1

    # ------------------------------------------------------------------ Lightning hooks
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if not isinstance(pl_module, Rebuildable):
            raise ConfigError(f"SelfRefining needs an ncl method (its networks, backbone factory "
                              f"and seed); {type(pl_module).__name__} is not one")
        if stage == "fit":  # a new fit; a checkpoint's state is restored after setup
            self.initialised_piece = 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Restart every ``LambdaLR`` at the piece starts (after any checkpoint was restored:
        its scheduler state keeps the wrapped functions)."""
        for config in trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            if isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
                starts = self.schedule.starts
                scheduler.lr_lambdas = [restart_at(f, starts) for f in scheduler.lr_lambdas]

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        epoch = trainer.current_epoch
        piece = self.piece_of(epoch)
        if piece <= self.initialised_piece or epoch != self.schedule.starts[piece]:
            return
        fresh_weights(cast(Rebuildable, pl_module), piece)  # checked in setup
        for optimizer in trainer.optimizers:
            optimizer.state.clear()
        self.initialised_piece = piece

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {"initialised_piece": self.initialised_piece}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.initialised_piece = int(state_dict["initialised_piece"])

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        """A checkpoint without this callback's state (written by a run without it, or by a
        CRCL before the callback kept it): the piece of the epoch it was written in had
        started. :meth:`load_state_dict` runs afterwards and overrides this when it can."""
        self.initialised_piece = self.piece_of(int(checkpoint.get("epoch", 0)))
