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
* per epoch (``refinement_when() == "epoch"``): the per-epoch pass of
  :mod:`ncl.callbacks.epoch_pass` (:class:`RefinementPass`): when ``refinement_due(e)``, the
  eval-mode pass ``refinement_pass(e)`` over the whole training set and
  ``accept_refinement(e, values)``, at the end of epoch ``e - 1`` (so its checkpoint holds
  epoch ``e``'s table) or, as a fallback, at the start of ``e``; never twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import lightning as L
from torch import Tensor

from ncl.callbacks.epoch_pass import EpochPassCallback
from ncl.callbacks.protocols import EpochRefinable, PassSpec, Refinable
from ncl.errors import ConfigError


@dataclass
class RefinementPass:
    """A per-epoch refinement as an :class:`~ncl.callbacks.protocols.EpochPass`: the method's
    ``refinement_pass`` and ``accept_refinement`` with the ``(N,)`` or ``(N, C)`` values."""

    method: EpochRefinable
    description: str = "refinement pass"

    def due(self, epoch: int) -> bool:
        return self.method.refinement_due(epoch)

    def spec(self, epoch: int) -> PassSpec:
        return self.method.refinement_pass(epoch)

    def accept(self, epoch: int, values: Tensor) -> None:
        self.method.accept_refinement(epoch, values[0])  # one network's values


class MomentumRefinement(EpochPassCallback):
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

    def epoch_pass(self, pl_module: L.LightningModule) -> RefinementPass | None:
        """The per-epoch pass of a method whose table moves per epoch (none per step)."""
        method = cast(EpochRefinable, pl_module)  # checked in setup
        return RefinementPass(method) if method.refinement_when() == "epoch" else None
