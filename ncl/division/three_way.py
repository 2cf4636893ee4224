"""ReCon's true correspondence discrimination as pure tensor functions (CVPR 2025, Eq. 6-11).

Paper-derived, no reference code (spec 4.5). Given, for every training pair, the per-sample
cross-modal loss ``l_i^CM``, the intra-modal loss ``L_IM`` and the average matching
probability ``p_i`` (an eval-mode pass, :mod:`ncl.methods.recon`), and the GMM clean
probability ``y_i^CM`` of the losses (Eq. 6, :func:`ncl.division.gmm_clean_probability`):

* :func:`intra_modal_discrepancy` - ``y_i^IM`` (Eq. 7);
* :func:`three_way_split` - rough clean ``y^CM > omega1``, then ``D_c`` (``y^IM < omega2``),
  ``D_l`` (``y^IM >= omega2``) and ``D_n`` (``y^CM <= omega1``) (Eq. 6 thresholds, Eq. 8);
* :func:`penalty_factor` - ``lambda = exp(y^IM / alpha)`` (Eq. 9);
* :func:`initial_pseudo_labels`, :func:`update_pseudo_labels` - the momentum pseudo-labels of
  ``D_n`` (Eq. 10) and how they start (the paper does not say: ``PseudoLabelInit``);
* :func:`final_labels` - ``y_hat`` (Eq. 11);
* :func:`divide_three_way` - all of the above for one epoch, as a :class:`ThreeWayDivision`.

Subset codes are :data:`ncl.losses.recon.SUBSET_CLEAN` (0), ``SUBSET_LOCAL`` (1) and
``SUBSET_NOISY`` (2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from ncl.division._checks import check_finite, check_same_shape, check_unit_interval, check_vector
from ncl.division.co_divide import Division
from ncl.division.momentum import momentum_update
from ncl.losses.recon import SUBSET_CLEAN, SUBSET_LOCAL, SUBSET_NOISY

PseudoLabelInit = Literal["prediction", "one", "clean_probability"]
PseudoLabelScope = Literal["noisy", "all"]


def intra_modal_discrepancy(im_loss: Tensor) -> Tensor:
    """``y^IM = log(1 + L_IM) / (1 + log(1 + L_IM))`` (Eq. 7), in [0, 1).

    ``y^IM >= 0.5`` exactly when ``L_IM >= e - 1``.

    Args:
        im_loss: (N,) intra-modal losses ``L_IM >= 0`` (tiny negative rounding is clamped).

    Returns:
        (N,) discrepancies.
    """
    check_vector(im_loss, "im_loss")
    check_finite(im_loss, "im_loss")
    log1p = torch.log1p(im_loss.clamp_min(0.0))
    return log1p / (1.0 + log1p)


def penalty_factor(discrepancy: Tensor, alpha: float = 0.1) -> Tensor:
    """``lambda = exp(y^IM / alpha)`` (Eq. 9): ``L_l`` divides ``L_IM`` by it (Eq. 14).

    Args:
        discrepancy: (N,) ``y^IM`` in [0, 1).
        alpha: scale > 0 (paper Sect. 4.2: 0.1, so ``lambda`` lies in ``[e^5, e^10)`` on ``D_l``).

    Returns:
        (N,) factors >= 1.
    """
    check_vector(discrepancy, "discrepancy")
    if not alpha > 0:
        raise ValueError(f"`alpha` must be > 0, got {alpha}")
    return torch.exp(discrepancy / alpha)


def three_way_split(clean_prob: Tensor, discrepancy: Tensor, omega1: float = 0.5,
                    omega2: float = 0.5) -> Tensor:
    """Subset of every pair (Sect. 3.3, Eq. 8), with the paper's strict/non-strict sides.

    Rough clean ``D~_c = {y^CM > omega1}``, noisy ``D_n = {y^CM <= omega1}``; within ``D~_c``,
    clean ``D_c = {y^IM < omega2}`` and locally associated ``D_l = {y^IM >= omega2}``. No
    fallback when a subset is empty (the paper has none): an empty ``D_c`` simply trains on
    ``D_l`` and ``D_n``.

    Args:
        clean_prob: (N,) ``y^CM`` (Eq. 6).
        discrepancy: (N,) ``y^IM`` (Eq. 7).
        omega1, omega2: thresholds in [0, 1] (0.5, 0.5).

    Returns:
        (N,) int8 subset codes (small in every checkpoint).
    """
    check_vector(clean_prob, "clean_prob")
    check_same_shape(clean_prob, discrepancy, "clean_prob", "discrepancy")
    check_finite(clean_prob, "clean_prob")
    check_finite(discrepancy, "discrepancy")
    check_unit_interval(omega1, "omega1")
    check_unit_interval(omega2, "omega2")
    subset = torch.full(clean_prob.shape, SUBSET_NOISY, dtype=torch.int8, device=clean_prob.device)
    rough_clean = clean_prob > omega1
    subset[rough_clean & (discrepancy < omega2)] = SUBSET_CLEAN
    subset[rough_clean & (discrepancy >= omega2)] = SUBSET_LOCAL
    return subset


def initial_pseudo_labels(prediction: Tensor, clean_prob: Tensor,
                          init: PseudoLabelInit = "prediction") -> Tensor:
    """``y~`` before the first update of Eq. 10 (paper-derived, no reference code).

    The paper starts Eq. 10 from ``y~^(t-1)`` without saying what that is at the first division.
    ``prediction``: the model's own ``p`` of that pass, so the first pseudo-label is ``p`` (as
    CRCL, whose scaffold ReCon's options follow, sets its labels to ``p`` when its warm-up
    ends); ``one``: the annotated label 1; ``clean_probability``: the GMM's ``y^CM``.

    Args:
        prediction: (N,) ``p`` of the first division's pass.
        clean_prob: (N,) ``y^CM`` of the same division.
        init: see above.

    Returns:
        (N,) labels in [0, 1].
    """
    check_vector(prediction, "prediction")
    check_same_shape(prediction, clean_prob, "prediction", "clean_prob")
    if init not in get_args(PseudoLabelInit):
        raise ValueError(f"`init` must be one of {get_args(PseudoLabelInit)}, got {init!r}")
    if init == "one":
        return torch.ones_like(prediction)
    return (prediction if init == "prediction" else clean_prob).clone()


def update_pseudo_labels(previous: Tensor, prediction: Tensor, subset: Tensor, beta: float = 0.6,
                         scope: PseudoLabelScope = "noisy") -> Tensor:
    """``y~^t = beta y~^(t-1) + (1 - beta) p^t`` (Eq. 10) on ``D_n`` (``scope="noisy"``, as the
    paper writes it; other pairs keep their label) or on every pair (``"all"``). The scope
    switch and ``p`` from the division's eval pass are paper-derived, no reference code.

    Args:
        previous: (N,) ``y~^(t-1)``.
        prediction: (N,) ``p^t = (p_ii^v2l + p_ii^l2v) / 2``.
        subset: (N,) subset codes of this division.
        beta: momentum in [0, 1] (0.6).
        scope: which pairs move.

    Returns:
        (N,) ``y~^t``, detached.
    """
    check_same_shape(previous, subset, "previous", "subset")
    if scope not in get_args(PseudoLabelScope):
        raise ValueError(f"`scope` must be one of {get_args(PseudoLabelScope)}, got {scope!r}")
    moved = momentum_update(previous, prediction.to(previous), beta)
    if scope == "all":
        return moved
    return torch.where(subset == SUBSET_NOISY, moved, previous.detach())


def final_labels(subset: Tensor, pseudo: Tensor) -> Tensor:
    """``y_hat = 1`` on ``D_c`` and ``D_l``, ``y~`` on ``D_n`` (Eq. 11).

    Args:
        subset: (N,) subset codes.
        pseudo: (N,) pseudo-labels ``y~``.

    Returns:
        (N,) labels in [0, 1].
    """
    check_same_shape(subset, pseudo, "subset", "pseudo")
    return torch.where(subset == SUBSET_NOISY, pseudo, torch.ones_like(pseudo))


@dataclass(frozen=True)
class ThreeWayConfig:
    """Settings of the division (paper Sect. 4.2 values as defaults).

    Attributes:
        omega1: threshold of the GMM clean probability (0.5).
        omega2: threshold of the intra-modal discrepancy (0.5).
        alpha: scale of the penalisation factor (0.1).
        beta: momentum of the pseudo-labels (0.6).
        pseudo_init: the pseudo-labels before the first update (:func:`initial_pseudo_labels`).
        pseudo_scope: which pairs Eq. 10 moves (:func:`update_pseudo_labels`).
    """

    omega1: float = 0.5
    omega2: float = 0.5
    alpha: float = 0.1
    beta: float = 0.6
    pseudo_init: PseudoLabelInit = "prediction"
    pseudo_scope: PseudoLabelScope = "noisy"

    def __post_init__(self) -> None:
        for name in ("omega1", "omega2", "beta"):
            check_unit_interval(getattr(self, name), name)
        if not self.alpha > 0:
            raise ValueError(f"alpha must be > 0, got {self.alpha}")
        for name, kind in (("pseudo_init", PseudoLabelInit), ("pseudo_scope", PseudoLabelScope)):
            if getattr(self, name) not in get_args(kind):
                raise ValueError(f"{name} must be one of {get_args(kind)}, "
                                 f"got {getattr(self, name)!r}")


@dataclass(kw_only=True)
class ThreeWayDivision(Division):
    """The division made for one epoch (tensors on the CPU, identical on every rank): the shared
    :class:`~ncl.division.co_divide.Division` record of one network (``losses`` ``(1, N)``:
    ``l^CM``, ``y = 1``, the GMM was fitted on; ``prob`` ``(1, N)``: ``y^CM``, Eq. 6;
    ``clean`` ``(1, N)``: not in ``D_n``) and ReCon's own.

    Attributes:
        im_loss: (N,) per-sample ``L_IM``.
        prediction: (N,) average matching probability ``p`` (Eq. 10).
        discrepancy: (N,) ``y^IM`` (Eq. 7).
        subset: (N,) int8 subset codes (Eq. 8).
        penalty: (N,) ``lambda`` (Eq. 9; used on ``D_l`` only).
        labels: (N,) ``y_hat`` (Eq. 11).
    """

    im_loss: Tensor
    prediction: Tensor
    discrepancy: Tensor
    subset: Tensor
    penalty: Tensor
    labels: Tensor

    @property
    def cm_loss(self) -> Tensor:
        """(N,) ``l^CM``, the values of the GMM."""
        return self.losses[0]

    @property
    def clean_prob(self) -> Tensor:
        """(N,) ``y^CM`` (Eq. 6)."""
        return self.prob[0]

    def state(self) -> dict[str, Any]:
        return dict(vars(self))

    @classmethod
    def from_state(cls, saved: dict[str, Any] | None) -> ThreeWayDivision | None:
        """The record :meth:`state` wrote, also by ncl before the shared record (``cm_loss``
        and ``clean_prob`` ``(N,)``, no ``losses``/``prob``/``clean``)."""
        if saved is None:
            return None
        saved = dict(saved)
        if "cm_loss" in saved:
            saved["losses"] = saved.pop("cm_loss").reshape(1, -1)
            saved["prob"] = saved.pop("clean_prob").reshape(1, -1)
            saved["clean"] = (saved["subset"] != SUBSET_NOISY).reshape(1, -1)
        return cls(**saved)

    def sizes(self) -> dict[str, int]:
        """``{"clean", "local", "noisy"}``: the sizes of ``D_c``, ``D_l``, ``D_n``."""
        return {name: int((self.subset == code).sum())
                for name, code in (("clean", SUBSET_CLEAN), ("local", SUBSET_LOCAL),
                                   ("noisy", SUBSET_NOISY))}


def divide_three_way(epoch: int, cm_loss: Tensor, im_loss: Tensor, prediction: Tensor,
                     clean_prob: Tensor, previous_pseudo: Tensor | None,
                     config: ThreeWayConfig) -> tuple[ThreeWayDivision, Tensor]:
    """One epoch's division (Eq. 7-11) from the per-sample pass and the GMM.

    Args:
        epoch: the epoch the division is made for.
        cm_loss, im_loss, prediction: (N,) per-sample values of the pass.
        clean_prob: (N,) ``y^CM`` of the GMM on ``cm_loss`` (Eq. 6).
        previous_pseudo: (N,) ``y~`` of the previous division, or ``None`` at the first one
            (then :func:`initial_pseudo_labels` with ``config.pseudo_init``).
        config: thresholds, scale, momentum and pseudo-label options.

    Returns:
        ``(division, pseudo)``: the division and the updated pseudo-label table ``y~^t``.
    """
    for name, value in (("cm_loss", cm_loss), ("im_loss", im_loss), ("prediction", prediction)):
        check_same_shape(value, clean_prob, name, "clean_prob")
    discrepancy = intra_modal_discrepancy(im_loss)
    subset = three_way_split(clean_prob, discrepancy, config.omega1, config.omega2)
    previous = (initial_pseudo_labels(prediction, clean_prob, config.pseudo_init)
                if previous_pseudo is None else previous_pseudo)
    pseudo = update_pseudo_labels(previous, prediction, subset, config.beta, config.pseudo_scope)
    division = ThreeWayDivision(epoch=epoch, losses=cm_loss.reshape(1, -1),
                                prob=clean_prob.reshape(1, -1),
                                clean=(subset != SUBSET_NOISY).reshape(1, -1), im_loss=im_loss,
                                prediction=prediction, discrepancy=discrepancy, subset=subset,
                                penalty=penalty_factor(discrepancy, config.alpha),
                                labels=final_labels(subset, pseudo))
    return division, pseudo
