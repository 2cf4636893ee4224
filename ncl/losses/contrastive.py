"""Cross-modal matching probabilities and the symmetric InfoNCE loss, per sample.

Conventions: ``sims`` is a (B, B) similarity matrix, rows = images, columns = captions,
diagonal = annotated pairs; losses return (B,) per-sample tensors.

Spec: reference_spec.md section 4.3.2; RCL (TPAMI 2023) Eq. 1-2 and Eq. 8.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ncl.losses._checks import check_non_negative, check_positive, check_square, work_dtype


def _row_log_softmax_eps(logits: Tensor, eps: float) -> Tensor:
    """``log( exp(z_ij) / (sum_k exp(z_ik) + eps) )`` row-wise, without forming exp(z).

    With the row maximum ``m_i`` subtracted first, the denominator is
    ``m_i + logaddexp(logsumexp_k (z_ik - m_i), log eps - m_i)``, which equals
    ``log(sum_k exp(z_ik) + eps)`` exactly but never overflows and never takes ``log(0)``.
    The shift is applied before the log-sum-exp (not after, as ``torch.logsumexp`` returns it)
    so that large ``|z|`` (e.g. 5e4 for logits of 50 at tau = 1e-3) lose no float32 precision.
    """
    row_max = logits.max(dim=1, keepdim=True).values.detach()  # (B, 1); shift has zero gradient
    shifted = logits - row_max  # (B, B), <= 0
    lse = torch.logsumexp(shifted, dim=1, keepdim=True)  # (B, 1), in [0, log B]
    if eps > 0:
        lse = torch.logaddexp(lse, math.log(eps) - row_max)
    return shifted - lse


def log_matching_probabilities(
    sims: Tensor, tau: float = 0.05, eps: float = 1e-10
) -> tuple[Tensor, Tensor]:
    """Log of RCL's cross-modal matching probabilities (RCL Eq. 1-2, spec 4.3.2).

    With ``E = exp(S / tau)``:
    ``P_i2t[i, j] = E_ij / (sum_k E_ik + eps)`` (image ``i`` queries captions; row softmax) and
    ``P_t2i[i, j] = E_ji / (sum_k E_ki + eps)`` (caption ``i`` queries images; column softmax
    written as rows). ``eps`` is the official code's guard (1e-10); ``eps = 0`` gives the
    paper's plain softmax.

    Computed in log space (log-sum-exp), so the official values are reproduced exactly in
    exact arithmetic while extreme ``S / tau`` (raw logits, small tau) cannot overflow.
    Half-precision inputs are computed in float32.

    Args:
        sims: (B, B) similarities.
        tau: temperature > 0.
        eps: additive constant in the denominator, >= 0.

    Returns:
        ``(log_P_i2t, log_P_t2i)``, each (B, B); row ``i`` of each is query ``i``.
    """
    check_square(sims)
    check_positive(tau, "tau")
    check_non_negative(eps, "eps")
    logits = sims.to(work_dtype(sims.dtype)) / tau  # (B, B)
    return _row_log_softmax_eps(logits, eps), _row_log_softmax_eps(logits.t(), eps)


def infonce_loss(sims: Tensor, tau: float = 0.05, eps: float = 1e-10) -> Tensor:
    """Symmetric InfoNCE / cross-modal contrastive loss CL, per sample (RCL Eq. 8).

    ``l_i = -log P_i2t[i, i] - log P_t2i[i, i]`` with the probabilities of
    :func:`log_matching_probabilities` (so ``eps`` enters the denominator exactly as in RCL).

    This matches RCL's ``--loss infoNCE`` option (spec 4.3.2), whose official value is
    ``-mean_i log P_i2t[i,i] - mean_i log P_t2i[i,i]`` on ``E = exp(S/tau)`` with ``+eps`` in the
    denominators: the official scalar is ``mean_i l_i`` (take the **mean** over samples). It is
    also RCL Table 7's "CL" row. Two numerical differences, both only where the official
    form breaks: the log is taken analytically (``z_ii - log(sum + eps)``), so an underflowed
    ``P_ii = 0`` gives a large finite loss instead of ``inf``; and ``exp`` never overflows.
    With ``eps = 0`` this is the textbook symmetric InfoNCE (CLIP-style) on ``sims / tau``.

    Args:
        sims: (B, B) similarities.
        tau: temperature > 0 (RCL default 0.05).
        eps: denominator guard >= 0 (RCL official 1e-10).

    Returns:
        (B,) per-sample losses (float32 or wider).
    """
    log_i2t, log_t2i = log_matching_probabilities(sims, tau, eps)
    return -(log_i2t.diagonal() + log_t2i.diagonal())
