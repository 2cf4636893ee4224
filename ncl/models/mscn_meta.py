"""MSCN's meta similarity network and the SGRAF similarity vectors it scores (Han et al.,
CVPR 2023; official ``models.py`` ``Meta_Sim`` and ``EncoderSimilarity.forward`` /
``forward_individual`` at hhc1997/MSCN 01febc2).

MSCN replaces SGRAF's last layer (``sim_eval_w`` and the sigmoid; the official code comments
``sim_eval_w`` out) by a small network of its own, trained on a clean meta set:

    S(v, t) = sigmoid(W_2 relu(W_1 vec(v, t) + b_1) + b_2)

where ``vec`` is SGRAF's similarity vector (``sim_dim``: the global node after the last SGR
step, or SAF's filtered vector). :func:`similarity_vectors` computes every image/caption
vector of a batch with the reference per-caption loop of
:class:`~ncl.models.similarity.EncoderSimilarity` (``W_e . vec + b_e`` of these vectors is
``sim_enc(..., "loop")`` exactly, checked in the tests); :func:`pair_vectors` the vectors of
the pairs ``(image i, caption i)`` only (the official ``forward_individual``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from ncl.models.contracts import encode_images
from ncl.models.layers import l2norm
from ncl.models.similarity import scan_attention


class MetaSimilarity(nn.Module):
    """``Meta_Sim``: ``(..., sim_dim)`` similarity vectors -> ``(...)`` scores in (0, 1).

    Args:
        sim_dim: input size, SGRAF's ``sim_dim`` (256).
        hidden: hidden units (64, official).

    Parameters are PyTorch's default ``nn.Linear`` initialisation, as the official module.
    """

    def __init__(self, sim_dim: int = 256, hidden: int = 64) -> None:
        super().__init__()
        if sim_dim < 1 or hidden < 1:
            raise ValueError(f"sim_dim and hidden must be >= 1, got {sim_dim} and {hidden}")
        self.hidden = nn.Linear(sim_dim, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, vec: Tensor) -> Tensor:
        """``sigmoid(W_2 relu(W_1 vec + b_1) + b_2)``, the last dimension consumed."""
        return torch.sigmoid(self.out(torch.relu(self.hidden(vec)))).squeeze(-1)


def _head_vector(sim_enc: nn.Module, nodes: Tensor) -> Tensor:
    """``(B, N, S)`` nodes (node 0 global) -> ``(B, S)``: SGR's global node after the last
    step, or SAF's filtered vector."""
    if sim_enc.module_name == "SGR":
        for step in sim_enc.SGR_module:
            nodes = step(nodes)
        return nodes[:, 0]
    return sim_enc.SAF_module(nodes)


def _nodes(sim_enc: nn.Module, img_emb: Tensor, img_glo: Tensor, cap: Tensor) -> Tensor:
    """Similarity nodes of one caption ``cap`` ``(1, L, E)`` against ``img_emb`` ``(B, R, E)``
    with global images ``img_glo`` ``(B, E)``: ``(B, L + 1, S)``, node 0 global (spec 3.3)."""
    cap_glo = sim_enc.t_global_w(cap)  # (1, E)
    cap_rep = cap.expand(img_emb.shape[0], -1, -1)  # (B, L, E)
    context = scan_attention(cap_rep, img_emb)
    loc = l2norm(sim_enc.sim_tranloc_w((context - cap_rep).pow(2)), dim=-1)
    glo = l2norm(sim_enc.sim_tranglo_w((img_glo - cap_glo).pow(2)), dim=-1)
    return torch.cat([glo.unsqueeze(1), loc], dim=1)


def _columns(sim_enc: nn.Module, img_emb: Tensor, cap_emb: Tensor, lens: Sequence[int],
             head: Callable[[Tensor], Tensor]) -> Tensor:
    """``head`` of each caption's ``(B_img, S)`` vectors, stacked as columns (the official loop:
    one caption against every image at a time, so only one column of vectors is alive)."""
    img_glo = sim_enc.v_global_w(img_emb)  # (B_img, E); BatchNorm over the image batch
    return torch.stack([head(_head_vector(sim_enc, _nodes(sim_enc, img_emb, img_glo,
                                                          cap_emb[j:j + 1, :n])))
                        for j, n in enumerate(lens)], dim=1)


def similarity_vectors(sim_enc: nn.Module, img_emb: Tensor, cap_emb: Tensor,
                       lens: Sequence[int]) -> Tensor:
    """Every image/caption similarity vector: ``(B_img, R, E)``, ``(B_cap, L, E)`` and the
    caption lengths -> ``(B_img, B_cap, S)`` (the official per-caption loop)."""
    return _columns(sim_enc, img_emb, cap_emb, lens, lambda vec: vec)


def corrected_scores(sim_enc: nn.Module, meta: Callable[[Tensor], Tensor], img_emb: Tensor,
                     cap_emb: Tensor, lens: Sequence[int]) -> Tensor:
    """``meta`` of every image/caption vector, ``(B_img, B_cap)``, one caption's column at a
    time (never the whole ``(B_img, B_cap, S)`` block)."""
    return _columns(sim_enc, img_emb, cap_emb, lens, meta)


def pair_vectors(sim_enc: nn.Module, img_emb: Tensor, cap_emb: Tensor,
                 lens: Sequence[int]) -> Tensor:
    """The vectors of the pairs ``(image i, caption i)``: ``(B, S)`` (``forward_individual``:
    the global images are computed over the whole batch, as in :func:`similarity_vectors`)."""
    img_glo = sim_enc.v_global_w(img_emb)
    rows = [_head_vector(sim_enc, _nodes(sim_enc, img_emb[i:i + 1], img_glo[i:i + 1],
                                         cap_emb[i:i + 1, :n]))[0]
            for i, n in enumerate(lens)]
    return torch.stack(rows)


def _embed(net: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, list[int]]:
    lens = [int(n) for n in batch["lengths"].tolist()]
    return encode_images(net, batch), net.encode_captions(batch["tokens"], batch["lengths"]), lens


def corrected_batch(net: nn.Module, meta: Callable[[Tensor], Tensor], batch: dict[str, Tensor]) -> Tensor:
    """``(B, B)`` corrected similarities (images x captions) of a collated batch."""
    img, cap, lens = _embed(net, batch)
    return corrected_scores(net.sim_enc, meta, img, cap, lens)


def corrected_pairs(net: nn.Module, meta: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """``(B,)`` corrected similarity of each pair ``(image i, caption i)`` of a batch."""
    img, cap, lens = _embed(net, batch)
    return meta(pair_vectors(net.sim_enc, img, cap, lens))


def corrected_from_embeddings(net: nn.Module, meta: nn.Module, img_emb: Tensor, cap_emb: Tensor,
                              lengths: Tensor) -> Tensor:
    """``(B_img, B_cap)`` corrected similarities of embeddings (evaluation's blocks)."""
    lens = [int(n) for n in torch.as_tensor(lengths).tolist()]
    return corrected_scores(net.sim_enc, meta, img_emb, cap_emb, lens)
