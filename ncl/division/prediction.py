"""NCR/LNC prediction function P: the batch-relative "memorisation" score (LNC Eq. 9).

Two forms are exposed (switch ``form``):

* ``"hinge"`` (official code, spec 4.2.1 "predict"): from the per-sample mean hinge
  ``l_i = mean_j C_s[i, j] + mean_r C_im[r, i]`` (means over all B entries, zero diagonal
  included, margin alpha), ``P_i = clip(alpha - l_i / 2, 0, alpha)``.
* ``"linear"`` (LNC Eq. 9 as written): ``s_i = S_ii - (1/b sum_{j != i} S_ij +
  1/b sum_{r != i} S_ri) / 2``, ``P_i = clip(s_i, 0, alpha)``. No hinge; the sums run over
  the b - 1 negatives but divide by b, as printed.

Both then divide by tau = mean of the ``B // 10 + 1`` largest clipped values (the code's
count; the paper says "top 10 %") and clip to [0, 1] (the paper: "1 when s is larger than
tau"). Where no hinge term is clamped at 0 and no score reaches alpha, the two forms
differ by exactly ``(alpha - S_ii) / B`` before normalisation.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from ncl.division._checks import check_finite, check_vector
from ncl.losses.triplet import triplet_loss

PredictionForm = Literal["hinge", "linear"]


def memorization_prediction(
    sims: Tensor, margin: float = 0.2, form: PredictionForm = "hinge"
) -> Tensor:
    """Prediction function P from a batch similarity matrix (LNC Eq. 9; spec 4.2.1).

    The hinge is computed locally (private helper) rather than imported from
    ``ncl.losses``, so this module stays self-contained; it equals the "eval_loss" mode of
    spec 4.2.1. To reuse a per-sample loss computed elsewhere, call
    :func:`memorization_prediction_from_loss`.

    Differentiable (clip and top-k have sub-gradients), so it can serve the momentum
    regulariser (LNC Eq. 4); for targets call it under ``torch.no_grad()`` as the
    official code does.

    Args:
        sims: (B, B) similarities; rows are images, columns captions; diagonal = pairs.
        margin: alpha (official 0.2), > 0.
        form: ``"hinge"`` (official code, default) or ``"linear"`` (LNC Eq. 9 text).

    Returns:
        (B,) predictions in [0, 1]; all zeros if every clipped score is 0 (see
        :func:`normalize_by_top_fraction`).

    Raises:
        ValueError: if ``sims`` is not a finite square matrix, ``margin <= 0`` or
            ``form`` is unknown.
    """
    _check_sims(sims)
    if margin <= 0:
        raise ValueError(f"`margin` must be > 0, got {margin}")
    if form == "hinge":
        return memorization_prediction_from_loss(_mean_hinge_per_sample(sims, margin), margin)
    if form == "linear":
        return normalize_by_top_fraction(torch.clamp(_linear_score(sims), 0.0, margin))
    raise ValueError(f"`form` must be 'hinge' or 'linear', got {form!r}")


def mr_prediction(sims: Tensor, margin: float = 0.2, form: PredictionForm = "hinge",
                  detach_normalizer: bool = True) -> Tensor:
    """Prediction ``P`` used by LNC's momentum regulariser (Eq. 4 with Eq. 9), with gradient.

    The values of :func:`memorization_prediction`. With ``detach_normalizer`` ``tau`` is a
    constant for the gradient: pulling ``P_i`` towards its target then moves pair ``i``'s own
    score only. Through ``tau`` every ``P`` can also be raised by pulling the batch's best
    pairs *down* (a smaller ``tau``), which works against the ranking objective. The paper
    does not say which is meant.

    Args:
        sims: ``(B, B)`` similarities, with gradient.
        margin: alpha (0.2).
        form: ``hinge`` (from the per-sample mean hinge, code) or ``linear`` (Eq. 9 text).
        detach_normalizer: treat ``tau`` as a constant.

    Returns:
        ``(B,)`` predictions in [0, 1].
    """
    if not detach_normalizer:
        return memorization_prediction(sims, margin, form)
    if form == "hinge":
        raw = margin - triplet_loss(sims, margin, negatives="mean") / 2  # (B,)
    else:  # Eq. 9: positive minus the mean of its row and column negatives (divided by b)
        b, diag = sims.shape[0], sims.diagonal()
        raw = diag - ((sims.sum(1) - diag) / b + (sims.sum(0) - diag) / b) / 2
    raw = raw.clamp(0.0, margin)
    tau = raw.detach().topk(raw.numel() // 10 + 1).values.mean()
    if not bool(tau > 0):
        return torch.zeros_like(raw)
    return (raw / tau).clamp(0.0, 1.0)


def memorization_prediction_from_loss(per_sample_loss: Tensor, margin: float = 0.2) -> Tensor:
    """Prediction function P from the per-sample "eval_loss" vector (spec 4.2.1).

    ``P_i = clip(margin - l_i / 2, 0, margin)``, then :func:`normalize_by_top_fraction`.
    ``per_sample_loss`` must come from ONE batch: the normalisation is batch-relative.

    Args:
        per_sample_loss: (B,) ``l_i = mean_j C_s[i, j] + mean_r C_im[r, i]`` computed
            with the same ``margin``, B >= 1.
        margin: alpha (official 0.2), > 0.

    Returns:
        (B,) predictions in [0, 1].
    """
    check_vector(per_sample_loss, "per_sample_loss")
    check_finite(per_sample_loss, "per_sample_loss")
    if margin <= 0:
        raise ValueError(f"`margin` must be > 0, got {margin}")
    raw = torch.clamp(margin - per_sample_loss / 2, 0.0, margin)  # (B,)
    return normalize_by_top_fraction(raw)


def normalize_by_top_fraction(raw: Tensor) -> Tensor:
    """Divide by tau = mean of the ``B // 10 + 1`` largest values; clip to [0, 1].

    NaN safety: the official code divides by tau = 0 when every value is 0 and yields NaN
    margins (spec 7.2). Here the result is then **all zeros**: a clipped score of 0 means
    no pair is more similar than its in-batch negatives on average, i.e. no evidence of
    correspondence, so the conservative soft label is 0 (zero soft margin, no push).

    Args:
        raw: (B,) non-negative clipped scores.

    Returns:
        (B,) values in [0, 1].
    """
    k = raw.numel() // 10 + 1
    tau = torch.topk(raw, k).values.mean()
    if bool(tau <= 0):
        return torch.zeros_like(raw)
    return torch.clamp(raw / tau, 0.0, 1.0)


def _mean_hinge_per_sample(sims: Tensor, margin: float) -> Tensor:
    """``l_i = mean_j C_s[i, j] + mean_r C_im[r, i]``, diagonals zeroed, means over B."""
    diag = sims.diagonal()  # (B,)
    eye = torch.eye(sims.shape[0], dtype=torch.bool, device=sims.device)
    cost_s = torch.clamp(margin + sims - diag.unsqueeze(1), min=0).masked_fill(eye, 0)  # (B, B)
    cost_im = torch.clamp(margin + sims - diag.unsqueeze(0), min=0).masked_fill(eye, 0)  # (B, B)
    return cost_s.mean(dim=1) + cost_im.mean(dim=0)  # (B,)


def _linear_score(sims: Tensor) -> Tensor:
    """LNC Eq. 9: ``s_i = S_ii - (sum_{j!=i} S_ij / b + sum_{r!=i} S_ri / b) / 2``."""
    b = sims.shape[0]
    diag = sims.diagonal()  # (B,)
    row_neg = (sims.sum(dim=1) - diag) / b  # image i against other captions
    col_neg = (sims.sum(dim=0) - diag) / b  # caption i against other images
    return diag - (row_neg + col_neg) / 2


def _check_sims(sims: Tensor) -> None:
    if not isinstance(sims, Tensor):
        raise ValueError(f"`sims` must be a torch.Tensor, got {type(sims).__name__}")
    if sims.dim() != 2 or sims.shape[0] != sims.shape[1] or sims.shape[0] < 1:
        raise ValueError(f"`sims` must be a non-empty square (B, B) matrix, got {tuple(sims.shape)}")
    check_finite(sims, "sims")
