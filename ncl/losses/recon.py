"""ReCon's relation-consistency losses, per sample (Zha et al., CVPR 2025, Eq. 1-5, 13-15).

Paper-derived: everything here follows the paper's equations; each choice the paper leaves open
is an argument, named in ``docs/methods/recon.md``. The official model file's differing losses
(``model/ReCon.py`` at 2a40dcf) are in :mod:`ncl.losses.recon_official`.

* :func:`cross_modal_relation_loss` - ``L_CM`` (Eq. 2): the bidirectional InfoNCE of a pair,
  ``-y_i (log p_ii^v2l + log p_ii^l2v)``, and the average matching probability ``p`` of Eq. 10.
  With a soft label ``y`` it is Eq. 15's ``H(y, p^v2l) + H(y, p^l2v)``.
* :func:`intra_modal_relation_loss` - ``L_IM`` (Eq. 3-4): region-region and word-word relation
  matrices of a pair, their proxies rebuilt from the other modality through the arg-max
  cross-modal correspondence (``Psi``, Eq. 3), and the symmetric matrix KL divergence (m-KL,
  Eq. 1 and 4) between each matrix and its proxy. Padding is handled with masks.
* :func:`relation_consistency_objective` - Eq. 13-15: the per-pair loss of each training
  subset (clean ``D_c``, locally associated ``D_l``, noisy ``D_n``).

Conventions: ``sims`` is the (B, B) batch similarity (rows images, columns captions, the
diagonal holds the annotated pairs); region embeddings are ``(B, R, E)``, word embeddings
``(B, L, E)`` with ``lengths (B,)``; every loss returns one value per pair.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, get_args

import torch
from torch import Tensor

from ncl.losses._checks import (
    check_choice,
    check_non_negative,
    check_positive,
    check_square,
    work_dtype,
)
from ncl.losses.contrastive import InfoNCETerms, info_nce

RelationKL = Literal["symmetric", "forward"]
RowReduction = Literal["mean", "sum"]

#: The three training subsets (Eq. 8 and the noisy partition of Sect. 3.3), as stored codes.
SUBSET_CLEAN, SUBSET_LOCAL, SUBSET_NOISY = 0, 1, 2

# Masked logits: finite, so that a masked entry gets probability exactly 0 (exp underflows)
# without the inf - inf = NaN that -inf would put into the KL terms or their gradients.
_MASKED = -1e9


class IntraModalTerms(NamedTuple):
    """Per-pair intra-modal terms (each (B,)); ``loss = visual + textual`` (Eq. 4).

    Attributes:
        loss: ``L_IM``.
        visual: ``D(C_VV || C_VV^p)``, the region-relation discrepancy.
        textual: ``D(C_LL || C_LL^p)``, the word-relation discrepancy.
    """

    loss: Tensor
    visual: Tensor
    textual: Tensor


def cross_modal_relation_loss(sims: Tensor, labels: Tensor | None = None,
                              tau: float = 0.1) -> InfoNCETerms:
    """Cross-modal relation consistency ``L_CM`` of every pair of a batch (Eq. 2, 15).

    ``p_ij^v2l = exp(S_ij / tau) / sum_k exp(S_ik / tau)`` (image ``i`` queries the batch's
    captions) and ``p_ij^l2v = exp(S_ij / tau) / sum_k exp(S_kj / tau)`` (caption ``j`` queries
    the images), plain softmaxes as printed (no guard). The per-pair loss is weighted by the
    pair's label ``y_i`` (Sect. 3.2: "the contributions of different data pairs will be adaptively
    adjusted according to their corresponding supervisions y"); ``labels=None`` is ``y = 1``,
    the per-sample loss ``l_i^CM`` the division fits its GMM on (Sect. 3.3).

    Args:
        sims: (B, B) similarities (ReCon's SGRAF gives raw logits).
        labels: (B,) labels ``y`` in [0, 1], or ``None`` for all ones.
        tau: temperature > 0 (paper Sect. 4.2: 0.1; the published options file: 0.05).

    Returns:
        :class:`~ncl.losses.contrastive.InfoNCETerms`: ``loss`` (B,)
        ``-y_i (log p_ii^v2l + log p_ii^l2v)``; ``probability`` (B,)
        ``(p_ii^v2l + p_ii^l2v) / 2``, detached (``p`` of Eq. 10). Float32 or wider.
    """
    batch = check_square(sims)
    if labels is not None and labels.shape != (batch,):
        raise ValueError(f"`labels` must have shape ({batch},), got {tuple(labels.shape)}")
    # eps=0.0: the plain softmax through the guarded op order (the values recorded so far)
    return info_nce(sims, tau, eps=0.0, weights=labels)


def cosine_relations(a: Tensor, b: Tensor | None = None) -> Tensor:
    """Relations as cosine similarities: ``C[b, i, j] = cos(a_bi, b_bj)`` (Sect. 3.1: "ReCon
    obtains these relations by computing the similarity between objects within modalities").
    Cosine is paper-derived, no reference code: the paper names no similarity for objects.

    Args:
        a: (B, N, D) features (padded items may be anything; callers mask them).
        b: (B, M, D) features, or ``None`` for ``a`` itself (an intra-modal relation matrix).

    Returns:
        (B, N, M) cosine similarities in [-1, 1] (an all-zero item has similarity 0).
    """
    unit_a = a / a.norm(dim=-1, keepdim=True).clamp_min(1e-8)
    unit_b = unit_a if b is None else b / b.norm(dim=-1, keepdim=True).clamp_min(1e-8)
    return unit_a @ unit_b.transpose(1, 2)


def item_mask(lengths: Tensor | None, batch: int, width: int, device: torch.device) -> Tensor:
    """(B, N) bool, True at the first ``lengths[b]`` items of row ``b`` (all True for ``None``)."""
    if lengths is None:
        return torch.ones(batch, width, dtype=torch.bool, device=device)
    steps = torch.arange(width, device=device)
    return steps.unsqueeze(0) < torch.as_tensor(lengths, device=device).unsqueeze(1)


def cross_correspondence(regions: Tensor, words: Tensor, region_mask: Tensor,
                         word_mask: Tensor) -> tuple[Tensor, Tensor]:
    """The most corresponding item of the other modality, for every item (Sect. 3.2).

    ``C_VL = cos(v_i, l_k)``; region ``i`` maps to ``i* = argmax_k C_VL[i, :]`` over the real
    words and word ``k`` to ``argmax_i C_VL[:, k]`` over the real regions. Paper-derived, no
    reference code: the paper writes ``C_VL = g(V, L)`` without saying which item-level score
    ``g`` is; the cosine is the score the relations themselves use. It is *not* the arg-max of
    SGRAF's attention weights: that attention (SCAN's) passes the cosines through a LeakyReLU,
    L2-normalises each context item's scores across the queries and only then takes the
    softmax over the context, so every item is rescaled by its own norm and the attention's
    arg-max can differ from the cosine's.

    Args:
        regions: (B, R, E) region embeddings.
        words: (B, L, E) word embeddings.
        region_mask: (B, R) bool, real regions.
        word_mask: (B, L) bool, real words.

    Returns:
        ``(region_to_word (B, R), word_to_region (B, L))`` int64 indices.
    """
    cross = cosine_relations(regions, words)  # (B, R, L)
    to_word = cross.masked_fill(~word_mask.unsqueeze(1), float("-inf")).argmax(dim=2)
    to_region = cross.masked_fill(~region_mask.unsqueeze(2), float("-inf")).argmax(dim=1)
    return to_word, to_region


def proxy_relations(other: Tensor, match: Tensor) -> Tensor:
    """The reconstruction ``Psi`` of Eq. 3: ``C^p[b, i, j] = other[b, match[b, i], match[b, j]]``.

    With the visual modality as anchor, ``other`` is ``C_LL`` and ``match`` maps each region to
    its most corresponding word, so the proxy describes the region relations from the
    linguistic view; likewise with the roles swapped.

    Args:
        other: (B, M, M) relation matrix of the other modality.
        match: (B, N) int64 indices into ``M``.

    Returns:
        (B, N, N), differentiable with respect to ``other``.
    """
    batch, n = match.shape
    m = other.shape[1]
    rows = other.gather(1, match.unsqueeze(2).expand(batch, n, m))  # (B, N, M)
    return rows.gather(2, match.unsqueeze(1).expand(batch, n, n))  # (B, N, N)


def matrix_kl(relations: Tensor, proxy: Tensor, mask: Tensor, temperature: float = 1.0,
              kl: RelationKL = "symmetric", rows: RowReduction = "sum") -> Tensor:
    """Matrix KL divergence between a relation matrix and its proxy (m-KL, Eq. 1 and 4).

    Paper-derived, no reference code: the row softmax, its temperature and the reduction over
    rows are not in the paper (``temperature=1`` adds none). The default ``rows="sum"`` is the
    m-KL of IAIS, which the paper cites for it: ``sum_i KL(P_i || Q_i) + KL(Q_i || P_i)`` over
    the rows. It is also the reading under which the paper's threshold ``e - 1`` (Eq. 7-8,
    ``omega2 = 0.5``) is reached in practice: for softmax rows ``P_i``, ``Q_i`` of cosines
    ``a``, ``b`` the symmetric KL is ``sum_j (p_j - q_j)(a_j - b_j) <= 2 ||p - q||_1 <= 4``,
    and measured rows of trained embeddings give about 0.1, so a *mean* over rows stays far
    below ``e - 1`` and ``D_l`` is empty (``docs/methods/recon.md``, "The scale of L_IM").

    Each row of a relation matrix becomes a distribution over the real items,
    ``softmax_j(C[i, j] / temperature)`` (IAIS compares attention rows, which are softmaxes;
    ReCon's relations are similarities, so a softmax makes them comparable). Per row,
    ``KL(P_i || Q_i)`` (``kl="forward"``) or ``KL(P_i || Q_i) + KL(Q_i || P_i)`` (``"symmetric"``,
    the m-KL the paper names), then the mean or the sum over the real rows.

    Args:
        relations: (B, N, N) relation matrix ``C``.
        proxy: (B, N, N) its proxy ``C^p``.
        mask: (B, N) bool, real items (rows and columns); every row has at least one.
        temperature: softmax temperature > 0 of the rows.
        kl: ``symmetric`` or ``forward``.
        rows: reduction over the real rows, ``mean`` or ``sum``.

    Returns:
        (B,) non-negative divergences.
    """
    check_positive(temperature, "temperature")
    check_choice(kl, get_args(RelationKL), "kl")
    check_choice(rows, get_args(RowReduction), "rows")
    dtype = work_dtype(relations.dtype)
    columns = mask.unsqueeze(1)  # (B, 1, N)
    log_p = (relations.to(dtype) / temperature).masked_fill(~columns, _MASKED).log_softmax(dim=2)
    log_q = (proxy.to(dtype) / temperature).masked_fill(~columns, _MASKED).log_softmax(dim=2)
    diff = log_p - log_q  # (B, N, N); finite everywhere, 0 at masked columns
    per_row = (log_p.exp() * diff).sum(dim=2)  # KL(P_i || Q_i)
    if kl == "symmetric":
        per_row = per_row + (log_q.exp() * -diff).sum(dim=2)
    per_row = per_row.clamp_min(0.0) * mask.to(dtype)  # rounding can dip below 0
    total = per_row.sum(dim=1)
    return total / mask.sum(dim=1).clamp_min(1).to(dtype) if rows == "mean" else total


def intra_modal_relation_loss(regions: Tensor, words: Tensor, lengths: Tensor, *,
                              region_lengths: Tensor | None = None,
                              region_features: Tensor | None = None,
                              word_features: Tensor | None = None,
                              region_mask: Tensor | None = None, temperature: float = 1.0,
                              kl: RelationKL = "symmetric", rows: RowReduction = "sum",
                              detach_proxy: bool = False) -> IntraModalTerms:
    """Intra-modal relation consistency ``L_IM`` of every pair (Eq. 3-4).

    For pair ``b``: ``C_VV`` (R x R) and ``C_LL`` (L_b x L_b) are the cosine relations within
    each modality; the arg-max cross-modal correspondence (:func:`cross_correspondence`) gives
    the proxies ``C_VV^p = Psi(C_LL, l_i*, l_j*)`` and ``C_LL^p = Psi(C_VV, v_a*, v_b*)``
    (:func:`proxy_relations`); ``L_IM = D(C_VV || C_VV^p) + D(C_LL || C_LL^p)`` with ``D`` the
    matrix KL of :func:`matrix_kl`. Pad words (and pad regions with ``region_lengths``, and
    regions outside ``region_mask``) are masked out of the arg-max, the softmaxes and the row
    reduction.

    Args:
        regions: (B, R, E) region embeddings (cross-modal correspondence).
        words: (B, L, E) word embeddings.
        lengths: (B,) caption lengths, each in [1, L].
        region_lengths: (B,) real regions per image, or ``None`` (all R).
        region_features: (B, R, D_v) features of the region relations, default ``regions``.
        word_features: (B, L, D_w) features of the word relations, default ``words``.
        region_mask: (B, R) bool, regions to keep (e.g. not overwritten by the training
            augmentation, :func:`~ncl.losses.recon_forward.unfilled_regions`), or ``None``;
            combined with ``region_lengths``; every row must keep at least one region.
        temperature, kl, rows: see :func:`matrix_kl`.
        detach_proxy: no gradient through the proxies (they become targets).

    Returns:
        :class:`IntraModalTerms`, each (B,).
    """
    if regions.dim() != 3 or words.dim() != 3 or regions.shape[0] != words.shape[0]:
        raise ValueError(f"`regions` must be (B, R, E) and `words` (B, L, E) with the same B, got "
                         f"{tuple(regions.shape)} and {tuple(words.shape)}")
    batch, n_regions, n_words = regions.shape[0], regions.shape[1], words.shape[1]
    lengths = torch.as_tensor(lengths, device=words.device)
    if lengths.shape != (batch,) or int(lengths.min()) < 1 or int(lengths.max()) > n_words:
        raise ValueError(f"`lengths` must be ({batch},) with values in [1, {n_words}]")
    word_mask = item_mask(lengths, batch, n_words, words.device)  # (B, L)
    kept = item_mask(region_lengths, batch, n_regions, regions.device)  # (B, R)
    if region_mask is not None:
        if region_mask.shape != (batch, n_regions):
            raise ValueError(f"`region_mask` must be ({batch}, {n_regions}), got "
                             f"{tuple(region_mask.shape)}")
        kept = kept & region_mask.to(kept.device)
    if not bool(kept.any(dim=1).all()):
        raise ValueError("every image needs at least one region left by `region_mask`")
    region_mask = kept
    to_word, to_region = cross_correspondence(regions, words, region_mask, word_mask)
    c_vv = cosine_relations(regions if region_features is None else region_features)  # (B, R, R)
    c_ll = cosine_relations(words if word_features is None else word_features)  # (B, L, L)
    proxy_vv = proxy_relations(c_ll, to_word)  # (B, R, R), the regions seen through words
    proxy_ll = proxy_relations(c_vv, to_region)  # (B, L, L), the words seen through regions
    if detach_proxy:
        proxy_vv, proxy_ll = proxy_vv.detach(), proxy_ll.detach()
    visual = matrix_kl(c_vv, proxy_vv, region_mask, temperature, kl, rows)
    textual = matrix_kl(c_ll, proxy_ll, word_mask, temperature, kl, rows)
    return IntraModalTerms(visual + textual, visual, textual)


def relation_consistency_objective(cm_loss: Tensor, im_loss: Tensor, subset: Tensor,
                                   labels: Tensor, penalty: Tensor, xi: float = 5.0,
                                   xi_on_noisy: bool = False) -> Tensor:
    """Per-pair ReCon objective after the warm-up (Eq. 13-15).

    * ``D_c`` (Eq. 13): ``xi L_CM + L_IM``;
    * ``D_l`` (Eq. 14): ``xi L_CM + L_IM / lambda``;
    * ``D_n`` (Eq. 15): ``y_hat L_CM`` (times ``xi`` with ``xi_on_noisy``; Eq. 15 has none), no
      ``L_IM`` ("the intra-modal relations will be excluded").

    ``y_hat = 1`` on ``D_c`` and ``D_l`` (Eq. 11), so their ``L_CM`` is unweighted whatever
    ``labels`` holds there.

    Args:
        cm_loss: (B,) ``L_CM`` with ``y = 1`` (:func:`cross_modal_relation_loss`).
        im_loss: (B,) ``L_IM`` (:func:`intra_modal_relation_loss`).
        subset: (B,) int codes ``SUBSET_CLEAN`` / ``SUBSET_LOCAL`` / ``SUBSET_NOISY``.
        labels: (B,) final labels ``y_hat`` (Eq. 11; only read on ``D_n``).
        penalty: (B,) penalisation factors ``lambda >= 1`` (Eq. 9; only read on ``D_l``).
        xi: balance factor >= 0 (5).
        xi_on_noisy: also weigh ``D_n``'s ``L_CM`` by ``xi``.

    Returns:
        (B,) per-pair losses.
    """
    check_non_negative(xi, "xi")
    shapes = {t.shape for t in (cm_loss, im_loss, subset, labels, penalty)}
    if len(shapes) != 1 or cm_loss.dim() != 1:
        raise ValueError(f"all inputs must have the same (B,) shape, got "
                         f"{sorted(map(tuple, shapes))}")
    if not bool(((subset >= SUBSET_CLEAN) & (subset <= SUBSET_NOISY)).all()):
        raise ValueError("`subset` holds codes other than SUBSET_CLEAN, SUBSET_LOCAL, SUBSET_NOISY")
    noisy, local = subset == SUBSET_NOISY, subset == SUBSET_LOCAL
    y = torch.where(noisy, labels.to(cm_loss), torch.ones_like(cm_loss))  # Eq. 11
    cm_weight = torch.full_like(cm_loss, xi)
    if not xi_on_noisy:
        cm_weight = cm_weight.masked_fill(noisy, 1.0)
    im_weight = torch.where(local, 1.0 / penalty.to(im_loss), torch.ones_like(im_loss))
    # masked_fill rather than a zero weight: a non-finite L_IM of a noisy pair stays out
    return cm_weight * y * cm_loss + (im_weight * im_loss).masked_fill(noisy, 0.0)
