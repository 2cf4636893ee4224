"""PC²'s pseudo-classification head and the resizing of word embeddings to a fixed number of
positions (docs/methods/pc2.md, steps 1 and 8; official ``model.py:Projection_Head`` and
``SGRAF.train``).

The head maps a flattened ``(R, E)`` block of region embeddings to ``proj_dim`` logits; the
same head scores captions after their word embeddings are brought to ``R`` positions, so one
head serves both modalities (the official ``img_pro_head``).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


class ProjectionHead(nn.Module):
    """``Linear(in_dim, hidden) -> ReLU -> Linear(hidden, out_dim)`` (PyTorch's default
    initialisation, as the official head).

    Args:
        in_dim: size of a flattened input (``R * E``: 36 * 1024 officially).
        out_dim: number of pseudo-classes (``proj_dim``, 128).
        hidden: hidden width (256).
    """

    def __init__(self, in_dim: int, out_dim: int, hidden: int = 256) -> None:
        super().__init__()
        if min(in_dim, out_dim, hidden) < 1:
            raise ValueError(f"ProjectionHead sizes must be >= 1, got {in_dim}, {hidden}, {out_dim}")
        self.hidden = nn.Linear(in_dim, hidden)
        self.out = nn.Linear(hidden, out_dim)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, ...)`` with ``in_dim`` elements per row -> ``(B, out_dim)`` logits."""
        return self.out(F.relu(self.hidden(x.reshape(x.shape[0], -1))))


def fit_positions(emb: Tensor, size: int) -> Tensor:
    """Bring ``(B, L, E)`` word embeddings to ``(B, size, E)`` as the official code does.

    ``L > size``: linear interpolation along the words (``align_corners=False``);
    ``L < size``: zero padding, ``(size - L) // 2`` positions before and the rest after;
    ``L == size``: unchanged.

    Args:
        emb: ``(B, L, E)``; ``L`` is the longest caption of the batch (padded words are zero).
        size: the number of positions (the region count ``R``; the official 36).
    """
    if emb.dim() != 3 or size < 1:
        raise ValueError(f"emb must be (B, L, E) and size >= 1, got {tuple(emb.shape)}, {size}")
    length = emb.shape[1]
    if length == size:
        return emb
    if length > size:
        return F.interpolate(emb.transpose(1, 2), size=size, mode="linear",
                             align_corners=False).transpose(1, 2)
    before = (size - length) // 2
    return F.pad(emb, (0, 0, before, size - length - before))
