"""Gated embedding model for video-text retrieval (LNC appendix D.2, Eq. D8; Miech et al.).

LNC's video experiments (section 4.2, appendix D.2) use the text-video model of Miech et al.
(2019, HowTo100M), whose building block is the *gated embedding unit* of Miech et al. (2018,
"Learning a Text-Video Embedding from Incomplete and Heterogeneous Data"), Eq. D8::

    f(v) = (W1 v + b1) * sigmoid(W2 (W1 v + b1) + b2)

one per modality, into a 4096-d common space, scored by cosine similarity. Adam, lr 1e-4,
batch 256 (appendix D.2).

Video input: a clip's expert features (2D appearance pooled over frames, 3D motion, ...) are
packed as the "image" tensor of the ncl batch contract, ``(B, K, D)``: row ``k`` is expert
``k``, zero-padded from its own size ``d_k`` to ``D = max d_k`` (:mod:`ncl.data.video`). The
zero padding is harmless: a zero input column meets a weight column that contributes nothing
and gets no gradient. A clip that lacks an expert has an all-zero row there ("incomplete
data" in Miech et al. 2018).

Two ways to combine the experts (``fusion``):

* ``mixture`` (default; Miech et al. 2018, "Mixture of Embedding Experts"): one gated unit
  per expert on each side, so K video embeddings ``f_k(v)`` and K text embeddings ``g_k(t)``;
  the text decides how much each expert counts, ``w(t) = softmax(A t_pooled)``, and
  ``s(v, t) = sum_k a_k(v) w_k(t) cos(f_k(v), g_k(t)) / sum_k a_k(v) w_k(t)`` where
  ``a_k(v)`` is 1 when the clip has expert ``k`` (the weights are renormalised over the
  experts present, as Miech et al. 2018 do for missing modalities).
* ``concat`` (Miech et al. 2019, the model LNC extends): the experts are concatenated into one
  vector and each side has a single gated unit; ``s(v, t) = cos(f(v), g(t))``.

Text side. Miech et al. embed words with word2vec (GoogleNews, frozen) and pool them
(NetVLAD in 2018; a ReLU layer and max-pooling in 2019). ncl's choice, because ncl's data
are token ids over its own vocabulary and no word2vec file ships: *learned* word embeddings,
then ``ReLU(Linear)`` per word and max-pooling over the caption's tokens (the 2019 text
branch with trainable embeddings), then the gated unit(s).

Embeddings handed to the evaluation (:class:`~ncl.models.contracts.RetrievalBackbone`):

* :meth:`GatedVideoText.encode_images` -> ``(B, K', E + 1)``: per expert the unit-norm
  ``f_k(v)`` and, in the last column, the availability flag ``a_k(v)`` (``K' = 1`` with
  ``concat``);
* :meth:`GatedVideoText.encode_captions` -> pooled ``(B, K' * E + K')``: the K' unit-norm
  ``g_k(t)`` concatenated, then the K' mixture weights ``w_k(t)``. Pooled (2-D) so that the
  sharded evaluation does not trim it as a word sequence.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from ncl.errors import ConfigError
from ncl.models.layers import at_least_float32, float32_region, l2norm

Fusion = Literal["mixture", "concat"]


class GatedEmbeddingUnit(nn.Module):
    """Eq. D8: ``z = W1 x + b1; f(x) = z * sigmoid(W2 z + b2)``, then l2-normalised.

    The normalisation is what makes the inner product of two units the cosine LNC scores
    with (Miech et al. 2018 normalise the unit's output too).

    Args:
        in_dim: input size.
        out_dim: common-space size E (4096 in LNC).
    """

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_dim, out_dim)  # W1, b1
        self.gate = nn.Linear(out_dim, out_dim)  # W2, b2 (context gating)

    def forward(self, x: Tensor) -> Tensor:
        """``(..., in_dim) -> (..., out_dim)``, unit norm along the last axis."""
        z = self.fc(x)
        return l2norm(z * torch.sigmoid(self.gate(z)), dim=-1)


class GatedVideoText(nn.Module):
    """Gated-embedding video-text network; satisfies :class:`~ncl.models.contracts.RetrievalBackbone`.

    Args:
        vocab_size: word-embedding rows (the DataModule's vocabulary; the CLI links it).
        img_dim: D, the padded expert size of the packed clip features (``(B, K, D)``).
        num_regions: K, the number of experts; named like SGRAF's region count so that
            ncl's feature-shape check (``num_regions`` x ``img_dim`` against the data) applies.
        word_dim: learned word-embedding size (Miech et al.: 300-d word2vec, frozen).
        text_dim: size of the per-word ``ReLU(Linear)`` before max-pooling (2048 in Miech
            et al. 2019).
        embed_size: common space E (4096 in LNC appendix D.2).
        fusion: ``mixture`` (Miech et al. 2018) or ``concat`` (Miech et al. 2019); see the
            module docstring.
        add_mask_token: one more embedding row for ``<mask>`` (id ``vocab_size``), for
            methods/augmentations that mask tokens (RCL's vocabulary carries it).

    Attributes:
        img_dim, num_regions: checked against the data before training.
        vocab_size: embedding rows, ``<mask>`` included when added.
    """

    def __init__(self, vocab_size: int, img_dim: int = 2048, num_regions: int = 2,
                 word_dim: int = 300, text_dim: int = 2048, embed_size: int = 4096,
                 fusion: Fusion = "mixture", add_mask_token: bool = False) -> None:
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("img_dim", img_dim),
                            ("num_regions", num_regions), ("word_dim", word_dim),
                            ("text_dim", text_dim), ("embed_size", embed_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"GatedVideoText {name} must be a positive int, got {value!r}")
        if fusion not in ("mixture", "concat"):
            raise ConfigError(f"GatedVideoText fusion must be 'mixture' or 'concat', got {fusion!r}")
        self.img_dim, self.num_regions, self.embed_size = img_dim, num_regions, embed_size
        self.fusion: Fusion = fusion
        self.vocab_size = vocab_size + int(add_mask_token)
        # K' video units: one per expert (mixture) or one over the concatenation (concat).
        self.n_units = num_regions if fusion == "mixture" else 1
        unit_in = img_dim if fusion == "mixture" else num_regions * img_dim
        self.video_units = nn.ModuleList([GatedEmbeddingUnit(unit_in, embed_size)
                                          for _ in range(self.n_units)])
        self.embed = nn.Embedding(self.vocab_size, word_dim)
        self.word_fc = nn.Linear(word_dim, text_dim)
        self.text_units = nn.ModuleList([GatedEmbeddingUnit(text_dim, embed_size)
                                         for _ in range(self.n_units)])
        # Mixture weights from the text side (Miech et al. 2018): softmax(A t).
        self.mixture = nn.Linear(text_dim, self.n_units) if fusion == "mixture" else None

    # ------------------------------------------------------------------ encoders
    def encode_images(self, images: Tensor, image_lengths: Tensor | None = None) -> Tensor:
        """Packed expert features -> per-unit embeddings with availability flags.

        Args:
            images: ``(B, K, D)``; an all-zero row is a missing expert.
            image_lengths: accepted for the contract; must be ``None`` or all ``K`` (the
                expert count is fixed).

        Returns:
            ``(B, K', E + 1)``: unit-norm embeddings (zero for a missing expert), last column
            the flag ``a_k`` in {0, 1}.
        """
        if images.dim() != 3 or tuple(images.shape[1:]) != (self.num_regions, self.img_dim):
            raise ValueError(f"images must have shape (B, {self.num_regions} experts, "
                             f"{self.img_dim}), got {tuple(images.shape)}")
        if image_lengths is not None and bool((image_lengths != self.num_regions).any()):
            raise ValueError("GatedVideoText needs every expert row (image_lengths == K); "
                             "region-removing augmentation does not apply to video experts")
        present = (images.abs().amax(dim=-1) > 0).to(images.dtype)  # (B, K)
        if self.fusion == "concat":
            flat = images.reshape(images.shape[0], 1, -1)  # (B, 1, K*D)
            emb = self.video_units[0](flat)  # (B, 1, E)
            avail = (present.amax(dim=1, keepdim=True))  # (B, 1): any expert at all
        else:
            emb = torch.stack([unit(images[:, k]) for k, unit in enumerate(self.video_units)],
                              dim=1)  # (B, K, E)
            avail = present
        emb = emb * avail.unsqueeze(-1)  # a missing expert contributes nothing
        return torch.cat([emb, avail.unsqueeze(-1)], dim=-1)  # (B, K', E+1)

    def encode_captions(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """Token ids -> K' unit-norm text embeddings and K' mixture weights, flattened.

        Args:
            tokens: ``(B, L)`` int64, zero-padded.
            lengths: ``(B,)`` true lengths (``<start>``/``<end>`` included), any order.

        Returns:
            ``(B, K' * E + K')``.
        """
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(f"tokens must be a 2-D long tensor, got shape {tuple(tokens.shape)} "
                             f"and dtype {tokens.dtype}")
        lengths = torch.as_tensor(lengths, device=tokens.device).long()
        if lengths.shape != (tokens.shape[0],) or (tokens.shape[0] and (
                int(lengths.min()) < 1 or int(lengths.max()) > tokens.shape[1])):
            raise ValueError(f"lengths must have shape ({tokens.shape[0]},) with values in "
                             f"[1, {tokens.shape[1]}], got {lengths.tolist()}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"tokens must lie in [0, {self.vocab_size}) (vocab_size)")
        words = torch.relu(self.word_fc(self.embed(tokens)))  # (B, L, text_dim)
        valid = torch.arange(tokens.shape[1], device=tokens.device)[None, :] < lengths[:, None]
        # Max-pool over the real tokens only: padding gets -inf, so it never wins.
        pooled = words.masked_fill(~valid.unsqueeze(-1), float("-inf")).amax(dim=1)  # (B, text_dim)
        emb = torch.cat([unit(pooled) for unit in self.text_units], dim=-1)  # (B, K'*E)
        if self.mixture is None:
            weights = pooled.new_ones(pooled.shape[0], 1)
        else:
            weights = torch.softmax(self.mixture(pooled), dim=-1)  # (B, K)
        return torch.cat([emb, weights], dim=-1)

    # ------------------------------------------------------------------ similarity
    def similarity(self, img_emb: Tensor, cap_emb: Tensor, cap_lengths: Tensor | None = None) -> Tensor:
        """Weighted cosine over experts (Miech et al. 2018), renormalised over present experts.

        ``s(i, j) = sum_k a_ik w_jk <f_ik, g_jk> / sum_k a_ik w_jk``; with one unit
        (``concat``) this is the plain cosine.

        Args:
            img_emb: ``(B_img, K', E + 1)`` from :meth:`encode_images`.
            cap_emb: ``(B_cap, K' * E + K')`` from :meth:`encode_captions`.
            cap_lengths: unused (the contract passes it).

        Returns:
            ``(B_img, B_cap)`` scores in ``[-1, 1]``.
        """
        k, e = self.n_units, self.embed_size
        if img_emb.dim() != 3 or tuple(img_emb.shape[1:]) != (k, e + 1) \
                or cap_emb.dim() != 2 or cap_emb.shape[1] != k * e + k:
            raise ValueError(f"GatedVideoText.similarity needs (B_img, {k}, {e + 1}) and "
                             f"(B_cap, {k * e + k}) embeddings, got {tuple(img_emb.shape)} and "
                             f"{tuple(cap_emb.shape)}")
        img_emb, cap_emb = at_least_float32(img_emb), at_least_float32(cap_emb)  # float32 score (docs/precision.md)
        video, avail = img_emb[..., :e], img_emb[..., e]  # (Bi, K, E), (Bi, K)
        text = cap_emb[:, : k * e].reshape(-1, k, e)  # (Bc, K, E)
        weights = cap_emb[:, k * e:]  # (Bc, K)
        with float32_region(img_emb.device):
            cosines = torch.einsum("ike,jke->ijk", video, text)  # (Bi, Bc, K)
        mix = avail[:, None, :] * weights[None, :, :]  # (Bi, Bc, K)
        # A clip with no expert at all scores 0 against everything (clamp avoids 0/0).
        return (mix * cosines).sum(-1) / mix.sum(-1).clamp_min(1e-8)

    def forward(self, images: Tensor, tokens: Tensor, lengths: Tensor,
                image_lengths: Tensor | None = None) -> Tensor:
        """``(B, B)`` scores of every clip/caption pair of a training batch."""
        return self.similarity(self.encode_images(images, image_lengths),
                               self.encode_captions(tokens, lengths), lengths)
