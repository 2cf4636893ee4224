"""Momentum refinement of a per-sample table (LNC's momentum targets, Eq. 5; CRCL's soft
labels, Eq. 10-12), per training step or once per epoch. With the overwrite rule the per-epoch
path is any method's per-epoch, per-sample pass into its table: DECL's correspondence
prediction runs through it.

The method owns the table (a :class:`~ncl.training.state.PerSampleState`, checkpointed with
its training state) and states what moves it through :class:`~ncl.callbacks.protocols.Refinable`;
:class:`MomentumRefinement` does the moving:

* per step (``refinement_when() == "step"``), ``on_train_batch_end``: the training step returns
  ``{"refine": (row, index, values), ...}`` and the callback writes
  ``rule(old, values)`` into row ``row`` at ``index``. The table all-gathers every rank's
  ``(index, values)`` and applies them in rank order, so every rank holds the same table after
  every step (:meth:`~ncl.training.state.PerSampleState.scatter`);
* per epoch (``refinement_when() == "epoch"``), ``on_train_epoch_end`` of epoch ``e - 1``:
  when ``refinement_due(e)``, the eval-mode pass ``refinement_pass(e)`` over the whole training
  set (:func:`~ncl.training.passes.run_pass`) and ``accept_refinement(e, values)``. Lightning
  runs the checkpoint callbacks after the other callbacks' epoch-end hooks, so the checkpoint of
  epoch ``e - 1`` already holds epoch ``e``'s table. ``on_train_epoch_start`` of ``e`` does the
  same as a fallback (a checkpoint written before the epoch-end hook, a run whose
  ``max_epochs`` was raised on resume); ``refinement_due`` is false once the method holds the
  epoch's values, so the two hooks never refine twice, and both see the same weights.
"""

from __future__ import annotations

from typing import Any, cast

import lightning as L

from ncl.callbacks.protocols import EpochRefinable, Refinable
from ncl.data.contracts import retrieval_data
from ncl.errors import ConfigError
from ncl.training.passes import run_pass
from ncl.training.schedule import has_epoch


class MomentumRefinement(L.Callback):
    """Moves a :class:`~ncl.callbacks.protocols.Refinable` method's per-sample table."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # one clear error here instead of one in a hook
        per_epoch = isinstance(pl_module, Refinable) and pl_module.refinement_when() == "epoch"
        wanted = EpochRefinable if per_epoch else Refinable
        if not isinstance(pl_module, wanted):
            raise ConfigError(f"MomentumRefinement needs a method implementing ncl.callbacks."
                              f"protocols.{wanted.__name__}; {type(pl_module).__name__} does not")

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        method = cast(Refinable, pl_module)  # checked in setup
        refine = outputs.get("refine") if isinstance(outputs, dict) else None
        if method.refinement_when() != "step" or refine is None:
            return
        row, index, values = refine  # (), (B,), (B,): this rank's batch
        method.refinement_table().scatter(row, index, values, method.refinement_rule())

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._refine(trainer, pl_module, trainer.current_epoch)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        following = trainer.current_epoch + 1
        if has_epoch(trainer.max_epochs, following):
            self._refine(trainer, pl_module, following)

    @staticmethod
    def _refine(trainer: L.Trainer, pl_module: L.LightningModule, epoch: int) -> None:
        """Epoch ``epoch``'s table from a pass with the current weights, if it is due."""
        method = cast(EpochRefinable, pl_module)  # checked in setup
        if method.refinement_when() != "epoch" or not method.refinement_due(epoch):
            return
        data = retrieval_data(trainer, type(pl_module).__name__)
        values = run_pass(method.refinement_pass(epoch), pl_module.nets, data.train_pairs(), epoch,
                          pl_module.device, trainer.global_rank, trainer.world_size,
                          data.num_workers, description="refinement pass")
        method.accept_refinement(epoch, values[0].cpu())  # (N,) or (N, C), identical on every rank
