"""GSC's intra-modal structure (Zhao et al., CVPR 2024; official ``forward_topology``):
SGRAF's own similarity head scores image-image and caption-caption pairs of a batch.

Pure functions of an SGRAF similarity encoder (``sim_enc``: ``v_global_w``, ``t_global_w``,
``sim_tranloc_w``, ``sim_tranglo_w``, ``SGR_module`` / ``SAF_module``, ``sim_eval_w``; the
official names, :class:`ncl.models.similarity.EncoderSimilarity`) and the batch's embeddings.
Column ``i`` of each matrix is the anchor ``i`` (the official loop appends one column per
anchor); row ``j`` is the other item.

Images (anchor ``i``, other ``j``; regions ``v``, global vector ``g`` of ``v_global_w``)::

    loc_jr = l2norm(W_loc ((v_jr - v_ir)^2 + 1e-6))          (R nodes, region r with region r)
    glo_j  = l2norm(W_glo ((g_j - g_i)^2 + 1e-6))
    S_img[j, i] = w_e . head([glo_j; loc_j]) + b_e

Captions (anchor ``i`` with words ``t_i``, other ``j``; global vectors ``h`` of ``t_global_w``)::

    c_j  = SCAN(query = t_i, context = t_j + 1e-6, smooth 9)  (L_i attended words of caption j,
                                                                j's padding masked)
    loc_j = l2norm(W_loc ((c_j - t_i)^2))                      (no 1e-6 here, as the code)
    glo_j = l2norm(W_glo ((h_j - h_i)^2 + 1e-6))
    S_cap[j, i] = w_e . head([glo_j; loc_j]) + b_e

``head`` is the SGR steps (the global node after the last) or SAF. The ``1e-6`` keep the
l2norm of a zero difference (an anchor against itself) differentiable.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ncl.models.layers import float32_linear, l2norm

SMOOTH = 9.0  # SCAN's inverse temperature, as the image-text attention
SHIFT = 1e-6  # the official constant added before the l2norm
MASKED = -1e9  # the official score of a padded context word


def _score(sim_enc: nn.Module, nodes: Tensor) -> Tensor:
    """``(B, N, S)`` similarity nodes -> ``(B,)`` raw scores (SGR or SAF, then ``sim_eval_w``)."""
    if sim_enc.module_name == "SGR":
        for step in sim_enc.SGR_module:
            nodes = step(nodes)
        vec = nodes[:, 0]
    else:
        vec = sim_enc.SAF_module(nodes)
    return float32_linear(vec, sim_enc.sim_eval_w).squeeze(-1)


def image_structure(sim_enc: nn.Module, img_emb: Tensor) -> Tensor:
    """Image-image raw scores.

    Args:
        sim_enc: an SGRAF similarity encoder.
        img_emb: ``(B, R, E)`` region embeddings.

    Returns:
        ``(B, B)``, entry ``[j, i]`` image ``j`` against anchor image ``i``.
    """
    img_glo = sim_enc.v_global_w(img_emb)  # (B, E)
    columns = []
    for i in range(img_emb.shape[0]):
        loc = l2norm(sim_enc.sim_tranloc_w((img_emb - img_emb[i:i + 1]).pow(2) + SHIFT), dim=-1)
        glo = l2norm(sim_enc.sim_tranglo_w((img_glo - img_glo[i:i + 1]).pow(2) + SHIFT), dim=-1)
        columns.append(_score(sim_enc, torch.cat([glo.unsqueeze(1), loc], dim=1)))
    return torch.stack(columns, dim=1)


def caption_context(query: Tensor, context: Tensor, lengths: list[int]) -> Tensor:
    """The official ``SCAN_attention`` with a length mask: the words of every caption ``j``
    attended by one anchor caption's words.

    ``s = l2norm_over_query(LeakyReLU_0.1(context . query))``, padded context words set to
    -1e9 after the norm, ``a = softmax_over_context(9 s)``, ``c = l2norm(sum a context)``.

    Args:
        query: ``(L_i, E)`` the anchor's words.
        context: ``(B, L, E)`` every caption's words (already shifted by 1e-6).
        lengths: ``B`` caption lengths.

    Returns:
        ``(B, L_i, E)``.
    """
    scores = torch.matmul(context, query.t())  # (B, L, L_i)
    scores = l2norm(F.leaky_relu(scores, 0.1), dim=2)
    positions = torch.arange(context.shape[1], device=context.device)
    pad = positions[None, :] >= torch.tensor(lengths, device=context.device)[:, None]  # (B, L)
    scores = scores.masked_fill(pad.unsqueeze(-1), MASKED)
    attn = (scores.transpose(1, 2) * SMOOTH).softmax(dim=2)  # (B, L_i, L)
    return l2norm(torch.bmm(attn, context), dim=-1)


def caption_structure(sim_enc: nn.Module, cap_emb: Tensor, lengths: list[int]) -> Tensor:
    """Caption-caption raw scores.

    Args:
        sim_enc: an SGRAF similarity encoder.
        cap_emb: ``(B, L, E)`` word embeddings (anything beyond a length is ignored).
        lengths: ``B`` caption lengths (host ints).

    Returns:
        ``(B, B)``, entry ``[j, i]`` caption ``j`` (attended) against anchor caption ``i``.
    """
    n, width = cap_emb.shape[0], cap_emb.shape[1]
    mask = torch.arange(width, device=cap_emb.device)[None, :] < torch.tensor(
        lengths, device=cap_emb.device)[:, None]  # (B, L)
    words = cap_emb.masked_fill(~mask.unsqueeze(-1), 0.0)
    cap_glo = sim_enc.t_global_w(words, mask)  # (B, E): each caption over its own words
    context = words + SHIFT
    columns = []
    for i in range(n):
        query = words[i, :lengths[i]]  # (L_i, E)
        attended = caption_context(query, context, lengths)  # (B, L_i, E)
        loc = l2norm(sim_enc.sim_tranloc_w((attended - query.unsqueeze(0)).pow(2)), dim=-1)
        glo = l2norm(sim_enc.sim_tranglo_w((cap_glo - cap_glo[i:i + 1]).pow(2) + SHIFT), dim=-1)
        columns.append(_score(sim_enc, torch.cat([glo.unsqueeze(1), loc], dim=1)))
    return torch.stack(columns, dim=1)
