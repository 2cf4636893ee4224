"""A division of the training set by a two-component mixture, made for the epoch that trains on
it: NCR/LNC's co-divide and Randomly Noise Abandon draw (LNC Eq. 1-3, 7), ReCon's first stage
(GMM on ``l^CM``, Eq. 6), L2RM's division by a Beta mixture (``GMMSpec.mixture = "beta"``).

The method states what it needs through :class:`~ncl.callbacks.protocols.GMMDivisible` (which
epochs need a division, the per-sample pass and the mixture's settings, what it does with the
clean probabilities) and owns the result (its checkpointed training state);
:func:`divide_if_due` does the work: the eval-mode pass (:func:`~ncl.training.passes.run_pass`,
sharded over ranks and gathered by index), one mixture per network on the chosen column
(:func:`~ncl.division.co_divide.gmm_probabilities`; rank 0's fit broadcast, :func:`fit_mixtures`), then
``accept_division``.

:class:`GMMDivision` calls it in ``on_train_epoch_end`` of epoch ``e - 1`` for epoch ``e``
(Lightning runs the checkpoint callbacks after the others, so the checkpoint of ``e - 1``
already holds ``e``'s division and a resumed run trains on it unchanged) and in
``on_train_epoch_start`` of ``e`` as a fallback (the first epoch without warm-up, a run whose
``max_epochs`` was raised on resume). A method whose training loader depends on the division
(NCR's batch plan, built before any epoch-start hook) calls :func:`divide_if_due` itself when
it builds the loader. ``division_due`` is false once the method holds the epoch's division,
and nothing changes the weights between these points, so the result is the same whichever
runs first.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import lightning as L
import torch
from torch import Tensor

from ncl.callbacks.protocols import GMMDivisible, GMMSpec, PerSampleSource
from ncl.data.contracts import retrieval_data
from ncl.errors import ConfigError
from ncl.division.beta_mixture import beta_clean_probability
from ncl.division.co_divide import gmm_probabilities
from ncl.training.distributed import broadcast_
from ncl.training.passes import run_pass
from ncl.training.schedule import has_epoch


@runtime_checkable
class DivisibleMethod(GMMDivisible, PerSampleSource, Protocol):
    """A method :func:`divide_if_due` can divide for: its networks and the division protocol."""


def divide_if_due(trainer: L.Trainer, method: DivisibleMethod, epoch: int) -> bool:
    """Make epoch ``epoch``'s division if ``method.division_due(epoch)`` (on every rank).

    Returns:
        Whether a division was made now.
    """
    if not method.division_due(epoch):
        return False
    spec, gmm = method.division_pass(epoch)
    data = retrieval_data(trainer, type(method).__name__)
    values = run_pass(spec, method.nets, data.train_pairs(), epoch, method.device,
                      trainer.global_rank, trainer.world_size, data.num_workers,
                      description="division pass").cpu()  # (K, N, ...)
    column = values if values.dim() == 2 else values[..., gmm.column]  # (K, N)
    method.accept_division(epoch, values, fit_mixtures(column, gmm))
    return True


def fit_mixtures(values: Tensor, gmm: GMMSpec) -> Tensor:
    """``(K, N)`` clean probabilities from one mixture per row of ``(K, N)`` values (Gaussian or
    Beta, ``gmm.mixture``), rank 0's on every rank (the fits may differ between ranks with
    ``seed=None`` or another BLAS)."""
    if gmm.mixture == "beta":
        prob = torch.stack([beta_clean_probability(row, gmm.max_iter, gmm.tol, gmm.refine_tol,
                                                   gmm.refine_max_iter, gmm.seed).float()
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


class GMMDivision(L.Callback):
    """Makes the division an epoch trains on: one epoch ahead, or at its start if missing."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        _divisible(pl_module)  # one clear error before training instead of one in a hook

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        divide_if_due(trainer, _divisible(pl_module), trainer.current_epoch)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        following = trainer.current_epoch + 1
        if has_epoch(trainer.max_epochs, following):
            divide_if_due(trainer, _divisible(pl_module), following)
