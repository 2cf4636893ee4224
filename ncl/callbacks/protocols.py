"""What ncl's callbacks need from a method: small typed protocols, nothing else.

A callback never probes a method with ``isinstance``/``getattr``: it is written against one of
these protocols, and a method that wants the callback implements it (structural typing; the
classes below are never subclassed). The callbacks do the work themselves (the per-sample pass,
the mixture fit, the update, the re-initialisation) and hand the result to the method, which
owns the state (checkpointed with its training state, identical on every rank).

* :class:`PerSampleSource` - what any per-sample pass over the training set needs.
* :class:`EpochPass` - one per-epoch pass over the training set and what takes its result
  (:mod:`ncl.callbacks.epoch_pass`); the division and the per-epoch refinement below are each
  turned into one by their callback.
* :class:`GMMDivisible` - :class:`~ncl.callbacks.division.GMMDivision` (NCR/LNC co-divide,
  ReCon's first stage): which epochs need a division, the pass that feeds the mixture, and
  what the method does with the clean probabilities.
* :class:`Refinable` - :class:`~ncl.callbacks.refinement.MomentumRefinement` (LNC's momentum
  targets, CRCL's corrected labels): the per-sample table, the rule, per step or per epoch.
* :class:`Diagnosable` - the observers (:class:`~ncl.callbacks.figures.Figures` and the
  diagnostics callback): display name, detection masks, loss and label panels, scalars.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from ncl.training.passes import PassSpec, PerSampleFn
from ncl.training.state import PerSampleState

__all__ = ["Diagnosable", "EpochDiagnostics", "EpochPass", "EpochRefinable", "GMMDivisible", "GMMSpec", "LabelView", "LossView",
           "PassSpec", "PerSampleFn", "PerSampleSource", "Refinable", "net_names"]

Mixture = Literal["gaussian", "beta"]


@dataclass(frozen=True)
class GMMSpec:
    """The two-component mixture fitted per network on one column of the pass's values
    (LNC Eq. 3; ReCon Eq. 6; L2RM's Beta mixture), min-max normalised first; rank 0's fit is
    broadcast.

    Attributes:
        column: which column of ``(B, C)`` values feeds the mixture (0 for ``(B,)`` values).
        seed: ``random_state`` of the mixture (``None``: numpy's global stream, official).
        max_iter, tol, reg_covar: the official 10 / 1e-2 / 5e-4 (spec 4.2.4).
        mixture: ``gaussian`` (sklearn's GaussianMixture: NCR/LNC, ReCon) or ``beta`` (a
            two-component Beta mixture on the losses clipped into (0, 1):
            :func:`ncl.division.beta_mixture.beta_clean_probability`, L2RM); ``reg_covar``
            is the Gaussian's only.
        refine_tol, refine_max_iter: Beta only: the EM continued after the first
            ``max_iter``/``tol`` fit until the log-likelihood gains at most ``refine_tol``
            (L2RM's second ``fit`` call; ``None``: no second phase), capped.
        density_clamp: Beta only: ``x`` clamped to ``[c, 1 - c]`` in the density (1e-6, the
            fork's ``x_eps``; 0: none; :func:`ncl.division.beta_mixture.beta_log_density`).
    """

    column: int = 0
    seed: int | None = 0
    max_iter: int = 10
    tol: float = 1e-2
    reg_covar: float = 5e-4
    mixture: Mixture = "gaussian"
    refine_tol: float | None = 0.1
    refine_max_iter: int = 1000
    density_clamp: float = 1e-6


class PerSampleSource(Protocol):
    """A LightningModule whose networks a per-sample pass can run."""

    nets: nn.ModuleList
    device: torch.device

    @property
    def training_seed(self) -> int: ...


class EpochPass(Protocol):
    """A pass over the training set made for one epoch, then its result accepted (run by
    :func:`~ncl.callbacks.epoch_pass.run_epoch_pass` at the end of the previous epoch, or at
    the epoch's start if missing). Built by a callback from the method's own protocol:
    :class:`GMMDivisible` (the values feed a mixture first) or :class:`EpochRefinable`."""

    description: str
    """What the pass is, for its progress bar (``"division pass"``)."""

    def due(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` needs a result the method does not hold yet."""

    def spec(self, epoch: int) -> PassSpec:
        """The per-sample function, networks, batches and shuffle of the pass."""

    def accept(self, epoch: int, values: Tensor) -> None:
        """Take the ``(K, N)`` (or ``(K, N, C)``) CPU values, identical on every rank."""


@runtime_checkable
class GMMDivisible(Protocol):
    """What :class:`~ncl.callbacks.division.GMMDivision` needs from a method."""

    def division_due(self, epoch: int) -> bool:
        """Whether ``epoch`` trains on a division the method does not hold yet."""

    def division_pass(self, epoch: int) -> tuple[PassSpec, GMMSpec]:
        """The pass whose values feed the mixture, and the mixture's settings."""

    def accept_division(self, epoch: int, values: Tensor, clean_prob: Tensor) -> None:
        """Take epoch ``epoch``'s division: ``values`` ``(K, N, ...)`` from the pass and
        ``clean_prob`` ``(K, N)`` from the mixture, identical on every rank (CPU tensors)."""


RefineWhen = Literal["step", "epoch"]


@runtime_checkable
class Refinable(Protocol):
    """What :class:`~ncl.callbacks.refinement.MomentumRefinement` needs from a method.

    Per step (``refinement_when() == "step"``): the training step returns
    ``{"refine": (row, index, values), ...}`` and the callback writes ``rule(old, values)`` into
    ``refinement_table().values[row, index]`` on every rank (all-gathered by index, rank order).
    Per epoch: the method is an :class:`EpochRefinable` too.
    """

    def refinement_table(self) -> PerSampleState: ...

    def refinement_when(self) -> RefineWhen: ...

    def refinement_rule(self) -> Callable[[Tensor, Tensor], Tensor]:
        """``(old, new) -> stored`` (momentum ``beta * old + (1 - beta) * new``, or overwrite)."""


@runtime_checkable
class EpochRefinable(Refinable, Protocol):
    """A :class:`Refinable` whose table moves once per epoch from a per-sample pass: at the end
    of epoch ``e - 1`` (and as a fallback at the start of ``e``) the callback runs
    ``refinement_pass(e)`` when ``refinement_due(e)`` and hands the ``(N,)`` values (``(N, C)``
    for a pass with several columns: DECL's prediction) to ``accept_refinement``."""

    def refinement_due(self, epoch: int) -> bool: ...

    def refinement_pass(self, epoch: int) -> PassSpec: ...

    def accept_refinement(self, epoch: int, values: Tensor) -> None: ...


@dataclass
class LossView:
    """A division's per-sample losses as its mixture saw them, for the loss-histogram figure.

    Attributes:
        title: what the losses are ("per-sample loss (mean hinge) and GMM").
        losses: network name -> ``(N,)`` raw losses (normalised by the figure).
        gmm_seed: seed of the refit drawn (the division's own).
        mixture: the division's mixture; only a Gaussian one is refitted and drawn over the
            histogram (a Beta mixture's division shows the histogram alone).
    """

    title: str
    losses: dict[str, Tensor]
    gmm_seed: int | None = 0
    mixture: Mixture = "gaussian"


@dataclass
class LabelView:
    """One per-sample label set in effect, for the label-histogram figure."""

    title: str
    values: Tensor  # (N,) in [0, 1]
    xlabel: str = "label (0 = noisy, 1 = clean)"


@dataclass
class EpochDiagnostics:
    """What a method shows about one training epoch (all on CPU, identical on every rank).

    Attributes:
        scalars: logged as they are (``division/...``, ``labels/...``).
        detection: series name -> ``(N,)`` bool *predicted clean* mask, scored against the
            ground truth when the data has one (precision/recall/F1 of the noisy pairs).
        losses: the division made for the epoch, or ``None``.
        labels: the label sets the epoch trains with.
        noise_detection: the method's noise detection against the ground truth in the one
            schema of every dividing method (:mod:`ncl.division.detection`: ``precision``,
            ``recall``, ``f1`` and extras), logged as ``train/detection/<key>``; empty for a
            method that does not divide, an epoch without a division, or no ground truth.
    """

    scalars: dict[str, float] = field(default_factory=dict)
    detection: dict[str, Tensor] = field(default_factory=dict)
    losses: LossView | None = None
    labels: list[LabelView] = field(default_factory=list)
    noise_detection: dict[str, float] = field(default_factory=dict)


class Diagnosable(Protocol):
    """What the observers (figures, diagnostics) need; the base class implements it empty."""

    @property
    def display_name(self) -> str:
        """The method's name in titles (``LNC`` for NCR with LNC's switches)."""

    def is_warmup_epoch(self, epoch: int) -> bool: ...

    def epoch_diagnostics(self, epoch: int, true_clean: Tensor | None) -> EpochDiagnostics:
        """What epoch ``epoch`` trains on (called before its first training batch, when every
        epoch-start hook, any division for the epoch included, has run)."""


def net_names(count: int) -> Sequence[str]:
    """``("net",)`` for one network, ``("A", "B", ...)`` for several."""
    return ("net",) if count == 1 else tuple(chr(ord("A") + i) for i in range(count))
