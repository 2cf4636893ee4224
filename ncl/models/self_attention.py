"""Global vectors by self-attention: ``VisualSA`` and ``TextSA`` (spec 3.3).

Submodule names (``embedding_local``, ``embedding_global``, ``embedding_common`` as
Sequentials with the Linear at index 0 and BatchNorm at index 1) equal the official ones
(spec 3.4), so ``sim_enc.v_global_w.*`` and ``sim_enc.t_global_w.*`` load directly.
"""

from __future__ import annotations

from torch import Tensor, nn

from ncl.models.layers import init_similarity_weights, l2norm


class VisualSA(nn.Module):
    """Image global vector ``v~`` (spec 3.3, "VisualSA").

    ``a_r = Drop(tanh(BN_R(W_l v_r)))``, ``g = Drop(tanh(BN_E(W_g mean_r v_r)))``,
    ``w = softmax_r(W_c (a_r * g))``, ``v~ = l2norm(sum_r w_r v_r)``.
    ``BN_R`` uses the region index as channel axis, so the region count is fixed.

    Args:
        embed_size: Region embedding size (1024).
        dropout: Dropout rate after each tanh (0.4).
        num_regions: Regions per image (36); fixes ``BatchNorm1d(num_regions)``.
    """

    def __init__(self, embed_size: int, dropout: float, num_regions: int) -> None:
        super().__init__()
        self.embedding_local = nn.Sequential(
            nn.Linear(embed_size, embed_size), nn.BatchNorm1d(num_regions), nn.Tanh(),
            nn.Dropout(dropout))
        self.embedding_global = nn.Sequential(
            nn.Linear(embed_size, embed_size), nn.BatchNorm1d(embed_size), nn.Tanh(),
            nn.Dropout(dropout))
        self.embedding_common = nn.Sequential(nn.Linear(embed_size, 1))
        init_similarity_weights(self)

    def forward(self, regions: Tensor) -> Tensor:
        """Attend over regions.

        Args:
            regions: ``(B, R, E)`` region embeddings.

        Returns:
            ``(B, E)`` unit-norm global image vectors.
        """
        local = self.embedding_local(regions)  # (B, R, E)
        glob = self.embedding_global(regions.mean(dim=1))  # (B, E)
        scores = self.embedding_common(local * glob.unsqueeze(1)).squeeze(-1)  # (B, R)
        weights = scores.softmax(dim=-1)
        # The weights apply to the un-projected regions (spec 3.3).
        return l2norm((weights.unsqueeze(-1) * regions).sum(dim=1), dim=-1)


class TextSA(nn.Module):
    """Caption global vector ``t~`` (spec 3.3, "TextSA"): VisualSA without BatchNorm.

    The reference applies it to one caption at a time over its first ``L_j`` tokens. With a
    token mask a whole batch is exact in eval mode (no BatchNorm couples the captions);
    only dropout draws differ in train mode.

    Args:
        embed_size: Word embedding size (1024).
        dropout: Dropout rate after each tanh (0.4).
    """

    def __init__(self, embed_size: int, dropout: float) -> None:
        super().__init__()
        self.embedding_local = nn.Sequential(
            nn.Linear(embed_size, embed_size), nn.Tanh(), nn.Dropout(dropout))
        self.embedding_global = nn.Sequential(
            nn.Linear(embed_size, embed_size), nn.Tanh(), nn.Dropout(dropout))
        self.embedding_common = nn.Sequential(nn.Linear(embed_size, 1))
        init_similarity_weights(self)

    def forward(self, words: Tensor, mask: Tensor | None = None) -> Tensor:
        """Attend over words.

        Args:
            words: ``(B, L, E)`` word embeddings.
            mask: Optional ``(B, L)`` bool, True at real tokens (each row has at least one).
                None means every position is a real token (the reference per-caption call).

        Returns:
            ``(B, E)`` unit-norm global caption vectors.
        """
        if mask is None:
            mean = words.mean(dim=1)  # (B, E)
        else:
            maskf = mask.unsqueeze(-1).to(words.dtype)  # (B, L, 1)
            mean = (words * maskf).sum(dim=1) / maskf.sum(dim=1)
        local = self.embedding_local(words)  # (B, L, E)
        glob = self.embedding_global(mean)  # (B, E)
        scores = self.embedding_common(local * glob.unsqueeze(1)).squeeze(-1)  # (B, L)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        pooled = (weights.unsqueeze(-1) * words).sum(dim=1)
        return l2norm(pooled, dim=-1)
