"""BiCro's soft correspondence labels (CVPR 2023; docs/methods/bicro.md) as pure functions of a
network's embeddings and scores; the method computes them with the peer network in eval mode,
without gradients.

Per labelled batch (the peer's clean pairs):

1. **Anchors** (:func:`choose_anchors`): ``p_i = clamp(alpha - l_i / 2, 0, alpha)`` from the
   batch's mean hinge ``l_i`` (margin ``alpha``); the ``B // 10 + 1`` pairs with the largest
   ``p`` (the last of an ascending ``argsort``; stable here, the official GPU sort is not) are
   the anchors.
2. **Global embeddings** (:func:`global_embeddings`): the mean of an image's region embeddings
   and of a caption's first ``len`` word embeddings, not normalised.
3. **Bidirectional consistency** (:func:`consistency`, the official ``SIM_SELE``): the cosine of
   each pair's image to every anchor image (``(B, A)``) and of its caption to every anchor caption;
   the nearest anchor in one modality gives ``t`` (the cosine there) and ``v`` (the other
   modality's cosine to the same anchor); the score is ``t / v`` if that is below 1, else
   ``v / t``. ``i2t`` takes the nearest anchor by image, ``t2i`` by caption.
4. **Labels**: labelled ``d = 1/2 + (i2t + t2i) / 4`` (:func:`labelled_soft_labels`),
   unlabelled ``(i2t + t2i) / 2`` against the labelled batch's anchors
   (:func:`unlabelled_soft_labels`); with a ``floor`` (the scripts' ``noise_soft`` with
   ``noise_tem`` 0.5) values at or below it become 0; clamped to [0, 1]; anchors get 1.

The official labelled labels are written with ``y.scatter_(0, rest, d)``, which puts pair
``k``'s value at pair ``rest[k]`` (``label_scatter="official"``); ``aligned`` gives every
non-anchor pair its own value.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from ncl.losses.triplet import triplet_loss

LabelScatter = Literal["official", "aligned"]


def choose_anchors(sims: Tensor, margin: float = 0.2) -> tuple[Tensor, Tensor]:
    """The batch's anchors and the other pairs (step 1 of the module docstring).

    Args:
        sims: ``(B, B)`` scores of the labelled batch.
        margin: ``alpha`` (0.2).

    Returns:
        ``(anchors, rest)``: ``(A,)`` and ``(B - A,)`` int64 indices, ``A = B // 10 + 1``, both in
        the order of the ascending sort of ``p`` (``rest`` first the least confident).
    """
    losses = triplet_loss(sims, margin, negatives="mean")  # (B,)
    p = (margin - losses / 2).clamp(0.0, margin)
    order = torch.argsort(p, stable=True)
    count = sims.shape[0] // 10 + 1
    return order[-count:], order[:-count]


def global_embeddings(img_emb: Tensor, cap_emb: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """``(B, E)`` image and caption globals: the mean over regions and over the first
    ``lengths[i]`` words (step 2). A ``(B, E)`` image embedding (a pooled backbone) is its own
    global."""
    img_g = img_emb.mean(dim=1) if img_emb.dim() == 3 else img_emb
    steps = torch.arange(cap_emb.shape[1], device=cap_emb.device)
    mask = (steps.unsqueeze(0) < lengths.to(cap_emb.device).unsqueeze(1)).to(cap_emb.dtype)  # (B, L)
    cap_g = (cap_emb * mask.unsqueeze(2)).sum(dim=1) / mask.sum(dim=1, keepdim=True)
    return img_g, cap_g


def anchor_cosines(anchors: Tensor, x: Tensor, eps: float = 1e-8) -> Tensor:
    """``(B, A)`` cosines of every row of ``x`` ``(B, E)`` to every anchor ``(A, E)`` (the
    official ``SIM_PAIR``: the product of the norms clamped at ``eps``)."""
    norms = x.norm(dim=1, keepdim=True) * anchors.norm(dim=1).unsqueeze(0)
    return (x @ anchors.t()) / norms.clamp(min=eps)


def consistency(first: Tensor, second: Tensor) -> Tensor:
    """The official ``SIM_SELE`` (step 3): ``(B,)`` from two ``(B, A)`` cosine tables; the
    nearest anchor by ``first`` gives ``t``, ``second`` at that anchor gives ``v``; ``t / v`` if
    it is below 1, else ``v / t``."""
    t, nearest = first.max(dim=1)
    v = second.gather(1, nearest.unsqueeze(1)).squeeze(1)
    ratio = t / v
    return torch.where(ratio < 1, ratio, v / t)


def bidirectional(img_g: Tensor, cap_g: Tensor, anchor_img: Tensor, anchor_cap: Tensor) -> Tensor:
    """``(B,)`` ``i2t + t2i`` of every pair against the anchors' globals."""
    sim_img, sim_cap = anchor_cosines(anchor_img, img_g), anchor_cosines(anchor_cap, cap_g)
    return consistency(sim_img, sim_cap) + consistency(sim_cap, sim_img)


def _floored(values: Tensor, floor: float | None) -> Tensor:
    return values if floor is None else values * (values > floor)


def labelled_soft_labels(sims: Tensor, img_g: Tensor, cap_g: Tensor, margin: float = 0.2,
                         floor: float | None = 0.5, scatter: LabelScatter = "official"
                         ) -> tuple[Tensor, Tensor]:
    """The labelled batch's soft labels (module docstring).

    Args:
        sims: ``(B, B)`` the peer's scores of the batch.
        img_g, cap_g: ``(B, E)`` the peer's global embeddings.
        margin: ``alpha`` of the anchors' choice (0.2).
        floor: values at or below are zeroed (0.5, the scripts); ``None``: no floor.
        scatter: ``official`` (pair ``k``'s value written to pair ``rest[k]``) or ``aligned``.

    Returns:
        ``(labels, anchors)``: ``(B,)`` in [0, 1] and the ``(A,)`` anchor indices.
    """
    anchors, rest = choose_anchors(sims, margin)
    d = 0.5 + bidirectional(img_g, cap_g, img_g[anchors], cap_g[anchors]) / 4  # (B,)
    d = _floored(d, floor).clamp(0, 1)
    labels = torch.zeros_like(d)
    labels[anchors] = 1.0
    labels[rest] = d[: rest.numel()] if scatter == "official" else d[rest]
    return labels, anchors


def unlabelled_soft_labels(img_g: Tensor, cap_g: Tensor, anchor_img: Tensor, anchor_cap: Tensor,
                           floor: float | None = 0.5) -> Tensor:
    """``(B_u,)`` soft labels ``(i2t + t2i) / 2`` of an unlabelled batch's globals against the
    labelled batch's anchors ``(A, E)``, floored as :func:`labelled_soft_labels`, in [0, 1]."""
    return _floored(bidirectional(img_g, cap_g, anchor_img, anchor_cap) / 2, floor).clamp(0, 1)
