"""A division of the training set by a two-component mixture, made for the epoch that trains on
it: NCR/LNC's co-divide and Randomly Noise Abandon draw (LNC Eq. 1-3, 7), ReCon's first stage
(GMM on ``l^CM``, Eq. 6), L2RM's division by a Beta mixture (``GMMSpec.mixture = "beta"``).

The method states what it needs through :class:`~ncl.callbacks.protocols.GMMDivisible` (which
epochs need a division, the per-sample pass and the mixture's settings, what it does with the
clean probabilities) and owns the result (its checkpointed training state). The division is an
:class:`~ncl.callbacks.protocols.EpochPass` (:class:`DivisionPass`): the eval-mode pass, one
mixture per network on the chosen column (:func:`~ncl.division.co_divide.gmm_probabilities`;
rank 0's fit broadcast, :func:`fit_mixtures`), then ``accept_division``.
:class:`GMMDivision` runs it one epoch ahead and at the epoch's start as a fallback
(:class:`~ncl.callbacks.epoch_pass.EpochPassCallback`). A method whose training loader depends
on the division (NCR's batch plan, L2RM's; built before any epoch-start hook) calls
:func:`divide_if_due` itself when it builds the loader; the result is the same whichever runs
first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import lightning as L
import torch
from torch import Tensor

from ncl.callbacks.epoch_pass import EpochPassCallback, run_epoch_pass
from ncl.callbacks.protocols import GMMDivisible, GMMSpec, PassSpec, PerSampleSource
from ncl.division.beta_mixture import beta_clean_probability
from ncl.division.co_divide import gmm_probabilities
from ncl.errors import ConfigError
from ncl.training.distributed import broadcast_


@runtime_checkable
class DivisibleMethod(GMMDivisible, PerSampleSource, Protocol):
    """A method :func:`divide_if_due` can divide for: its networks and the division protocol."""


@dataclass
class DivisionPass:
    """A method's division as an :class:`~ncl.callbacks.protocols.EpochPass`: the pass's
    values, one mixture per network on ``GMMSpec.column``, then ``accept_division``."""

    method: GMMDivisible
    description: str = "division pass"
    _gmm: GMMSpec = field(default_factory=GMMSpec)  # the mixture of the latest spec

    def due(self, epoch: int) -> bool:
        return self.method.division_due(epoch)

    def spec(self, epoch: int) -> PassSpec:
        spec, self._gmm = self.method.division_pass(epoch)
        return spec

    def accept(self, epoch: int, values: Tensor) -> None:
        column = values if values.dim() == 2 else values[..., self._gmm.column]  # (K, N)
        self.method.accept_division(epoch, values, fit_mixtures(column, self._gmm))


def divide_if_due(trainer: L.Trainer, method: DivisibleMethod, epoch: int) -> bool:
    """Make epoch ``epoch``'s division if ``method.division_due(epoch)`` (on every rank).

    Returns:
        Whether a division was made now.
    """
    return run_epoch_pass(trainer, method, DivisionPass(method), epoch)


def fit_mixtures(values: Tensor, gmm: GMMSpec) -> Tensor:
    """``(K, N)`` clean probabilities from one mixture per row of ``(K, N)`` values (Gaussian or
    Beta, ``gmm.mixture``), rank 0's on every rank (the fits may differ between ranks with
    ``seed=None`` or another BLAS)."""
    if gmm.mixture == "beta":
        prob = torch.stack([beta_clean_probability(row, gmm.max_iter, gmm.tol, gmm.refine_tol,
                                                   gmm.refine_max_iter, gmm.seed,
                                                   clamp=gmm.density_clamp).float()
                            for row in values])
    elif gmm.mixture == "gaussian":
        prob = gmm_probabilities(values, gmm.seed, gmm.max_iter, gmm.tol, gmm.reg_covar)
    else:
        raise ConfigError(f"the division's mixture must be 'gaussian' or 'beta', got {gmm.mixture!r}")
    return broadcast_(prob)


def _divisible(pl_module: L.LightningModule) -> DivisibleMethod:
    if not isinstance(pl_module, DivisibleMethod):
        raise ConfigError(f"GMMDivision needs a method implementing ncl.callbacks.protocols."
                          f"GMMDivisible; {type(pl_module).__name__} does not")
    return pl_module


class GMMDivision(EpochPassCallback):
    """Makes the division an epoch trains on: one epoch ahead, or at its start if missing."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        _divisible(pl_module)  # one clear error before training instead of one in a hook

    def epoch_pass(self, pl_module: L.LightningModule) -> DivisionPass:
        return DivisionPass(_divisible(pl_module))
