"""The SGRAF similarity encoder (official "EncoderSimilarity"; spec 3.3, section 6 item 1).

Two ways to fill the ``(B_img, B_cap)`` score matrix:

* ``loop``: the reference formulation, one caption at a time against all images, exactly as
  spec 3.3 "How a batch matrix is produced" describes it.
* ``chunked``: captions sorted by length and processed in chunks, all images at once, with
  masks for the variable lengths. Exact savings: the SGR head fuses its query and key maps
  and updates only the global node in its last step (:func:`ncl.models.reasoning.sgr_masked`);
  the local similarity vectors recompute their ``(B_img, C L, 1024)`` intermediates in the
  backward pass instead of storing them (:mod:`ncl.models.local_similarity`); the
  region-word products of consecutive chunks are one matrix product (up to
  ``SCORE_BUDGET_BYTES``), not one skinny product per chunk. Equal to
  ``loop`` up to float rounding in eval mode; in train mode only dropout draws differ (SAF's
  BatchNorm statistics are per caption, as in the loop).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ncl.models.layers import float32_linear, init_similarity_weights, l2norm
from ncl.models.local_similarity import local_similarity
from ncl.models.reasoning import (
    AttentionFiltration,
    FusedStep,
    GraphReasoning,
    fused_queries,
    saf_masked,
    sgr_masked,
    update_running_stats,
)
from ncl.models.self_attention import TextSA, VisualSA

SMOOTH = 9.0  # lambda of the SCAN text-to-image attention (spec 3.3)
LEAKY_SLOPE = 0.1

Strategy = Literal["loop", "chunked"]
# Largest region-word product computed for a group of chunks at once (float32 bytes): all
# captions of a 128 x 128 training batch (4,608 x ~1,800, 33 MB) fit; an evaluation shard of
# 1,000 images gets ~450 words per product. See docs/benchmarks/train_step.md.
SCORE_BUDGET_BYTES = 64 << 20


def scan_attention(words: Tensor, regions: Tensor, smooth: float = SMOOTH) -> Tensor:
    """SCAN text-to-image attention, reference form (spec 3.3; NCR supplement eqs. 3-4).

    ``s_rk = LeakyReLU_0.1(v_r . t_k)``, l2-normalised over the words ``k`` of each region,
    ``alpha_kr = softmax_r(smooth * s_rk)``, ``c_k = l2norm(sum_r alpha_kr v_r)``.

    Args:
        words: ``(B, L, E)`` word embeddings (all real tokens), one caption per image row.
        regions: ``(B, R, E)`` region embeddings.
        smooth: Softmax inverse temperature (9.0).

    Returns:
        ``(B, L, E)`` attended, l2-normalised region context per word.
    """
    scores = torch.bmm(regions, words.transpose(1, 2))  # (B, R, L)
    scores = l2norm(F.leaky_relu(scores, LEAKY_SLOPE), dim=2)  # over words
    attn = (scores.transpose(1, 2) * smooth).softmax(dim=2)  # (B, L, R), over regions
    return l2norm(torch.bmm(attn, regions), dim=-1)


def scan_attention_weights(img_emb: Tensor, words: Tensor, smooth: float = SMOOTH) -> Tensor:
    """SCAN attention weights ``alpha_kr`` of every word of ``C`` captions over every image.

    Batched form of :func:`scan_attention` without the weighted sum. Padded words must be
    zero: they then score 0 and drop out of the l2norm over each caption's words.

    Args:
        img_emb: ``(B_img, R, E)`` regions.
        words: ``(C, L, E)`` word embeddings, zero beyond each caption's length.
        smooth: Softmax inverse temperature (9.0).

    Returns:
        ``(B_img, C L, R)`` weights, summing to 1 over regions.
    """
    n_img, n_reg, dim = img_emb.shape
    n_cap, n_words, _ = words.shape
    scores = img_emb.reshape(n_img * n_reg, dim) @ words.reshape(n_cap * n_words, dim).t()
    return attention_from_scores(scores, n_img, n_cap, smooth)


def attention_from_scores(scores: Tensor, n_img: int, n_cap: int,
                          smooth: float = SMOOTH) -> Tensor:
    """SCAN weights from raw region-word products (the rest of :func:`scan_attention_weights`).

    Args:
        scores: ``(B_img R, C L)`` products ``v_r . t_k``, regions image-major, words
            caption-major (may be a column slice of a larger product).
        n_img: ``B_img``.
        n_cap: ``C``.
        smooth: Softmax inverse temperature (9.0).

    Returns:
        ``(B_img, C L, R)`` weights, summing to 1 over regions.
    """
    n_reg = scores.shape[0] // n_img
    n_words = scores.shape[1] // n_cap
    scores = scores.reshape(n_img, n_reg, n_cap, n_words)  # (B_img, R, C, L)
    scores = l2norm(F.leaky_relu(scores, LEAKY_SLOPE), dim=-1)  # over each caption's words
    attn = (scores * smooth).softmax(dim=1)  # over regions
    return attn.view(n_img, n_reg, n_cap * n_words).transpose(1, 2)


def score_groups(word_counts: list[int], n_rows: int, budget_bytes: int) -> list[list[int]]:
    """Consecutive chunks whose region-word products fit ``budget_bytes`` together.

    Args:
        word_counts: ``C L`` (padded word rows) of every chunk, in order.
        n_rows: ``B_img R`` rows of the product.
        budget_bytes: Largest float32 ``(n_rows, sum of words)`` product of one group.

    Returns:
        Chunk indices grouped in order; every group holds at least one chunk.
    """
    groups: list[list[int]] = []
    width = 0
    for index, count in enumerate(word_counts):
        if groups and (width + count) * n_rows * 4 <= budget_bytes:
            groups[-1].append(index)
            width += count
        else:
            groups.append([index])
            width = count
    return groups


class EncoderSimilarity(nn.Module):
    """Local/global similarity vectors, SGR or SAF reasoning, and the score ``w_e`` (spec 3.3).

    Attribute names follow the official state dict (spec 3.4).

    Args:
        embed_size: Joint embedding size (1024).
        sim_dim: Similarity-vector size (256).
        module_name: Reasoning head, ``"SGR"`` or ``"SAF"``.
        sgr_step: Number of unshared SGR steps (3).
        num_regions: Regions per image (36), fixed by VisualSA's BatchNorm.
        dropout: Dropout rate inside VisualSA/TextSA (0.4).
    """

    def __init__(self, embed_size: int, sim_dim: int, module_name: Literal["SGR", "SAF"],
                 sgr_step: int, num_regions: int, dropout: float) -> None:
        super().__init__()
        self.module_name = module_name
        self.num_regions = num_regions
        self.v_global_w = VisualSA(embed_size, dropout, num_regions)
        self.t_global_w = TextSA(embed_size, dropout)
        self.sim_tranloc_w = nn.Linear(embed_size, sim_dim)
        self.sim_tranglo_w = nn.Linear(embed_size, sim_dim)
        self.sim_eval_w = nn.Linear(sim_dim, 1)
        if module_name == "SGR":
            self.SGR_module = nn.ModuleList(GraphReasoning(sim_dim) for _ in range(sgr_step))
        else:
            self.SAF_module = AttentionFiltration(sim_dim)
        init_similarity_weights(self)

    def forward(self, img_emb: Tensor, cap_emb: Tensor, lengths: Tensor,
                strategy: Strategy = "loop", chunk_size: int = 32,
                host_lengths: list[int] | None = None) -> Tensor:
        """Raw scores (before the sigmoid) of every image/caption pair.

        Args:
            img_emb: ``(B_img, R, E)`` region embeddings.
            cap_emb: ``(B_cap, L, E)`` word embeddings; positions ``>= lengths`` are ignored.
            lengths: ``(B_cap,)`` caption lengths, ``1 <= lengths <= L``.
            strategy: ``"loop"`` (reference) or ``"chunked"``.
            chunk_size: Captions per chunk for ``"chunked"``.
            host_lengths: ``lengths`` as Python ints when the caller has them already (no
                device sync here); ``None`` copies ``lengths`` to the host.

        Returns:
            ``(B_img, B_cap)`` logits; rows images, columns captions.
        """
        lens = _check_inputs(img_emb, cap_emb, lengths, self.num_regions, host_lengths)
        if not lens:
            return img_emb.new_zeros((img_emb.shape[0], 0))
        if strategy == "loop":
            return self._loop_logits(img_emb, cap_emb, lens)
        if strategy == "chunked":
            return self._chunked_logits(img_emb, cap_emb, lens, chunk_size)
        raise ValueError(f"strategy must be 'loop' or 'chunked', got {strategy!r}")

    def _loop_logits(self, img_emb: Tensor, cap_emb: Tensor, lens: list[int]) -> Tensor:
        """Reference: a Python loop over captions (spec 3.3)."""
        n_img = img_emb.shape[0]
        img_glo = self.v_global_w(img_emb)  # (B_img, E)
        columns = []
        for j, n_words in enumerate(lens):
            cap = cap_emb[j:j + 1, :n_words]  # (1, L_j, E)
            cap_glo = self.t_global_w(cap)  # (1, E)
            cap_rep = cap.expand(n_img, -1, -1)  # (B_img, L_j, E)
            context = scan_attention(cap_rep, img_emb)  # (B_img, L_j, E)
            loc = l2norm(self.sim_tranloc_w((context - cap_rep).pow(2)), dim=-1)
            glo = l2norm(self.sim_tranglo_w((img_glo - cap_glo).pow(2)), dim=-1)
            nodes = torch.cat([glo.unsqueeze(1), loc], dim=1)  # (B_img, L_j + 1, S)
            if self.module_name == "SGR":
                for step in self.SGR_module:
                    nodes = step(nodes)
                vec = nodes[:, 0]  # global node after the last step
            else:
                vec = self.SAF_module(nodes)
            columns.append(float32_linear(vec, self.sim_eval_w))  # (B_img, 1), float32 score
        return torch.cat(columns, dim=1)

    def _chunked_logits(self, img_emb: Tensor, cap_emb: Tensor, lens: list[int],
                        chunk_size: int) -> Tensor:
        """Batched: chunks of length-sorted captions against all images at once.

        Everything caption-sized (masking, TextSA) is done per chunk, so the working set
        is one chunk's, never the whole caption batch's.
        """
        device = cap_emb.device
        # Sorting by length keeps padding inside a chunk small; the index tensors are moved
        # to the device once, in one copy that does not wait for queued kernels, so the
        # chunk loop issues no host-device copies.
        order = sorted(range(len(lens)), key=lambda j: -lens[j])
        both = torch.tensor([order, [lens[j] for j in order]]).to(device, non_blocking=True)
        order_dev, sorted_lens = both[0], both[1]  # (B_cap,) each
        img_glo = self.v_global_w(img_emb)  # (B_img, E)
        chunks = []  # (C, L) word mask and (C, L, E) words of each chunk
        for start in range(0, len(order), chunk_size):
            n_words = lens[order[start]]  # longest in the chunk
            word_mask = (torch.arange(n_words, device=device)
                         < sorted_lens[start:start + chunk_size, None])  # (C, L)
            # Zero anything beyond a caption's length: the loop never reads it.
            words = cap_emb[order_dev[start:start + chunk_size], :n_words]
            chunks.append((word_mask, words.masked_fill(~word_mask.unsqueeze(-1), 0.0)))
        blocks, means, variances = [], [], []
        # SGR's fused query matrices depend on the weights only: once per forward, not per
        # chunk (64 chunks x 3 steps of 256 x 256 x 256 products in a 128 x 128 batch).
        fused = fused_queries(self.SGR_module) if self.module_name == "SGR" else None
        for group in score_groups([w.shape[0] * w.shape[1] for _, w in chunks],
                                  img_emb.shape[0] * img_emb.shape[1], SCORE_BUDGET_BYTES):
            # One region-word product for a group of chunks instead of one per chunk: a
            # chunk alone gives it (and its backward) only C L ~ 28 columns, a shape matrix
            # libraries run several times below peak; split() hands each chunk a view, and
            # its backward assembles the chunks' gradients once.
            flat = [chunks[i][1].flatten(0, 1) for i in group]
            scores = img_emb.flatten(0, 1) @ torch.cat(flat).t()  # (B_img R, group words)
            for i, chunk_scores in zip(group, scores.split([f.shape[0] for f in flat], dim=1)):
                word_mask, words = chunks[i]
                cap_glo = self.t_global_w(words, word_mask)  # (C, E)
                attn = attention_from_scores(chunk_scores, img_emb.shape[0], words.shape[0])
                logits, mean, var = self._chunk_logits(img_emb, img_glo, words, cap_glo,
                                                       word_mask, attn, fused)
                blocks.append(logits)
                if mean is not None:
                    means.append(mean)
                    variances.append(var)
        inverse = torch.argsort(order_dev)  # column of each caption in the sorted blocks
        if means:  # SAF in train mode: running statistics updated in the loop's order
            update_running_stats(self.SAF_module.bn, torch.cat(means)[inverse],
                                 torch.cat(variances)[inverse])
        return torch.cat(blocks, dim=1)[:, inverse]

    def _chunk_logits(self, img_emb: Tensor, img_glo: Tensor, words: Tensor, cap_glo: Tensor,
                      word_mask: Tensor, attn: Tensor, fused: list[FusedStep] | None = None
                      ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Scores of ``C`` captions against all images.

        Args:
            img_emb: ``(B_img, R, E)``.
            img_glo: ``(B_img, E)``.
            words: ``(C, L, E)``, zero beyond each caption's length.
            cap_glo: ``(C, E)``.
            word_mask: ``(C, L)`` bool.
            attn: ``(B_img, C L, R)`` SCAN weights of the chunk's words
                (:func:`scan_attention_weights`).
            fused: SGR's :func:`~ncl.models.reasoning.fused_queries` (computed here if None).

        Returns:
            ``(B_img, C)`` logits, and SAF's per-caption batch statistics (or None).
        """
        n_img = img_emb.shape[0]
        n_cap, n_words, dim = words.shape
        flat_words = words.reshape(n_cap * n_words, dim)  # (C L, E)
        glo = (img_glo.unsqueeze(1) - cap_glo.unsqueeze(0)).pow(2)  # (B_img, C, E)
        glo = l2norm(self.sim_tranglo_w(glo), dim=-1)  # (B_img, C, S)
        loc = local_similarity(attn, img_emb, flat_words, self.sim_tranloc_w.weight,
                               self.sim_tranloc_w.bias)  # (B_img, C L, S)
        loc = l2norm(loc, dim=-1)
        nodes = torch.cat([glo.unsqueeze(2), loc.view(n_img, n_cap, n_words, -1)], dim=2)
        del loc  # keep one copy of the nodes (B_img, C, L + 1, S) alive, not two
        node_mask = F.pad(word_mask, (1, 0), value=True)  # (C, L + 1); node 0 is global
        mean = var = None
        if self.module_name == "SGR":
            flat_mask = node_mask.unsqueeze(0).expand(n_img, -1, -1).reshape(n_img * n_cap, -1)
            vec = sgr_masked(self.SGR_module, nodes.flatten(0, 1), flat_mask, fused)
            vec = vec.view(n_img, n_cap, -1)
        else:
            vec, mean, var = saf_masked(self.SAF_module, nodes, node_mask)
        return float32_linear(vec, self.sim_eval_w).squeeze(-1), mean, var  # float32 score


def _check_inputs(img_emb: Tensor, cap_emb: Tensor, lengths: Tensor, num_regions: int,
                  host_lengths: list[int] | None = None) -> list[int]:
    """Validate shapes and lengths; return the lengths as Python ints (``host_lengths`` when
    given: the same values, already on the host, so no device sync)."""
    if img_emb.dim() != 3 or img_emb.shape[1] != num_regions:
        raise ValueError(f"img_emb must have shape (B_img, {num_regions}, E), "
                         f"got {tuple(img_emb.shape)}")
    if cap_emb.dim() != 3 or cap_emb.shape[-1] != img_emb.shape[-1]:
        raise ValueError(f"cap_emb must have shape (B_cap, L, {img_emb.shape[-1]}), "
                         f"got {tuple(cap_emb.shape)}")
    lengths = torch.as_tensor(lengths)
    if lengths.shape != (cap_emb.shape[0],):
        raise ValueError(f"lengths must have shape ({cap_emb.shape[0]},), "
                         f"got {tuple(lengths.shape)}")
    lens = [int(n) for n in lengths.tolist()] if host_lengths is None else host_lengths
    if lens and (min(lens) < 1 or max(lens) > cap_emb.shape[1]):
        raise ValueError(f"lengths must lie in [1, {cap_emb.shape[1]}] (cap_emb.shape[1]), "
                         f"got min {min(lens)} and max {max(lens)}")
    return lens
