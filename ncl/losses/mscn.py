"""MSCN's losses (Han et al., CVPR 2023; official ``models.py`` ``ContrastiveLoss`` and
``main_MSCN.py`` at hhc1997/MSCN 01febc2). Pure functions of ``(B, B)`` corrected similarities.

* :func:`adaptive_margins`: the official ``s_adaptive`` soft margin of a pair whose corrected
  similarity is ``p``: ``alpha * s(p)``, ``s(p) = 1 / (1 + (p / (1 - p))^-2) = p^2 / (p^2 +
  (1 - p)^2)``.
* :func:`adaptive_triplet`: the hardest-negative triplet with those margins, summed over the
  batch. The official code adds the ``(B,)`` margins to the ``(B, B)`` score matrix, so the
  margin of entry ``[i, j]`` is caption ``j``'s (``margin_index="column"``): in the caption
  retrieval term (anchor image ``i``) that is the negative caption's margin, in the image
  retrieval term the anchor's. ``"anchor"`` gives every term its anchor pair's margin.
* :func:`meta_bce`: the meta loss, binary cross-entropy of the corrected similarity of meta
  pairs (label 1) and non-corresponding pairs (label 0), averaged (``torch.nn.BCELoss``).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

MarginIndex = Literal["column", "anchor"]


def adaptive_margins(p: Tensor, margin: float) -> Tensor:
    """``(B,)`` margins ``margin * p^2 / (p^2 + (1 - p)^2)`` of corrected similarities ``p``
    (``(B,)`` in [0, 1], no gradient is taken through them: the official ``sims_ind`` is
    computed under ``no_grad``)."""
    p = p.detach()
    return margin / (1 + torch.pow(p / (1 - p), -2))


def adaptive_triplet(sims: Tensor, margins: Tensor, margin_index: MarginIndex = "column") -> Tensor:
    """``(B,)`` hardest-negative triplet per pair with per-pair margins (summed by the caller).

    ``cost_s[i, j] = [m + S_ij - S_ii]_+`` (anchor image ``i``, max over ``j``) and
    ``cost_im[i, j] = [m + S_ij - S_jj]_+`` (anchor caption ``j``, max over ``i``), diagonal
    excluded; ``m`` is ``margins[j]`` (``column``, official) or the anchor's
    (``anchor``: ``margins[i]`` in ``cost_s``, ``margins[j]`` in ``cost_im``).

    Args:
        sims: ``(B, B)`` similarities, rows images, columns captions.
        margins: ``(B,)``.
        margin_index: ``column`` or ``anchor``.

    Returns:
        ``(B,)``: ``max_j cost_s[i, j] + max_i cost_im[i, i']`` at position ``i`` (the sum over
        the batch is the official loss).
    """
    if sims.dim() != 2 or sims.shape[0] != sims.shape[1] or margins.shape != sims.shape[:1]:
        raise ValueError(f"need (B, B) sims and (B,) margins, got {tuple(sims.shape)} and "
                         f"{tuple(margins.shape)}")
    if margin_index not in ("column", "anchor"):
        raise ValueError(f"margin_index must be 'column' or 'anchor', got {margin_index!r}")
    diag = sims.diagonal()
    col = margins.unsqueeze(0)  # (1, B): caption j's margin on column j
    m_s = col if margin_index == "column" else margins.unsqueeze(1)
    eye = torch.eye(sims.shape[0], dtype=torch.bool, device=sims.device)
    cost_s = (m_s + sims - diag.unsqueeze(1)).clamp(min=0).masked_fill(eye, 0)
    cost_im = (col + sims - diag.unsqueeze(0)).clamp(min=0).masked_fill(eye, 0)
    return cost_s.max(dim=1).values + cost_im.max(dim=0).values


def meta_bce(probs: Tensor, labels: Tensor) -> Tensor:
    """Mean binary cross-entropy of ``(M,)`` probabilities against ``(M,)`` 0/1 labels
    (``BCELoss``: each log term clamped at -100)."""
    if probs.shape != labels.shape:
        raise ValueError(f"probs and labels must have the same shape, got {tuple(probs.shape)} "
                         f"and {tuple(labels.shape)}")
    return F.binary_cross_entropy(probs, labels.to(probs.dtype))
