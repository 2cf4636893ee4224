"""DECL's losses and per-pair statistics (Qin et al., ACM MM 2022; spec 4.6), pure torch.

Conventions: ``logits`` is the ``(B, B)`` matrix of raw SGRAF scores ``Z`` (before the
sigmoid), rows = images, columns = captions, pair ``i`` on the diagonal; ``K = B`` is the
number of Dirichlet "classes".

* :func:`evidence`: ``e = exp(tanh(Z) / tau)`` (spec 4.6.1), so ``e`` lies in
  ``[e^(-1/tau), e^(1/tau)]``; ``alpha_i2t = e + 1`` (row ``i``: image ``i`` over the
  captions) and ``alpha_t2i = e^T + 1``.
* :func:`edl_row_loss`: Sensoy et al.'s MSE form of the evidential loss for each row of a
  Dirichlet matrix (spec 4.6.2): squared error + variance + ``lambda2`` times the KL to the
  uniform Dirichlet with the target's evidence removed.
* :func:`edl_loss`: both directions per pair, the official per-row sum (its mean is
  ``L_edl``).
* :func:`rdh_loss`: the Robust Dynamic Hinge per pair (spec 4.6.3): the top-``k`` violations
  of the ``tanh`` hinge matrices; :func:`hardness` gives ``k``.
* :func:`correspondence_statistics`: the eval-mode correspondence prediction and the
  uncertainty of each pair (spec 4.6.4 step 2); :func:`dirichlet_uncertainty`,
  :func:`decl_predicted_clean` and :func:`uncertainty_values` give them in float64 for
  ``ncl predict``'s ``uncertainty`` ranking (:mod:`ncl.methods.decl_ranking`).

Precision. The evidence reaches ``e^10 ~ 2.2e4`` at ``tau = 0.1``, so a row sum ``S`` reaches
``~2.8e6`` at ``B = 128`` and ``lnGamma(S) ~ 4e7``. The KL is a difference of such terms: in
float32 (7 significant digits, the official code's precision) it carries an absolute rounding
error of order 1, larger than the KL itself for a confident row. :func:`dirichlet_kl_to_uniform`
therefore computes in float64 (exact to ~1e-9 there) and returns the input's dtype; the squared
error and variance terms are sums of bounded values and are computed in the input's dtype.
:func:`correspondence_statistics` computes in its input's dtype, because the arg-max depends on
it: in float32 (the official code's) ``tanh(Z)`` is exactly 1 for ``Z`` above about 9.02, so
saturated entries tie and the arg-max takes the first of them, where float64 still tells them
apart (:class:`~ncl.methods.decl.DECL`'s ``prediction_precision`` chooses).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from ncl.losses._checks import check_non_negative, check_positive, check_square

RdhReduction = Literal["sum", "mean"]


def evidence(logits: Tensor, tau: float = 0.1) -> Tensor:
    """DECL's evidence ``e = exp(tanh(Z) / tau)`` (spec 4.6.1), differentiable.

    Args:
        logits: ``(B_img, B_cap)`` raw scores ``Z``.
        tau: temperature (DECL: 0.1, so ``e`` lies in ``[e^-10, e^10]``).

    Returns:
        ``(B_img, B_cap)`` evidence, in the dtype of ``logits``.
    """
    check_positive(tau, "tau")
    return torch.exp(torch.tanh(logits) / tau)


def dirichlet_kl_to_uniform(alpha: Tensor) -> Tensor:
    """``KL(Dir(alpha) || Dir(1))`` per row (spec 4.6.2, term C without ``lambda2``).

    ``KL = lnG(S) - sum_j lnG(alpha_j) - lnG(K) + sum_j (alpha_j - 1)(psi(alpha_j) - psi(S))``
    with ``S = sum_j alpha_j`` (``lnG(1) = 0``, so the uniform Dirichlet contributes
    ``-lnG(K)`` only). Computed in float64 (module docstring), returned in ``alpha``'s dtype.

    Args:
        alpha: ``(R, K)`` Dirichlet parameters, every entry ``>= 1``.

    Returns:
        ``(R,)`` KL divergences (``>= 0``).
    """
    a = alpha.double()
    k = a.shape[1]
    s = a.sum(dim=1)  # (R,)
    log_norm = torch.lgamma(s) - torch.lgamma(a).sum(dim=1) - math.lgamma(k)
    digamma_term = ((a - 1.0) * (torch.digamma(a) - torch.digamma(s).unsqueeze(1))).sum(dim=1)
    return (log_norm + digamma_term).to(alpha.dtype)


def edl_row_loss(alpha: Tensor, target: Tensor, lambda2: float, kl_weight: float = 1.0) -> Tensor:
    """The MSE evidential loss of each row of ``alpha`` (spec 4.6.2; Sensoy et al. 2018).

    For one row, ``S = sum_j alpha_j`` and ``p = alpha / S``:

    * ``A = sum_j (y_j - p_j)^2`` (squared error of the expected probabilities);
    * ``B = sum_j alpha_j (S - alpha_j) / (S^2 (S + 1))`` (their variance);
    * ``C = lambda2 * kl_weight * KL(Dir(alpha~) || Dir(1))`` with
      ``alpha~ = (alpha - 1)(1 - y) + 1``: the target's own evidence is removed, so only the
      evidence on wrong "classes" is pulled to the uniform Dirichlet.

    A row whose target is all zeros (DECL's predicted-noisy pairs) keeps all its evidence in
    the KL and its squared error pulls every ``p_j`` to 0.

    Args:
        alpha: ``(R, K)`` Dirichlet parameters (``e + 1``).
        target: ``(R, K)`` targets in {0, 1} (a row of the identity, or zeros).
        lambda2: the KL weight (DECL: 0.1, constant in the official code).
        kl_weight: an extra factor on ``C`` (the annealing ramp of
            :class:`~ncl.methods.decl.DECL`'s ``kl_anneal_epochs``; 1 = official).

    Returns:
        ``(R,)`` row losses ``A + B + C``.
    """
    check_non_negative(lambda2, "lambda2")
    if alpha.shape != target.shape or alpha.dim() != 2:
        raise ValueError(f"`alpha` and `target` must both be (R, K), got {tuple(alpha.shape)} "
                         f"and {tuple(target.shape)}")
    target = target.to(alpha.dtype)
    s = alpha.sum(dim=1, keepdim=True)  # (R, 1)
    p = alpha / s
    squared_error = ((target - p) ** 2).sum(dim=1)
    variance = (alpha * (s - alpha) / (s * s * (s + 1.0))).sum(dim=1)
    alpha_tilde = (alpha - 1.0) * (1.0 - target) + 1.0
    kl = dirichlet_kl_to_uniform(alpha_tilde)
    return squared_error + variance + (lambda2 * kl_weight) * kl


def edl_loss(evidence_matrix: Tensor, target: Tensor, lambda2: float,
             kl_weight: float = 1.0) -> Tensor:
    """Both directions' evidential loss per pair: ``loss_i2t(i) + loss_t2i(i)`` (spec 4.6.2).

    ``alpha_i2t = e + 1`` (row ``i``: image ``i``), ``alpha_t2i = e^T + 1`` (row ``i``:
    caption ``i``), both against the same target rows. ``L_edl`` is the mean of the result
    over the batch: the official code sums the two ``(B, 1)`` vectors and takes the mean.

    Args:
        evidence_matrix: ``(B, B)`` evidence ``e`` (:func:`evidence`).
        target: ``(B, B)`` label matrix: the identity, with the rows of pairs predicted noisy
            set to zero.
        lambda2, kl_weight: as :func:`edl_row_loss`.

    Returns:
        ``(B,)`` per-pair losses.
    """
    check_square(evidence_matrix, "evidence_matrix")
    return (edl_row_loss(evidence_matrix + 1.0, target, lambda2, kl_weight)
            + edl_row_loss(evidence_matrix.t() + 1.0, target, lambda2, kl_weight))


def hardness(step: int, batch_size: int, actual_batch: int, eta: float = 0.025, mu: int = 5) -> int:
    """The number ``k`` of negatives RDH focuses on at training step ``step`` (spec 4.6.3).

    ``k = max(int(batch_size - eta * step), mu)``, then ``k = actual_batch - 1`` when the
    batch has fewer than ``k`` pairs. The official code counts ``step`` from 1 (it increments
    before computing ``k``) over every training step, warm-up included, and uses the option
    ``batch_size`` (128), not the actual batch. ``int`` truncates towards zero, as Python's.

    Args:
        step: the global step, 1 for the first training batch.
        batch_size: the batch size the schedule starts from (the option; DECL 128).
        actual_batch: this batch's size ``B``.
        eta: the decrease per step (0.025).
        mu: the floor (5).

    Returns:
        ``k`` (at least 0; ``B - 1`` for a batch of ``B <= k``).
    """
    k = max(int(batch_size - eta * step), mu)
    return actual_batch - 1 if actual_batch < k else k


def rdh_loss(logits: Tensor, k: int, margin: float = 0.2) -> Tensor:
    """The Robust Dynamic Hinge per pair (spec 4.6.3).

    On ``T = tanh(Z)``: ``C_s[i, j] = [margin + T_ij - T_ii]_+`` (image ``i`` the anchor) and
    ``C_im[i, j] = [margin + T_ij - T_jj]_+`` (caption ``j`` the anchor), diagonals zeroed;
    ``r_i = (sum of the top k of row i of C_s + sum of the top k of column i of C_im) / k``.
    The official ``L_rdh`` is ``lambda1 * sum_i r_i`` over the pairs it keeps.

    Args:
        logits: ``(B, B)`` raw scores ``Z``.
        k: negatives per direction, ``1 <= k <= B`` (:func:`hardness`; ``k = B`` includes the
            zeroed diagonal, as the official ``topk`` does).
        margin: the hinge margin (0.2).

    Returns:
        ``(B,)`` per-pair ``r_i``.
    """
    b = check_square(logits, "logits")
    if not 1 <= k <= b:
        raise ValueError(f"`k` must lie in [1, B={b}], got {k}")
    t = torch.tanh(logits)
    diag = t.diagonal()
    eye = torch.eye(b, dtype=torch.bool, device=t.device)
    cost_s = (margin + t - diag.unsqueeze(1)).clamp(min=0).masked_fill(eye, 0.0)
    cost_im = (margin + t - diag.unsqueeze(0)).clamp(min=0).masked_fill(eye, 0.0)
    rows = cost_s.topk(k, dim=1).values.sum(dim=1)
    columns = cost_im.topk(k, dim=0).values.sum(dim=0)
    return (rows + columns) / k


def reduce_rdh(per_pair: Tensor, keep: Tensor, lambda1: float,
               reduction: RdhReduction = "sum") -> Tensor:
    """``L_rdh`` from the per-pair ``r_i`` of the pairs in ``keep`` (spec 4.6.3-4.6.4).

    ``sum`` (official): ``lambda1 * sum_{i in keep} r_i``; ``mean``: ``lambda1`` times their
    mean (the scale of ``L_edl``, which is a mean). An empty ``keep`` gives 0, still attached
    to the graph so that the step's backward sees every parameter.

    Args:
        per_pair: ``(B,)`` from :func:`rdh_loss`.
        keep: ``(B,)`` bool, the pairs RDH trains on (all in the warm-up, the predicted-clean
            ones after it).
        lambda1: the weight (0.8).
        reduction: ``sum`` or ``mean``.
    """
    if reduction not in ("sum", "mean"):
        raise ValueError(f"`reduction` must be 'sum' or 'mean', got {reduction!r}")
    kept = per_pair[keep]
    if kept.numel() == 0:
        return per_pair.sum() * 0.0
    return lambda1 * (kept.sum() if reduction == "sum" else kept.mean())


def correspondence_statistics(evidence_matrix: Tensor) -> Tensor:
    """DECL's per-pair correspondence prediction and uncertainty (spec 4.6.4 step 2).

    * ``N = (e + e^T)`` normalised by its row sums; pair ``i`` is predicted clean iff
      ``argmax_j N_ij == i`` (the first maximum, as ``torch.argmax``);
    * ``u_i2t(i) = K / sum_j alpha_i2t[i, j]`` and ``u_t2i(i) = K / sum_j alpha_t2i[i, j]``
      with ``K = B`` (the official code logs their sum ``u`` and does not train on it).

    Everything is computed in the dtype of ``evidence_matrix`` (module docstring, "Precision"):
    float32 evidence of saturated scores ties, and a tie goes to the first column, so the
    prediction depends on the precision the evidence was computed in.

    Args:
        evidence_matrix: ``(B, B)`` evidence of a batch, float32 (the official precision) or
            float64.

    Returns:
        ``(B, 4)`` float64 columns ``[predicted clean (0/1), u_i2t, u_t2i, N_ii]``.
    """
    b = check_square(evidence_matrix, "evidence_matrix")
    if evidence_matrix.dtype not in (torch.float32, torch.float64):
        raise ValueError("`evidence_matrix` must be float32 or float64, got "
                         f"{evidence_matrix.dtype}")
    e = evidence_matrix
    joint = e + e.t()
    normalised = joint / joint.sum(dim=1, keepdim=True)
    index = torch.arange(b, device=e.device)
    predicted = (normalised.argmax(dim=1) == index).to(e.dtype)
    u_i2t = b / (e + 1.0).sum(dim=1)
    u_t2i = b / (e + 1.0).sum(dim=0)
    return torch.stack([predicted, u_i2t, u_t2i, normalised.diagonal()], dim=1).double()


def dirichlet_uncertainty(evidence_matrix: Tensor) -> Tensor:
    """DECL's uncertainty of each pair of a batch (spec 4.6.1, both directions summed), the
    ``ncl predict`` ranking ``uncertainty``:
    ``u_i = K / sum_j alpha_i2t[i, j] + K / sum_j alpha_t2i[i, j]`` with ``alpha_i2t = e + 1``,
    ``alpha_t2i = e^T + 1`` and ``K = B``, from :func:`correspondence_statistics` in float64
    (DECL's own pass computes in ``model.prediction_precision``, float32 by default; the
    ensemble's evidence is float64, docs/switches.md "Ensemble precision").

    Args:
        evidence_matrix: ``(B, B)`` evidence ``e`` (images x captions, pair ``i`` on the
            diagonal).

    Returns:
        ``(B,)`` float64 in ``(0, 2]``; 2 when the batch holds no evidence at all.
    """
    stats = correspondence_statistics(_float64(evidence_matrix))
    return stats[:, 1] + stats[:, 2]


def decl_predicted_clean(evidence_matrix: Tensor) -> Tensor:
    """DECL's correspondence prediction for each pair of a batch (spec 4.6.4), in float64:
    ``N = (e + e^T) / rowsum(e + e^T)``; pair ``i`` is predicted clean iff
    ``argmax_j N[i, j] == i`` (the first maximum when several tie).

    Args:
        evidence_matrix: ``(B, B)`` evidence ``e`` (images x captions).

    Returns:
        ``(B,)`` bool, True = predicted clean.
    """
    return correspondence_statistics(_float64(evidence_matrix))[:, 0] > 0.5


def uncertainty_values(evidence_matrix: Tensor) -> tuple[Tensor, Tensor]:
    """``(uncertainty, predicted_clean)``, each ``(B,)``, of a batch's pairs from its
    ``(B, B)`` evidence (:func:`dirichlet_uncertainty`, :func:`decl_predicted_clean`)."""
    stats = correspondence_statistics(_float64(evidence_matrix))
    return stats[:, 1] + stats[:, 2], stats[:, 0] > 0.5


def _float64(evidence_matrix: Tensor) -> Tensor:
    """``evidence_matrix`` in float64 once it is a non-empty ``(B, B)`` float matrix."""
    check_square(evidence_matrix, "evidence_matrix")
    return evidence_matrix.double()
