"""GSC's losses (Zhao et al., CVPR 2024; official ``model/RINCE.py``): per sample, pure.

Conventions: ``sims`` is ``(B, B)``, rows images, columns captions, the diagonal the batch's
pairs; SGRAF's sigmoid scores in GSC. Despite the official class name ``RINCE`` the loss is
plain InfoNCE (``info_nce_loss``)::

    p_i(S, T)   = exp(S_ii / T) / sum_j exp(S_ij / T)          (row i; the official pos / (pos + neg))
    l_i(S, T)   = -log p_i(S, T)
    L_cl[i]     = (l_i(S, T) + l_i(S^T, T)) / 2 * y_i           (both directions; T = 0.07)
    preds[i]    = (p_i(S, T) + p_i(S^T, T)) / 2                 (stored per sample)

The structure term (``forward_topology``: :mod:`ncl.models.gsc_structure`)::

    A = sigmoid(S_img) * y[None, :]     B = sigmoid(S_cap) * y[None, :]   (columns scaled: the
                                                                           official (B, B) * (B,))
    L_topo[i]   = l_i(A B^T, 1.0) * y_i                          (one direction)
    score[i]    = cos(A[i, :], B[i, :])                          (stored per sample)
    loss        = mean_i L_cl[i] + gamma * mean_i L_topo[i]

``y`` are the per-sample targets (:mod:`ncl.division.gsc`). Both InfoNCE terms are the one
InfoNCE (:func:`ncl.losses.contrastive.info_nce`): ``L_cl`` and ``preds`` with
``combine="mean"``, ``weights=y`` and ``logits="per_direction"``; ``L_topo`` with
``directions="i2t"`` (the warm-up's ``infonce`` too, at ``T``). It uses a log-softmax: the
official ``exp`` form overflows float32 once ``(A B^T)_ij > 88`` (``A B^T`` reaches ``B``, the
batch size) and gives NaN there; elsewhere the values are the same.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ncl.losses._checks import check_square, work_dtype
from ncl.losses.contrastive import info_nce


def structure_matrices(img_logits: Tensor, cap_logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """``(sigmoid(S_img) * y[None, :], sigmoid(S_cap) * y[None, :])``: column ``i`` (anchor
    ``i``) scaled by its target, as the official broadcasting of ``(B, B) * (B,)``."""
    check_square(img_logits, "img_logits")
    check_square(cap_logits, "cap_logits")
    weights = targets.to(work_dtype(img_logits.dtype)).unsqueeze(0)  # (1, B)
    return (torch.sigmoid(img_logits.to(weights.dtype)) * weights,
            torch.sigmoid(cap_logits.to(weights.dtype)) * weights)


def structure_scores(img_structure: Tensor, cap_structure: Tensor) -> Tensor:
    """``(B,)`` cosine of row ``i`` of the two structure matrices (``torch.cosine_similarity``,
    eps 1e-8), the per-sample score GSC's mixture divides."""
    return F.cosine_similarity(img_structure, cap_structure, dim=1)


class GscTerms(NamedTuple):
    """One training step's terms: the scalar ``loss``, its two means, and the per-sample
    ``preds`` and structure ``scores`` to store (detached)."""

    loss: Tensor
    contrastive: Tensor
    structure: Tensor
    preds: Tensor
    scores: Tensor


def gsc_objective(sims: Tensor, img_logits: Tensor, cap_logits: Tensor, targets: Tensor, *,
                  temperature: float = 0.07, structure_temperature: float = 1.0,
                  gamma: float = 1.0) -> GscTerms:
    """GSC's training loss of one batch (module docstring).

    Args:
        sims: ``(B, B)`` image-caption scores (SGRAF's sigmoid).
        img_logits, cap_logits: ``(B, B)`` raw structure scores (:mod:`ncl.models.gsc_structure`).
        targets: ``(B,)`` per-sample targets ``y`` in [0, 1].
        temperature: of the image-caption InfoNCE (0.07).
        structure_temperature: of the structure InfoNCE (1.0).
        gamma: weight of the structure term.
    """
    weights = targets.to(work_dtype(sims.dtype))
    contrastive, preds = info_nce(sims, temperature, combine="mean", weights=weights, reduction="mean",
                                  logits="per_direction")  # the official two calls' gradients
    img_s, cap_s = structure_matrices(img_logits, cap_logits, weights)
    structure = info_nce(img_s @ cap_s.t(), structure_temperature, directions="i2t",
                         weights=weights, reduction="mean").loss
    return GscTerms(contrastive + gamma * structure, contrastive, structure, preds,
                    structure_scores(img_s, cap_s).detach())
