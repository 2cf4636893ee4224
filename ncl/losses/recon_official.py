"""ReCon's losses as its official model file computes them (github qxzha/ReCon,
``model/ReCon.py`` at 2a40dcf: ``info_nce_loss``, ``forward_relation``, ``warmup_batch``,
``train_batch``), beside the paper's reading in :mod:`ncl.losses.recon`.

The file has no training script: who sets the per-sample ``targets``, the flags ``is_pseudo``,
``is_noisy``, ``is_lambda`` (default 1) and ``opt.temp`` (not in ``opt.py``) is not published.
``docs/methods/recon.md`` ("The official model file, step by step") lists every difference.

* ``info_nce_loss``: the image-to-text InfoNCE of every pair and its matching probability
  (the warm-up's ``InfoNCE`` branch uses it alone) is
  ``ncl.losses.contrastive.info_nce(S, tau, directions="i2t")``: the published
  ``pos / (pos + sum(neg))`` of plain exponentials (float32 overflows once ``S / tau`` passes
  about 88), the same value through a log-softmax, finite there too.
* :func:`official_rank_loss` - the rank loss after the warm-up: the two directions averaged,
  weighted by the per-sample targets; the predictions ``(p^v2l + p^l2v) / 2`` it stores.
* :func:`official_relation_terms` - the relation loss: symmetric KL between row-softmaxed
  batch relations ``R^v``/``R^t`` (:mod:`ncl.models.sgraf_relations`) and the relations of
  each sample's arg-max cross-modal partner; :func:`official_relation_loss` its scalar.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from ncl.losses._checks import check_choice, check_square
from ncl.losses.contrastive import InfoNCETerms, info_nce
from ncl.losses.recon import IntraModalTerms

#: Which relations the caption-side proxy reads (see :func:`official_relation_terms`).
TextProxy = Literal["captions", "images"]

#: The ``eps`` inside the logs of the published relation loss.
LOG_EPS = 1e-6


def official_rank_loss(sims: Tensor, targets: Tensor, tau: float) -> InfoNCETerms:
    """The rank loss of ``train_batch``: ``t_i (l_i^v2l + l_i^l2v) / 2`` per pair.

    ``l^v2l = -log p_ii`` of the images querying (``info_nce_loss`` of ``sims``), ``l^l2v`` of
    the captions querying (of ``sims.T``); ``t`` the stored per-sample targets: the one InfoNCE
    with ``combine="mean"``, ``weights=t`` and the published per-direction calls' op order
    (``logits="per_direction"``; :func:`~ncl.losses.contrastive.info_nce`). The
    step's loss is ``xi * mean_i`` of this. The probability is ``(p_ii^v2l + p_ii^l2v) / 2``,
    which the file stores for every pair of every step.

    Args:
        sims: (B, B) scores (rows images, columns captions).
        targets: (B,) per-sample targets.
        tau: temperature > 0.

    Returns:
        :class:`~ncl.losses.contrastive.InfoNCETerms`, each (B,).
    """
    if targets.shape != (sims.shape[0],):
        raise ValueError(f"`targets` must have shape ({sims.shape[0]},), got {tuple(targets.shape)}")
    return info_nce(sims, tau, combine="mean", weights=targets, logits="per_direction")


def partner_relations(relations: Tensor, partner: Tensor) -> Tensor:
    """``relations[partner[i], partner[j]]`` for all ``i, j``: (B, B) from (B, B) and (B,)."""
    return relations[partner.unsqueeze(1), partner.unsqueeze(0)]


def symmetric_kl_rows(relations: Tensor, proxy: Tensor, eps: float = LOG_EPS) -> Tensor:
    """Per row: ``sum_j q_ij (log q_ij - log(p_ij + eps)) + p_ij (log p_ij - log(q_ij + eps))``
    with ``p = softmax_row(relations)``, ``q = softmax_row(proxy)`` (the published pair of
    ``nn.KLDivLoss(reduction='none')`` calls, summed over the row).

    Args:
        relations, proxy: (B, B).
        eps: added inside the log of each KL's input (1e-6, as published).

    Returns:
        (B,) per-row symmetric divergences.
    """
    p, q = relations.softmax(dim=-1), proxy.softmax(dim=-1)
    per_entry = (torch.xlogy(q, q) - q * (p + eps).log()) + (torch.xlogy(p, p) - p * (q + eps).log())
    return per_entry.sum(dim=-1)


def official_relation_terms(image_relations: Tensor, text_relations: Tensor, sims: Tensor,
                            text_proxy: TextProxy = "captions",
                            eps: float = LOG_EPS) -> IntraModalTerms:
    """The relation loss of ``train_batch``, per row (``forward_relation`` in modes v and t).

    With ``pi(i) = argmax_j S_ij`` (the caption that image ``i`` scores highest) and
    ``sigma(i) = argmax_k S_ki`` (the image that caption ``i`` scores highest), indices
    without gradient:

    * visual row ``i``: ``KLs(softmax(R^v_i.) , softmax(R^t[pi(i), pi(.)]))`` - the image
      relations against the caption relations of the images' partners;
    * textual row ``i``: ``KLs(softmax(R^t_i.), softmax(X[sigma(i), sigma(.)]))`` with
      ``X = R^t`` (``text_proxy="captions"``: the published code, which indexes the caption
      relations in both modes) or ``X = R^v`` (``"images"``: the mirror of the visual row).

    ``KLs`` is :func:`symmetric_kl_rows`. ``loss = (visual + textual) / 2``; the published
    scalar is :func:`official_relation_loss` of it.

    Args:
        image_relations: (B, B) ``R^v`` (raw SGRAF scores; :mod:`ncl.models.sgraf_relations`).
        text_relations: (B, B) ``R^t``.
        sims: (B, B) cross-modal scores (rows images, columns captions); only its arg-maxes.
        text_proxy: ``captions`` (as published) or ``images``.
        eps: see :func:`symmetric_kl_rows`.

    Returns:
        :class:`~ncl.losses.recon.IntraModalTerms`, each (B,).
    """
    check_choice(text_proxy, get_args(TextProxy), "text_proxy")
    batch = check_square(sims)
    for name, matrix in (("image_relations", image_relations), ("text_relations", text_relations)):
        if matrix.shape != (batch, batch):
            raise ValueError(f"`{name}` must have shape ({batch}, {batch}), got {tuple(matrix.shape)}")
    r_v, r_t = image_relations.float(), text_relations.float()
    to_caption, to_image = sims.detach().argmax(dim=1), sims.detach().argmax(dim=0)  # (B,) each
    visual = symmetric_kl_rows(r_v, partner_relations(r_t, to_caption), eps)
    source = r_t if text_proxy == "captions" else r_v
    textual = symmetric_kl_rows(r_t, partner_relations(source, to_image), eps)
    return IntraModalTerms((visual + textual) / 2, visual, textual)


def official_relation_loss(terms: IntraModalTerms) -> Tensor:
    """The published scalar: the ``(B, B)`` entries averaged over both modes, divided by ``B``,
    then their mean: ``sum_i loss_i / B^3 = mean(loss) / B^2`` (unweighted, every pair)."""
    batch = terms.loss.shape[0]
    return terms.loss.mean() / batch**2
