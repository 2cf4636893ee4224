"""L2RM's own losses (Han et al., CVPR 2024): the RCE warm-up loss and the symmetric KL loss.

Facts: ``/work/plan/l2rm_notes.md`` sections 2 (warm-up) and 4.6 (symmetric KL); the official
code is described there in prose, nothing here is copied from it.

* :func:`rce_warmup_loss` / :func:`rce_warmup_terms` - the warm-up loss on every (noisy)
  pair: the average of a two-direction reverse cross-entropy and a two-direction InfoNCE.
* :func:`symmetric_kl_loss` / :func:`symmetric_kl_terms` - the loss on the noisy captions:
  the model's bidirectional matching distributions between the queue images and the noisy
  captions are pulled towards the (row- and column-normalised) partial-OT plan, with the
  forward and the reverse KL in both directions.

L2RM's two other losses are the hinge triplet losses of :mod:`ncl.losses.triplet`; they are
not duplicated here:

* the loss on the clean subset (notes 4.3) is the hardest-negative triplet with margin 0.2,
  **summed** over the batch: ``triplet_loss(sims, 0.2, "hardest").sum()``
  (``sum_i max_j [m + S_ij - S_ii]_+ + sum_j max_i [m + S_ij - S_jj]_+``, diagonals zeroed);
* the per-sample loss of the per-epoch division (notes 3.1) is the hinge averaged over all B
  entries of the row and of the column, the zeroed diagonal included:
  ``triplet_loss(sims, 0.2, "mean")``, one value per pair, fed to
  :func:`ncl.division.beta_mixture.beta_clean_probability`.

Conventions: a similarity matrix has rows = images and columns = captions. Both losses here
return a **scalar** (the official reductions are written out in each docstring). Half-precision
similarities are computed in float32; the result is float32 (float64 for float64 input).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ncl.losses._checks import check_positive, check_square, work_dtype
from ncl.losses.contrastive import log_matching_probabilities, row_log_softmax

#: Official constants (notes 8.3).
RCE_EPS = 1e-7
SKL_EPS = 1e-10
L2RM_TAU = 0.05


def rce_warmup_terms(
    sims: Tensor, tau: float = L2RM_TAU, eps: float = RCE_EPS
) -> dict[str, Tensor]:
    """The four scalar terms of L2RM's warm-up loss (notes 2).

    With ``P = softmax_row(S / tau)`` (image -> text: for each image a distribution over the
    captions) and ``T = softmax_row(S^T / tau)`` (text -> image: for each caption a
    distribution over the images), both (B, B):

    * ``rce_i2t = -(1/B) sum_i sum_j log(I_ij + eps) * P_ij`` - reverse cross-entropy against
      the identity target plus ``eps`` **everywhere** (not clamped): the diagonal weight is
      ``log(1 + eps) ~ eps`` and the off-diagonal one ``log(eps)`` (``~ -16.118`` for 1e-7), so
      ``rce_i2t ~ 16.118 * (1/B) sum_i (1 - P_ii)``;
    * ``rce_t2i`` - the same with ``T``;
    * ``nce_i2t = -(1/B) sum_i log P_ii`` and ``nce_t2i = -(1/B) sum_i log T_ii`` (InfoNCE,
      no epsilon anywhere), on the log-probabilities of the one InfoNCE
      (:func:`~ncl.losses.contrastive.log_matching_probabilities` with ``eps=None``). The mean
      is taken before the sign, over the diagonal view: ``info_nce(..., reduction="mean")``
      negates first and sums a contiguous copy, which rounds differently in the last bit.

    Numerics: the softmaxes are taken in log space (``log_softmax``). The official code takes
    ``softmax`` and then ``log``; both agree to float precision whenever ``P_ii`` does not
    underflow. Where the official ``P_ii`` underflows to 0 (``(S_ij - S_ii) / tau`` beyond
    ~ 87 in float32) it returns ``inf``, this returns the large finite exact value.
    ``log(1 + eps)`` is computed with ``log1p`` (the official float32 ``log(1 + 1e-7)`` is
    1.19e-7 instead of 1e-7: a difference below 1e-7 in the loss).

    Args:
        sims: (B, B) similarities, rows = images, columns = captions, diagonal = pairs.
        tau: temperature > 0 (official 0.05).
        eps: the constant added to the identity target, > 0 (official 1e-7).

    Returns:
        Dict with the 0-d tensors ``rce_i2t``, ``rce_t2i``, ``nce_i2t``, ``nce_t2i``.

    Raises:
        ValueError: on a non-square or non-floating ``sims``, ``tau <= 0`` or ``eps <= 0``.
    """
    batch = check_square(sims)
    check_positive(tau, "tau")
    check_positive(eps, "eps")
    # (B, B) each: image -> text, text -> image; torch.log_softmax of S / tau (no eps there)
    log_p, log_t = log_matching_probabilities(sims, tau, None)
    eye = torch.eye(batch, dtype=torch.bool, device=sims.device)
    # log(I + eps): log1p(eps) on the diagonal, log(eps) elsewhere (the official target).
    log_target = torch.full_like(log_p, math.log(eps)).masked_fill(eye, math.log1p(eps))
    return {
        "rce_i2t": -(log_target * log_p.exp()).sum() / batch,
        "rce_t2i": -(log_target * log_t.exp()).sum() / batch,
        "nce_i2t": -log_p.diagonal().mean(),
        "nce_t2i": -log_t.diagonal().mean(),
    }


def rce_warmup_loss(sims: Tensor, tau: float = L2RM_TAU, eps: float = RCE_EPS) -> Tensor:
    """L2RM's warm-up loss (notes 2), a scalar.

    ``L_warm = 0.5 * (rce_i2t + rce_t2i + nce_i2t + nce_t2i)`` with the terms of
    :func:`rce_warmup_terms` (each a mean over the B rows of its direction). It is symmetric:
    ``rce_warmup_loss(S.T) == rce_warmup_loss(S)``. For B = 1 it is ``-log(1 + eps)``.

    Args:
        sims: (B, B) similarities, rows = images, columns = captions.
        tau: temperature > 0 (official 0.05).
        eps: the constant added to the identity target, > 0 (official 1e-7).

    Returns:
        0-d tensor (float32, or float64 for float64 ``sims``); gradient flows into ``sims``.
    """
    terms = rce_warmup_terms(sims, tau, eps)
    return 0.5 * (terms["rce_i2t"] + terms["rce_t2i"] + terms["nce_i2t"] + terms["nce_t2i"])


def _check_matrix(x: Tensor, name: str) -> None:
    """A non-empty 2-D floating-point tensor (a (Q, B) matrix need not be square)."""
    if not isinstance(x, Tensor):
        # ValueError, not TypeError: ncl's convention for every bad argument.
        raise ValueError(f"`{name}` must be a torch.Tensor, got {type(x).__name__}")  # noqa: TRY004
    if not x.is_floating_point():
        raise ValueError(f"`{name}` must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() != 2 or x.numel() == 0:
        raise ValueError(f"`{name}` must be a non-empty 2-D (Q, B) matrix, got shape "
                         f"{tuple(x.shape)}")


def symmetric_kl_terms(
    sims: Tensor, plan: Tensor, tau: float = L2RM_TAU, eps: float = SKL_EPS
) -> dict[str, Tensor]:
    """The four scalar KL terms of L2RM's loss on the noisy captions (notes 4.6).

    Prediction, with ``E = exp(S / tau)`` (S is (Q, B): queue images x noisy captions):

    * ``P_ij = E_ij / (sum_k E_ik + eps)`` - (Q, B), for each image a distribution over the
      captions;
    * ``R_ji = E_ij / (sum_k E_kj + eps)`` - (B, Q), for each caption a distribution over the
      images (``E^T`` row-normalised).

    Target, from the constant transport plan ``pi`` (detached):

    * ``pi' = max(pi, eps)``;
    * ``Y_i2t = pi' / rowsum(pi')`` (Q, B) and ``Y_t2i = pi'^T / rowsum(pi'^T)`` (B, Q), plain
      normalisation (no eps in these denominators).

    Terms (``KLDivLoss(reduction="batchmean")`` semantics: the sum over all entries divided by
    the number of rows):

    * ``kl_i2t  = (1/Q) sum_ij Y_i2t (log Y_i2t - log P)``
    * ``kl_t2i  = (1/B) sum_ji Y_t2i (log Y_t2i - log R)``
    * ``klr_i2t = (1/Q) sum_ij P (log P - log Y_i2t)``
    * ``klr_t2i = (1/B) sum_ji R (log R - log Y_t2i)``

    Numerics: ``log P`` and ``log R`` are computed in log space as
    ``z_ij - log(sum_k exp(z_ik) + eps)`` (the official ``eps`` kept in the denominator, via a
    shifted log-sum-exp), which equals the official ``log(E / (sum E + eps))`` in exact
    arithmetic but never forms ``exp(S / tau)``. The official code does form it: for
    similarities in (0, 1) and tau = 0.05 that is at most ``e^20`` (fine in float32), but raw
    logits or a smaller tau would overflow there and not here. Where an official probability
    underflows to 0 its ``log`` (forward terms) is ``-inf``; here it stays finite.

    Args:
        sims: (Q, B) similarities, rows = queue images, columns = noisy captions; gradient
            flows into it through all four terms.
        plan: (Q, B) non-negative transport plan (e.g. partial OT without the dummy row and
            column); treated as a constant.
        tau: temperature > 0 (official 0.05).
        eps: > 0, the softmax denominator constant and the plan's lower clamp (official 1e-10).

    Returns:
        Dict with the 0-d tensors ``kl_i2t``, ``kl_t2i``, ``klr_i2t``, ``klr_t2i``.

    Raises:
        ValueError: if ``sims`` is not a non-empty 2-D floating tensor, ``plan`` has another
            shape or holds a negative or non-finite value, ``tau <= 0`` or ``eps <= 0``.
    """
    _check_matrix(sims, "sims")
    if not isinstance(plan, Tensor):
        raise ValueError(  # noqa: TRY004
            f"`plan` must be a torch.Tensor, got {type(plan).__name__}")
    if plan.shape != sims.shape:
        raise ValueError(f"`plan` must have the shape of `sims` (Q, B)={tuple(sims.shape)}, "
                         f"got {tuple(plan.shape)}")
    check_positive(tau, "tau")
    check_positive(eps, "eps")
    dtype = work_dtype(sims.dtype)
    target = plan.detach().to(device=sims.device, dtype=dtype)
    if not bool(torch.isfinite(target).all()):
        raise ValueError("`plan` must be finite (no NaN/Inf)")
    if bool((target < 0).any()):
        raise ValueError("`plan` must be non-negative (a transport plan)")
    n_img, n_cap = sims.shape

    logits = sims.to(dtype) / tau  # (Q, B)
    log_p = row_log_softmax(logits, eps)  # (Q, B) image -> caption
    log_r = row_log_softmax(logits.t(), eps)  # (B, Q) caption -> image

    target = target.clamp(min=eps)  # (Q, B), > 0 everywhere, so every log below is finite
    y_i2t = target / target.sum(dim=1, keepdim=True)  # (Q, B)
    y_t2i = target.t() / target.t().sum(dim=1, keepdim=True)  # (B, Q)
    log_y_i2t, log_y_t2i = y_i2t.log(), y_t2i.log()

    return {
        "kl_i2t": (y_i2t * (log_y_i2t - log_p)).sum() / n_img,
        "kl_t2i": (y_t2i * (log_y_t2i - log_r)).sum() / n_cap,
        "klr_i2t": (log_p.exp() * (log_p - log_y_i2t)).sum() / n_img,
        "klr_t2i": (log_r.exp() * (log_r - log_y_t2i)).sum() / n_cap,
    }


def symmetric_kl_loss(
    sims: Tensor, plan: Tensor, tau: float = L2RM_TAU, eps: float = SKL_EPS
) -> Tensor:
    """L2RM's symmetric KL loss on the noisy captions (notes 4.6), a scalar.

    ``L_noisy = 0.5 * (kl_i2t + kl_t2i + klr_i2t + klr_t2i)`` with the terms of
    :func:`symmetric_kl_terms`. Transposing both arguments leaves it unchanged
    (``L(S^T, pi^T) == L(S, pi)``), and so does a common positive rescaling of the plan as long
    as the ``eps`` clamp does not bite. It is (up to the ``eps`` terms) zero exactly when the
    plan is proportional to ``exp(S / tau)``, whose row and column normalisations are the
    model's two distributions.

    Args:
        sims: (Q, B) similarities, rows = queue images, columns = noisy captions.
        plan: (Q, B) non-negative transport plan, detached.
        tau: temperature > 0 (official 0.05).
        eps: > 0 (official 1e-10).

    Returns:
        0-d tensor (float32, or float64 for float64 ``sims``); gradient flows into ``sims``
        only.
    """
    terms = symmetric_kl_terms(sims, plan, tau, eps)
    return 0.5 * (terms["kl_i2t"] + terms["kl_t2i"] + terms["klr_i2t"] + terms["klr_t2i"])
