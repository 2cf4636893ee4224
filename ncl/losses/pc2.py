"""PC²'s losses (docs/methods/pc2.md; official ``model.py:ContrastiveLoss``,
``NonContrastiveLoss``, ``entropy``): hinges floored at 1e-8, the warm-up's selected mean
hinges, the soft-margin hardest-negative triplet in its two official margin layouts, and the
pseudo-classification loss with its entropy term.

Shapes: ``sims`` is ``(B, B)`` (rows images, columns captions); logits are ``(B, C)`` with
``C`` = ``proj_dim`` pseudo-classes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor

from ncl.losses.triplet import RecastKind

#: The official hinges clamp at this floor instead of 0 (``.clamp(min=1e-8)``).
HINGE_FLOOR = 1e-8

#: Which margin each hinge matrix reads (docs/methods/pc2.md, quirk Q4):
#: ``column``: both read image row ``i``'s margin (the labelled step's ``(B, 1)`` targets);
#: ``row``: both read caption column ``j``'s (the pseudo-caption step's ``(B,)`` labels);
#: ``per_sample``: ``C_s`` image row ``i``'s and ``C_im`` caption column ``j``'s (each anchor
#: its own pair's margin).
MarginLayout = Literal["column", "row", "per_sample"]
EntropyOf = Literal["samples", "batch_mean"]


def floored_hinges(sims: Tensor, margin_s: Tensor | float, margin_im: Tensor | float
                   ) -> tuple[Tensor, Tensor]:
    """``C_s[i,j] = max(m_s + S_ij - S_ii, 1e-8)``, ``C_im[i,j] = max(m_im + S_ij - S_jj, 1e-8)``,
    diagonals zeroed; margins broadcast against ``(B, B)``. Returns both ``(B, B)``."""
    if sims.dim() != 2 or sims.shape[0] != sims.shape[1]:
        raise ValueError(f"sims must be (B, B), got {tuple(sims.shape)}")
    diag = sims.diagonal()
    cost_s = (margin_s + sims - diag.unsqueeze(1)).clamp(min=HINGE_FLOOR)
    cost_im = (margin_im + sims - diag.unsqueeze(0)).clamp(min=HINGE_FLOOR)
    eye = torch.eye(sims.shape[0], dtype=torch.bool, device=sims.device)
    return cost_s.masked_fill(eye, 0.0), cost_im.masked_fill(eye, 0.0)


def mean_hinges(sims: Tensor, margin: float = 0.2) -> Tensor:
    """Per-pair mean hinge ``mean_j C_s[i,j] + mean_r C_im[r,i]`` (means over all B entries,
    zero diagonal included; official ``eval_loss``). Returns ``(B,)``."""
    cost_s, cost_im = floored_hinges(sims, margin, margin)
    return cost_s.mean(dim=1) + cost_im.mean(dim=0)


def selected_mean_hinges(sims: Tensor, margin: float = 0.2, rate: float = 0.5) -> Tensor:
    """The warm-up's ``warmup_sele``: the mean hinges of the ``int(B * rate)`` smallest pairs,
    0 elsewhere (``torch.topk`` breaks ties). Returns ``(B,)``; the official loss is its sum."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must lie in [0, 1], got {rate}")
    losses = mean_hinges(sims, margin)
    keep = torch.zeros_like(losses, dtype=torch.bool)
    count = int(losses.shape[0] * rate)
    if count > 0:
        keep[torch.topk(losses.detach(), count, largest=False).indices] = True
    return losses.masked_fill(~keep, 0.0)


def soft_hardest_triplet(sims: Tensor, labels: Tensor, layout: MarginLayout, alpha: float = 0.2,
                         kind: RecastKind = "exponential") -> Tensor:
    """Hardest-negative hinge with soft margins ``Psi(labels)`` (``0.2 (10^y - 1)/9`` for
    ``exponential``), per pair: ``max_j C_s[i,j] + max_r C_im[r,i]``.

    Args:
        sims: ``(B, B)``.
        labels: ``(B,)`` soft labels in [0, 1]; gradients through them are kept.
        layout: which margin each hinge reads (:data:`MarginLayout`).
        alpha: the largest margin.
        kind: the recast (``linear``, ``exponential``, ``sin``).

    Returns:
        ``(B,)``; the official loss is its sum.
    """
    if layout not in get_args(MarginLayout):
        raise ValueError(f"layout must be one of {get_args(MarginLayout)}, got {layout!r}")
    if labels.shape != sims.shape[:1]:
        raise ValueError(f"labels must be (B,) with B={sims.shape[0]}, got {tuple(labels.shape)}")
    m = recast(labels.to(sims.dtype), alpha, kind)
    col, row = m.unsqueeze(1), m.unsqueeze(0)
    m_s, m_im = {"column": (col, col), "row": (row, row), "per_sample": (col, row)}[layout]
    cost_s, cost_im = floored_hinges(sims, m_s, m_im)
    return cost_s.max(dim=1).values + cost_im.max(dim=0).values


def recast(labels: Tensor, alpha: float = 0.2, kind: RecastKind = "exponential") -> Tensor:
    """Soft margins of labels as the official ``ContrastiveLoss`` computes them, without a range
    check (a cosine label may exceed 1 by a rounding error): ``linear`` ``alpha y``,
    ``exponential`` ``alpha (10^y - 1)/9``, ``sin`` ``alpha (sin(pi y - pi/2)/2 + 1/2)``."""
    if kind == "linear":
        return alpha * labels
    if kind == "exponential":
        return alpha * (torch.pow(10.0, labels) - 1) / 9
    if kind == "sin":
        return alpha * (torch.sin(math.pi * labels - math.pi / 2) / 2 + 0.5)
    raise ValueError(f"kind must be linear, exponential or sin, got {kind!r}")


def sample_entropy(prob: Tensor) -> Tensor:
    """Mean per-sample entropy of ``(B, C)`` probabilities, each clamped at 1e-8 inside:
    ``mean_i -sum_c x_ic log x_ic`` with ``x = max(p, 1e-8)`` (official ``entropy`` on 2-D)."""
    x = prob.clamp(min=1e-8)
    return -(x * x.log()).sum(dim=1).mean()


def distribution_entropy(prob: Tensor) -> Tensor:
    """Entropy of one ``(C,)`` distribution, clamped as :func:`sample_entropy` (official
    ``entropy`` on 1-D)."""
    x = prob.clamp(min=1e-8)
    return -(x * x.log()).sum()


@dataclass(frozen=True)
class PseudoClassTerms:
    """The pseudo-classification terms of one batch (scalars).

    Attributes:
        loss: ``CE(img, argmax q) - lambda_en * H``, added to the triplet.
        ce_image: ``CE(image logits, argmax q)`` (captions label images).
        ce_caption: ``CE(text logits, argmax p)``, logged only (detached).
        entropy: the ``H`` in the loss (:data:`EntropyOf`).
        caption_entropy: entropy of the batch-mean caption prediction, logged only (detached).
    """

    loss: Tensor
    ce_image: Tensor
    ce_caption: Tensor
    entropy: Tensor
    caption_entropy: Tensor


def pseudo_classification(img_logits: Tensor, txt_logits: Tensor, lambda_en: float,
                          entropy_of: EntropyOf = "samples") -> PseudoClassTerms:
    """PC²'s pseudo-classification loss (docs/methods/pc2.md step 2).

    ``q = softmax(txt_logits)`` labels the images through ``argmax q`` (no gradient), and
    ``loss = CE(img_logits, argmax q) - lambda_en * H`` with ``H`` the mean per-sample entropy
    of ``p = softmax(img_logits)`` (``samples``, official: the loss raises it) or the entropy of
    the batch mean of ``p`` (``batch_mean``).

    Args:
        img_logits, txt_logits: ``(B, C)``.
        lambda_en: the entropy weight (README commands 10).
        entropy_of: which entropy is subtracted.
    """
    if img_logits.shape != txt_logits.shape or img_logits.dim() != 2:
        raise ValueError(f"logits must both be (B, C), got {tuple(img_logits.shape)} and "
                         f"{tuple(txt_logits.shape)}")
    if entropy_of not in get_args(EntropyOf):
        raise ValueError(f"entropy_of must be one of {get_args(EntropyOf)}, got {entropy_of!r}")
    p, q = img_logits.softmax(dim=1), txt_logits.softmax(dim=1)
    ce_image = F.cross_entropy(img_logits, q.argmax(dim=1))
    with torch.no_grad():
        ce_caption = F.cross_entropy(txt_logits, p.argmax(dim=1))
        caption_entropy = distribution_entropy(q.mean(dim=0))
    entropy = sample_entropy(p) if entropy_of == "samples" else distribution_entropy(p.mean(dim=0))
    return PseudoClassTerms(ce_image - lambda_en * entropy, ce_image, ce_caption, entropy,
                            caption_entropy)
