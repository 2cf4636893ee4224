"""The one InfoNCE of the toolbox: cross-modal matching probabilities and the bidirectional
InfoNCE built on them, per sample.

Conventions: ``sims`` is a (B, B) similarity matrix, rows = images, columns = captions,
diagonal = annotated pairs. Image ``i`` queries the captions along row ``i`` (``i2t``);
caption ``i`` queries the images along column ``i`` (``t2i``, written as row ``i`` of
``S^T``). Every method's InfoNCE is :func:`info_nce` with its own arguments:

* RCL's "CL" and the InfoNCE baseline: ``info_nce(S, tau, eps=1e-10)`` (RCL Eq. 8, official
  ``+eps``);
* ReCon's ``L_CM`` (Eq. 2, 15): ``info_nce(S, tau, eps=0.0, weights=y)``; its official file's
  rank loss ``info_nce(S, tau, combine="mean", weights=t, logits="per_direction")`` and
  warm-up ``info_nce(S, tau, directions="i2t")``;
* GSC: ``info_nce(S, T, combine="mean", weights=y, logits="per_direction")``, the structure
  term and the warm-up ``info_nce(., T, directions="i2t", ...)``;
* CRCL's active term and ``p_hat``: :func:`diagonal_info_nce` of its log-probabilities
  (``weights=y_hat``);
* L2RM's and IN2R's warm-up: the InfoNCE halves of the RCE loss on
  :func:`log_matching_probabilities` (:mod:`ncl.losses.l2rm`).

Spec: reference_spec.md section 4.3.2; RCL (TPAMI 2023) Eq. 1-2 and Eq. 8.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple, get_args

import torch
from torch import Tensor

from ncl.losses._checks import (
    check_choice,
    check_non_negative,
    check_positive,
    check_square,
    work_dtype,
)

Direction = Literal["both", "i2t", "t2i"]
Combine = Literal["sum", "mean"]
Reduction = Literal["none", "mean", "sum"]
Logits = Literal["shared", "per_direction"]

#: RCL's official guard in the softmax denominators (``+1e-10``).
RCL_EPS = 1e-10


def row_log_softmax(logits: Tensor, eps: float | None = None) -> Tensor:
    """``log( exp(z_ij) / (sum_k exp(z_ik) + eps) )`` row-wise, for any (Q, B) ``logits``.

    Two floating-point paths, kept apart because they round differently:

    * ``eps=None``: ``torch.log_softmax(z, dim=1)`` (the plain softmax).
    * a float ``eps >= 0``: with the row maximum ``m_i`` subtracted first, the denominator is
      ``m_i + logaddexp(logsumexp_k (z_ik - m_i), log eps - m_i)``, which equals
      ``log(sum_k exp(z_ik) + eps)`` exactly but never overflows and never takes ``log(0)``.
      The shift is applied before the log-sum-exp (not after, as ``torch.logsumexp`` returns
      it) so that large ``|z|`` (e.g. 5e4 for logits of 50 at tau = 1e-3) lose no float32
      precision. ``eps=0`` is the plain softmax's value in this op order.
    """
    if eps is None:
        return torch.log_softmax(logits, dim=1)
    row_max = logits.max(dim=1, keepdim=True).values.detach()  # (Q, 1); shift has zero gradient
    shifted = logits - row_max  # (Q, B), <= 0
    lse = torch.logsumexp(shifted, dim=1, keepdim=True)  # (Q, 1), in [0, log B]
    if eps > 0:
        lse = torch.logaddexp(lse, math.log(eps) - row_max)
    return shifted - lse


def _logits(sims: Tensor, tau: float, eps: float | None) -> Tensor:
    """``S / tau`` in at least float32, after checking the arguments."""
    check_square(sims)
    check_positive(tau, "tau")
    if eps is not None:
        check_non_negative(eps, "eps")
    return sims.to(work_dtype(sims.dtype)) / tau  # (B, B)


def log_matching_probabilities(
    sims: Tensor, tau: float = 0.05, eps: float | None = None
) -> tuple[Tensor, Tensor]:
    """Log of the cross-modal matching probabilities (RCL Eq. 1-2, spec 4.3.2).

    With ``E = exp(S / tau)``:
    ``P_i2t[i, j] = E_ij / (sum_k E_ik + eps)`` (image ``i`` queries captions; row softmax) and
    ``P_t2i[i, j] = E_ji / (sum_k E_ki + eps)`` (caption ``i`` queries images; column softmax
    written as rows). ``eps`` is RCL's official guard (:data:`RCL_EPS`, 1e-10); ``eps=None`` is
    ``torch.log_softmax`` and ``eps=0`` the same plain softmax through the guarded op order
    (:func:`row_log_softmax`). Computed in log space, so extreme ``S / tau`` cannot overflow.
    Half-precision inputs are computed in float32.

    Args:
        sims: (B, B) similarities.
        tau: temperature > 0.
        eps: additive constant in the denominator, >= 0, or ``None``.

    Returns:
        ``(log_P_i2t, log_P_t2i)``, each (B, B); row ``i`` of each is query ``i``.
    """
    logits = _logits(sims, tau, eps)
    return row_log_softmax(logits, eps), row_log_softmax(logits.t(), eps)


class InfoNCETerms(NamedTuple):
    """Per-pair InfoNCE values (each (B,), or a 0-d ``loss`` after a reduction).

    Attributes:
        loss: ``w_i * combine(l_i^i2t, l_i^t2i)`` with ``l_i = -log p_ii`` (see :func:`info_nce`).
        probability: the diagonal matching probability ``p_ii`` of the direction, or
            ``(p_ii^i2t + p_ii^t2i) / 2`` for both; detached (a record, never a loss).
    """

    loss: Tensor
    probability: Tensor


def diagonal_info_nce(
    log_i2t: Tensor | None,
    log_t2i: Tensor | None,
    *,
    combine: Combine = "sum",
    weights: Tensor | None = None,
    reduction: Reduction = "none",
) -> InfoNCETerms:
    """:func:`info_nce` from log-probability matrices already computed (CRCL reuses them).

    Args:
        log_i2t, log_t2i: (B, B) row log-probabilities of each direction
            (:func:`log_matching_probabilities`), ``None`` for a direction left out (not both).
        combine, weights, reduction: see :func:`info_nce`.
    """
    diagonals = [lp.diagonal() for lp in (log_i2t, log_t2i) if lp is not None]  # (B,) each
    if not diagonals:
        raise ValueError("diagonal_info_nce needs at least one direction")
    check_choice(combine, get_args(Combine), "combine")
    check_choice(reduction, get_args(Reduction), "reduction")
    losses = [-d for d in diagonals]
    probabilities = [d.exp() for d in diagonals]
    if len(diagonals) == 1:
        loss, probability = losses[0], probabilities[0]
    elif combine == "sum":
        loss, probability = losses[0] + losses[1], (probabilities[0] + probabilities[1]) * 0.5
    else:
        loss, probability = (losses[0] + losses[1]) * 0.5, (probabilities[0] + probabilities[1]) * 0.5
    if weights is not None:
        if weights.shape != loss.shape:
            raise ValueError(f"`weights` must have shape ({loss.shape[0]},) to match `sims`, "
                             f"got {tuple(weights.shape)}")
        loss = loss * weights.detach().to(loss)
    if reduction != "none":
        loss = loss.mean() if reduction == "mean" else loss.sum()
    return InfoNCETerms(loss, probability.detach())


def info_nce(
    sims: Tensor,
    tau: float,
    *,
    eps: float | None = None,
    directions: Direction = "both",
    combine: Combine = "sum",
    weights: Tensor | None = None,
    reduction: Reduction = "none",
    logits: Logits = "shared",
) -> InfoNCETerms:
    """Bidirectional InfoNCE of every pair of a batch, and its diagonal matching probability.

    With ``p_ij^i2t = exp(S_ij / tau) / (sum_k exp(S_ik / tau) + eps)`` (image ``i`` queries
    the captions) and ``p_ij^t2i = exp(S_ji / tau) / (sum_k exp(S_ki / tau) + eps)`` (caption
    ``i`` queries the images), ``l_i^d = -log p_ii^d`` and::

        loss_i = w_i * (l_i^i2t + l_i^t2i)          combine="sum"  (RCL Eq. 8, ReCon Eq. 2)
        loss_i = w_i * (l_i^i2t + l_i^t2i) * 0.5    combine="mean" (GSC, ReCon's official file)
        loss_i = w_i * l_i^d                        directions="i2t" or "t2i"

    ``w`` defaults to 1. The logs are taken analytically (log-softmax), so an underflowed
    ``p_ii`` gives a large finite loss instead of ``inf`` and ``exp`` never overflows.

    Args:
        sims: (B, B) similarities; half precision is computed in float32.
        tau: temperature > 0 (the logits are ``S / tau``, a division).
        eps: denominator guard >= 0 (RCL official 1e-10), or ``None`` for
            ``torch.log_softmax`` (:func:`row_log_softmax`: ``0.0`` and ``None`` are the same
            value in two op orders).
        directions: ``"both"``, or one direction alone.
        combine: how two directions add up: ``"sum"`` or ``"mean"`` (``* 0.5``).
        weights: (B,) per-pair weights (soft labels, targets), treated as constants.
        reduction: ``"none"`` (per pair), ``"mean"`` or ``"sum"`` of ``loss``.
        logits: how the ``t2i`` logits are formed: ``"shared"`` transposes ``S / tau``
            (one division: RCL, ReCon's paper reading, CRCL, L2RM), ``"per_direction"``
            divides ``S^T`` anew (GSC, ReCon's official file: one call per direction). The
            values are the same; the gradients round differently (``g1 / tau + (g2 / tau)^T``
            against ``(g1 + g2^T) / tau``), which changes a training run in the last bits.

    Returns:
        :class:`InfoNCETerms` (float32 or wider).
    """
    check_choice(directions, get_args(Direction), "directions")
    check_choice(logits, get_args(Logits), "logits")
    z = _logits(sims, tau, eps)  # (B, B)
    z_t = z.t() if logits == "shared" else _logits(sims.t(), tau, eps)  # (B, B), captions query
    log_i2t = row_log_softmax(z, eps) if directions != "t2i" else None
    log_t2i = row_log_softmax(z_t, eps) if directions != "i2t" else None
    return diagonal_info_nce(log_i2t, log_t2i, combine=combine, weights=weights,
                             reduction=reduction)
