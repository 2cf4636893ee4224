"""Batch-level intra-modal relations through the SGRAF head: image-image ``R^v`` and
text-text ``R^t`` (spec 3.7, ``forward_relation`` of ReCon's published ``models/SGRAF.py``).

ReCon's official model file (``model/ReCon.py`` at 2a40dcf, ``train_batch``) compares these
``(B, B)`` matrices in its relation loss (:mod:`ncl.losses.recon_official`). Each entry is a raw
SGRAF score (``w_e . vec + b_e``, no sigmoid) of one item of the batch against another item
of the *same* modality:

* ``R^v[j, i]``: image ``j`` against image ``i``. Local nodes
  ``l2norm(W_loc((v_jr - v_ir)^2 + 1e-6))`` compare region ``r`` of ``j`` with region ``r`` of
  ``i`` (the same index, no attention); the global node is
  ``l2norm(W_glo((v~_j - v~_i)^2 + 1e-6))``.
* ``R^t[j, i]``: caption ``j`` against caption ``i``. Caption ``i``'s words attend over caption
  ``j``'s tokens (``+1e-6``) with SCAN's attention (LeakyReLU 0.1, l2norm over ``i``'s words,
  ``j``'s pad positions set to ``-1e9`` before the softmax at ``lambda = 9``); local nodes
  ``l2norm(W_loc((c_k - t_ik)^2))``, global node ``l2norm(W_glo((t~_j - t~_i)^2 + 1e-6))``.

Both go through the network's SGR steps or SAF head and ``w_e``. Column ``i`` is built in one
pass over all ``j`` (a Python loop over ``i``, as in the published code): ``B`` head
evaluations of ``B`` pairs each per matrix. The ``1e-6`` offsets keep ``l2norm`` away from an
all-zero vector on the self-pairs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ncl.models.layers import float32_linear, l2norm
from ncl.models.similarity import LEAKY_SLOPE, SMOOTH, EncoderSimilarity

#: Offset of the published ``forward_relation`` (on the squared differences, on the context).
OFFSET = 1e-6
#: Score of a padded context token before the softmax (the published value).
PAD_SCORE = -1e9


def head_scores(sim_enc: EncoderSimilarity, nodes: Tensor) -> Tensor:
    """``(B, N, S)`` similarity nodes (node 0 global) -> ``(B,)`` raw scores (SGR or SAF)."""
    if sim_enc.module_name == "SGR":
        for step in sim_enc.SGR_module:
            nodes = step(nodes)
        vec = nodes[:, 0]  # the global node after the last step
    else:
        vec = sim_enc.SAF_module(nodes)
    return float32_linear(vec, sim_enc.sim_eval_w).squeeze(-1)


def image_relations(sim_enc: EncoderSimilarity, img_emb: Tensor) -> Tensor:
    """``R^v``: ``(B, R, E)`` region embeddings -> ``(B, B)`` raw scores, ``[j, i]`` = image
    ``j`` against image ``i``."""
    img_glo = sim_enc.v_global_w(img_emb)  # (B, E)
    columns = []
    for i in range(img_emb.shape[0]):
        loc = (img_emb - img_emb[i:i + 1]).pow(2) + OFFSET  # (B, R, E), region r vs region r
        loc = l2norm(sim_enc.sim_tranloc_w(loc), dim=-1)  # (B, R, S)
        glo = l2norm(sim_enc.sim_tranglo_w((img_glo - img_glo[i:i + 1]).pow(2) + OFFSET), dim=-1)
        columns.append(head_scores(sim_enc, torch.cat([glo.unsqueeze(1), loc], dim=1)))
    return torch.stack(columns, dim=1)


def text_relations(sim_enc: EncoderSimilarity, cap_emb: Tensor, lengths: list[int]) -> Tensor:
    """``R^t``: ``(B, L, E)`` word embeddings and ``B`` lengths -> ``(B, B)`` raw scores,
    ``[j, i]`` = caption ``j`` against caption ``i`` (``i``'s words query ``j``'s tokens)."""
    n_cap, width = cap_emb.shape[0], cap_emb.shape[1]
    cap_glo = torch.cat([sim_enc.t_global_w(cap_emb[i:i + 1, :n]) for i, n in enumerate(lengths)])
    context = cap_emb + OFFSET  # (B, L, E); every caption of the batch is a context
    pad = (torch.arange(width, device=cap_emb.device)
           >= torch.tensor(lengths, device=cap_emb.device).unsqueeze(1))  # (B, L)
    columns = []
    for i, n_words in enumerate(lengths):
        query = cap_emb[i:i + 1, :n_words].expand(n_cap, -1, -1)  # (B, n_i, E)
        scores = torch.bmm(context, query.transpose(1, 2))  # (B, L, n_i)
        scores = l2norm(F.leaky_relu(scores, LEAKY_SLOPE), dim=2)  # over i's words
        scores = scores.masked_fill(pad.unsqueeze(2), PAD_SCORE)  # j's pad tokens
        attn = (scores.transpose(1, 2) * SMOOTH).softmax(dim=2)  # (B, n_i, L), over j's tokens
        attended = l2norm(torch.bmm(attn, context), dim=-1)  # (B, n_i, E)
        loc = l2norm(sim_enc.sim_tranloc_w((attended - query).pow(2)), dim=-1)  # (B, n_i, S)
        glo = l2norm(sim_enc.sim_tranglo_w((cap_glo - cap_glo[i:i + 1]).pow(2) + OFFSET), dim=-1)
        columns.append(head_scores(sim_enc, torch.cat([glo.unsqueeze(1), loc], dim=1)))
    return torch.stack(columns, dim=1)


def batch_relations(sim_enc: EncoderSimilarity, img_emb: Tensor, cap_emb: Tensor,
                    lengths: Tensor) -> tuple[Tensor, Tensor]:
    """``(R^v, R^t)``, each ``(B, B)`` float32 raw scores (see the module docstring).

    Args:
        sim_enc: the SGRAF similarity encoder whose head scores the pairs.
        img_emb: ``(B, R, E)`` region embeddings.
        cap_emb: ``(B, L, E)`` word embeddings.
        lengths: ``(B,)`` caption lengths in ``[1, L]``.
    """
    lens = [int(n) for n in torch.as_tensor(lengths).tolist()]
    if img_emb.dim() != 3 or cap_emb.dim() != 3 or len(lens) != cap_emb.shape[0]:
        raise ValueError(f"img_emb must be (B, R, E), cap_emb (B, L, E) and lengths (B,), got "
                         f"{tuple(img_emb.shape)}, {tuple(cap_emb.shape)} and {len(lens)} lengths")
    if lens and (min(lens) < 1 or max(lens) > cap_emb.shape[1]):
        raise ValueError(f"lengths must lie in [1, {cap_emb.shape[1]}]")
    return image_relations(sim_enc, img_emb), text_relations(sim_enc, cap_emb, lens)
