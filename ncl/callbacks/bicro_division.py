"""BiCro's division as an :class:`~ncl.callbacks.protocols.EpochPass` (docs/methods/bicro.md).

:class:`~ncl.callbacks.division.GMMDivision` fits its own mixture (sklearn's Gaussian or
L2RM's Beta) before the method sees the values; BiCro's Beta mixture is another one
(:mod:`ncl.division.bicro`), so here the method takes the pass's raw ``(K, N)`` values and fits
its mixture itself. The pass, the hooks (one epoch ahead, the epoch's start as a fallback) and
the loader's own call (:func:`divide_now_if_due`) are the shared ones of
:mod:`ncl.callbacks.epoch_pass`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import lightning as L
from torch import Tensor

from ncl.callbacks.epoch_pass import EpochPassCallback, run_epoch_pass
from ncl.callbacks.protocols import PassSpec, PerSampleSource
from ncl.errors import ConfigError


@runtime_checkable
class ValuesDivisible(Protocol):
    """A method that divides the training set from a per-sample pass's raw values."""

    def division_due(self, epoch: int) -> bool:
        """Whether ``epoch`` trains on a division the method does not hold yet."""

    def values_pass(self, epoch: int) -> PassSpec:
        """The per-sample pass whose values the method divides."""

    def accept_values(self, epoch: int, values: Tensor) -> None:
        """Take the ``(K, N)`` CPU values (identical on every rank) and divide."""


@dataclass
class ValuesDivisionPass:
    """``ValuesDivisible`` as an :class:`~ncl.callbacks.protocols.EpochPass`."""

    method: ValuesDivisible
    description: str = "division pass"

    def due(self, epoch: int) -> bool:
        return self.method.division_due(epoch)

    def spec(self, epoch: int) -> PassSpec:
        return self.method.values_pass(epoch)

    def accept(self, epoch: int, values: Tensor) -> None:
        self.method.accept_values(epoch, values)


def _divisible(pl_module: L.LightningModule) -> ValuesDivisible:
    if not isinstance(pl_module, ValuesDivisible):
        raise ConfigError(f"ValuesDivision needs a method implementing ncl.callbacks."
                          f"bicro_division.ValuesDivisible; {type(pl_module).__name__} does not")
    return pl_module


def divide_now_if_due(trainer: L.Trainer, method: PerSampleSource, epoch: int) -> bool:
    """Make ``epoch``'s division now if it is due (every rank); whether it was made."""
    return run_epoch_pass(trainer, method, ValuesDivisionPass(_divisible(method)), epoch)


class ValuesDivision(EpochPassCallback):
    """Makes the division an epoch trains on: one epoch ahead, or at its start if missing."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        _divisible(pl_module)

    def epoch_pass(self, pl_module: L.LightningModule) -> ValuesDivisionPass:
        return ValuesDivisionPass(_divisible(pl_module))
