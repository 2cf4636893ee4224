"""ReCon's forward of a batch through a fine-grained backbone (SGR/SAF): the ``(B, B)`` scores
``g``, the intra-modal relation loss ``L_IM`` per pair (Eq. 3-4), and the per-sample values of
its division pass (``l^CM``, ``L_IM``, ``p``; Sect. 3.3, Eq. 6 and 10). Paper-derived, except
``score`` (the published similarity module's default) and ``relation="batch"``: the relation
loss of the official model file (``model/ReCon.py`` at 2a40dcf), per row
(:mod:`ncl.losses.recon_official`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from ncl.data.augment import REGION_FILL_VALUE
from ncl.errors import ConfigError
from ncl.models.contracts import encode_images
from ncl.models.similarity import EncoderSimilarity
from ncl.models.sgraf_relations import batch_relations
from ncl.losses.recon import (
    IntraModalTerms,
    RelationKL,
    RowReduction,
    cross_modal_relation_loss,
    intra_modal_relation_loss,
    item_mask,
)
from ncl.losses.recon_official import TextProxy, official_relation_terms

Score = Literal["logits", "sigmoid"]
RelationFeatures = Literal["embeddings", "inputs"]
RelationLoss = Literal["pair", "batch"]


@dataclass(frozen=True)
class RelationOptions:
    """How a batch is scored and its relations compared.

    Attributes:
        score: the similarity ``g``: SGRAF's raw ``logits`` (the published ReCon module) or
            its ``sigmoid``.
        features: what the relation matrices ``C_VV``, ``C_LL`` are computed from: the
            fine-grained ``embeddings`` (region and word embeddings in the joint space) or
            the ``inputs`` (region features and word vectors before the encoders). The
            cross-modal correspondence always uses the embeddings (a common space).
        mask_filled_regions: leave the regions that the training augmentation overwrote with
            its constant (``1e-10``, spec 1.7) out of the relations. Without it every filled
            region of an image encodes to the same embedding, so they form a block of mutual
            cosine 1 in ``C_VV`` that the un-augmented division pass never sees.
        temperature, kl, rows, detach_proxy: see
            :func:`~ncl.losses.recon.intra_modal_relation_loss`.
        relation: ``pair`` (the paper, Eq. 3-4: region and word relations within each pair;
            every option above applies) or ``batch`` (the official model file: image-image and
            text-text ``(B, B)`` relations through the SGRAF head, per-row symmetric KL against
            the arg-max partners' relations, :func:`~ncl.losses.recon_official.official_relation_terms`;
            ``features``, ``temperature``, ``kl``, ``rows``, ``detach_proxy`` and
            ``mask_filled_regions`` are not read).
        text_proxy: with ``batch``, what the caption rows are compared with (``captions``:
            as published; ``images``: the mirror of the image rows).
    """

    score: Score = "logits"
    features: RelationFeatures = "embeddings"
    temperature: float = 1.0
    kl: RelationKL = "symmetric"
    rows: RowReduction = "sum"
    detach_proxy: bool = False
    mask_filled_regions: bool = True
    relation: RelationLoss = "pair"
    text_proxy: TextProxy = "captions"


def check_backbone(net: nn.Module, options: RelationOptions) -> None:
    """One ConfigError when the backbone lacks what the chosen options need."""
    if options.score == "logits" and not callable(getattr(net, "similarity_logits", None)):
        raise ConfigError(f"model.score=logits needs a backbone with similarity_logits (SGR/SAF); "
                          f"{type(net).__name__} has none: set model.score=sigmoid")
    embed = getattr(getattr(net, "txt_enc", None), "embed", None)
    if options.features == "inputs" and not isinstance(embed, nn.Embedding):
        raise ConfigError(f"model.relation_features=inputs reads the word vectors of "
                          f"txt_enc.embed, which {type(net).__name__} lacks: use embeddings")
    if options.relation == "batch" and not isinstance(getattr(net, "sim_enc", None),
                                                      EncoderSimilarity):
        raise ConfigError(f"model.relation_loss=batch scores relations with the SGRAF head "
                          f"(sim_enc), which {type(net).__name__} lacks: use pair")


def unfilled_regions(images: Tensor, image_lengths: Tensor | None = None,
                     fill: float = REGION_FILL_VALUE) -> Tensor:
    """(B, R) bool: True at the real regions the training augmentation left as they were.

    A region counts as filled when every feature equals ``fill`` (the published augmentation
    overwrites the whole row with one constant; real region features never are constant).
    An image whose real regions were all filled keeps all of them, so that every row of the
    relations stays defined.
    """
    real = item_mask(image_lengths, images.shape[0], images.shape[1], images.device)
    kept = real & ~(images == fill).all(dim=-1)  # (B, R)
    return torch.where(kept.any(dim=1, keepdim=True), kept, real)


def relation_forward(net: nn.Module, batch: dict[str, Tensor], options: RelationOptions,
                     relations: bool = True) -> tuple[Tensor, IntraModalTerms | None]:
    """Encode a batch once; return its ``(B, B)`` scores and (optionally) ``L_IM`` per pair
    (with ``options.relation="batch"``: the official relation loss per row, whose published
    scalar is :func:`~ncl.losses.recon_official.official_relation_loss`)."""
    img = encode_images(net, batch)  # (B, R, E)
    cap = net.encode_captions(batch["tokens"], batch["lengths"])  # (B, L, E)
    if img.dim() != 3 or cap.dim() != 3:
        raise ConfigError("ReCon needs fine-grained region and word embeddings (B, R, E) and "
                          "(B, L, E); model.backbone pools them (use SGR or SAF)")
    score = net.similarity_logits if options.score == "logits" else net.similarity
    sims = score(img, cap, batch["lengths"])  # (B, B)
    if not relations:
        return sims, None
    if options.relation == "batch":
        r_v, r_t = batch_relations(net.sim_enc, img, cap, batch["lengths"])  # (B, B) each
        return sims, official_relation_terms(r_v, r_t, sims, options.text_proxy)
    region_features = word_features = None
    if options.features == "inputs":
        region_features = batch["images"]  # (B, R, D)
        word_features = net.txt_enc.embed(batch["tokens"])  # (B, L, word_dim)
    region_mask = None
    if options.mask_filled_regions:
        region_mask = unfilled_regions(batch["images"], batch.get("image_lengths"))
    terms = intra_modal_relation_loss(
        img.float(), cap.float(), batch["lengths"], region_lengths=batch.get("image_lengths"),
        region_features=region_features, word_features=word_features, region_mask=region_mask,
        temperature=options.temperature, kl=options.kl, rows=options.rows,
        detach_proxy=options.detach_proxy)
    return sims, terms


def division_values(options: RelationOptions, tau: float
                    ) -> Callable[[nn.Module, dict[str, Tensor]], Tensor]:
    """The per-sample function of the division pass: ``(B, 3)`` rows ``[l^CM, L_IM, p]``
    (``l^CM`` with ``y = 1``, Sect. 3.3; ``p`` of Eq. 10)."""
    def fn(net: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        sims, terms = relation_forward(net, batch, options)
        cm = cross_modal_relation_loss(sims.float(), None, tau)
        return torch.stack([cm.loss, terms.loss.to(cm.loss), cm.probability], dim=1)
    return fn
