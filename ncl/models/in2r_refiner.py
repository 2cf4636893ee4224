"""IN2R's ``GraphRefiner`` (``co_train.py`` at 909e532): k retrieved neighbour embeddings ->
one rectified embedding, by multi-head self-attention over the neighbours (a complete graph on
the k nodes), a residual with layer norm, the mean over the nodes and an l2 norm.

With ``N`` the ``(B, k, E)`` neighbours, ``H`` heads of size ``d = E / H``:

``Q, K, V = N W_q + b_q, N W_k + b_k, N W_v + b_v`` split into heads ``(B, H, k, d)``;
``A = softmax(Q K^T / sqrt(d))`` over the last axis; ``C = A V`` merged back to ``(B, k, E)``;
``N' = LayerNorm(N + dropout(C W_o + b_o))``; ``out = mean_j N'_j / max(|mean_j N'_j|, 1e-12)``, ``(B, E)``.

The official class also builds an ``edge_nn`` (``Linear(2E, E/2)``, LeakyReLU, ``Linear(E/2,
1)``, Sigmoid) that its ``forward`` never calls; it is left out (``docs/methods/in2r.md``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class GraphRefiner(nn.Module):
    """Attention over k neighbours -> one unit vector (see the module docstring).

    Args:
        dim: embedding size E (the backbone's ``embed_size``).
        heads: attention heads H (official 4); ``dim`` must be a multiple of it.
        dropout: on the attention output before the residual (official 0.1).
    """

    def __init__(self, dim: int, heads: int = 4, dropout: float = 0.1) -> None:
        super().__init__()
        if heads < 1 or dim % heads:
            raise ValueError(f"GraphRefiner: dim ({dim}) must be a positive multiple of heads ({heads})")
        self.heads, self.head_dim = heads, dim // heads
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.output_layer = nn.Linear(dim, dim)
        self.layer_norm = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x: Tensor) -> Tensor:
        batch, k, _ = x.shape
        return x.view(batch, k, self.heads, self.head_dim).transpose(1, 2)  # (B, H, k, d)

    def forward(self, neighbours: Tensor) -> Tensor:
        """``(B, k, E)`` neighbour embeddings -> ``(B, E)`` unit rectified embeddings."""
        batch, k, dim = neighbours.shape
        q, key, v = (self._split(p(neighbours)) for p in (self.q_proj, self.k_proj, self.v_proj))
        weights = torch.softmax(q @ key.transpose(-2, -1) / math.sqrt(self.head_dim), dim=-1)  # (B, H, k, k)
        context = (weights @ v).transpose(1, 2).reshape(batch, k, dim)  # (B, k, E)
        nodes = self.layer_norm(neighbours + self.dropout(self.output_layer(context)))
        return F.normalize(nodes.mean(dim=1), dim=-1)  # (B, E): x / max(|x|, 1e-12), as official
