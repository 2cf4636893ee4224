"""ReCon's losses as the official model file computes them (qxzha/ReCon ``model/ReCon.py`` at
2a40dcf), checked against by-hand computations (``tests/recon_by_hand.py``) from its formulas in plain
torch: ``info_nce_loss`` (exponentials of the positive and the summed negatives), the
``train_batch`` rank loss, and ``forward_relation`` (index lists, ``nn.Softmax`` rows and two
``nn.KLDivLoss(reduction="none")`` calls, ``/ 2``, ``/ batch_length``, ``.mean()``)."""

from __future__ import annotations

import pytest
import torch
from recon_by_hand import info_nce_by_hand, relation_by_hand, train_batch_losses

from ncl.losses.contrastive import info_nce
from ncl.losses.recon_official import (
    official_rank_loss,
    official_relation_loss,
    official_relation_terms,
)

def info_nce_rows(sims: torch.Tensor, tau: float):  # noqa: ANN201
    """The published ``info_nce_loss`` (the warm-up's): the one InfoNCE, images querying."""
    return info_nce(sims, tau, directions="i2t")


SIMS = torch.tensor([[0.9, 0.1, -0.3, 0.2],
                     [0.4, 0.5, 0.6, -0.1],
                     [-0.2, 0.3, 0.8, 0.0],
                     [0.1, 0.7, 0.2, 0.3]])
R_V = torch.tensor([[1.2, 0.3, -0.5, 0.1],
                    [0.2, 0.9, 0.4, -0.3],
                    [-0.6, 0.5, 1.1, 0.2],
                    [0.0, -0.2, 0.3, 0.8]])
R_T = torch.tensor([[0.7, -0.1, 0.2, 0.5],
                    [0.3, 1.0, -0.4, 0.1],
                    [0.2, 0.6, 0.9, -0.2],
                    [-0.3, 0.4, 0.1, 1.3]])


def test_info_nce_rows_is_the_published_info_nce() -> None:
    loss, preds = info_nce_by_hand(SIMS, 0.05)
    terms = info_nce_rows(SIMS, 0.05)
    assert torch.allclose(terms.loss, loss, atol=1e-5)
    assert torch.allclose(terms.probability, preds, atol=1e-6)
    assert not terms.probability.requires_grad


def test_info_nce_rows_stays_finite_where_plain_exponentials_overflow() -> None:
    sims = SIMS * 10  # S / tau up to 180: exp overflows float32
    assert not torch.isfinite(info_nce_by_hand(sims, 0.05)[0]).all()
    loss, preds = info_nce_by_hand(sims.double(), 0.05)
    terms = info_nce_rows(sims, 0.05)
    assert torch.isfinite(terms.loss).all()
    assert torch.allclose(terms.loss.double(), loss, rtol=1e-5, atol=1e-4)
    assert torch.allclose(terms.probability.double(), preds, atol=1e-6)


def test_rank_loss_is_both_directions_averaged_and_weighted_by_the_targets() -> None:
    targets = torch.tensor([1.0, 0.25, 1.0, 0.0])
    row, row_p = info_nce_by_hand(SIMS, 0.1)
    col, col_p = info_nce_by_hand(SIMS.t(), 0.1)
    terms = official_rank_loss(SIMS, targets, 0.1)
    assert torch.allclose(terms.loss, (row + col) * 0.5 * targets, atol=1e-5)
    assert torch.allclose(terms.probability, (row_p + col_p) * 0.5, atol=1e-6)
    # the train_batch scalar: xi * loss_rank.mean()
    assert (5 * terms.loss.mean()).item() == pytest.approx(
        (5 * ((row + col) * 0.5 * targets).mean()).item(), rel=1e-5)
    with pytest.raises(ValueError, match="targets"):
        official_rank_loss(SIMS, targets[:3], 0.1)


def test_relation_loss_is_the_published_scalar() -> None:
    i2t = relation_by_hand(R_V, R_T, SIMS, "v")
    t2i = relation_by_hand(R_V, R_T, SIMS.t(), "t")
    _, want, _ = train_batch_losses(SIMS, R_V, R_T, torch.ones(4), 0.1)
    terms = official_relation_terms(R_V, R_T, SIMS)
    assert official_relation_loss(terms).item() == pytest.approx(want.item(), rel=1e-5)
    assert torch.allclose(terms.visual, i2t.sum(dim=1), atol=1e-6)
    assert torch.allclose(terms.textual, t2i.sum(dim=1), atol=1e-6)
    assert torch.allclose(terms.loss, (i2t + t2i).sum(dim=1) / 2, atol=1e-6)


def test_relation_text_proxy_images_mirrors_the_visual_rows() -> None:
    """``images``: the caption rows against the image relations of their partners."""
    to_image = SIMS.argmax(dim=0).tolist()
    proxy = torch.tensor([[R_V[a, b].item() for b in to_image] for a in to_image])
    p, q = R_T.softmax(dim=-1), proxy.softmax(dim=-1)
    by_hand = (q * (q.log() - (p + 1e-6).log()) + p * (p.log() - (q + 1e-6).log())).sum(dim=1)
    terms = official_relation_terms(R_V, R_T, SIMS, text_proxy="images")
    assert torch.allclose(terms.textual, by_hand, atol=1e-6)
    published = official_relation_terms(R_V, R_T, SIMS)
    assert torch.allclose(terms.visual, published.visual)
    assert not torch.allclose(terms.textual, published.textual)


def test_relation_loss_gradient_reaches_both_relations_but_not_the_scores() -> None:
    r_v, r_t = R_V.clone().requires_grad_(True), R_T.clone().requires_grad_(True)
    sims = SIMS.clone().requires_grad_(True)
    official_relation_loss(official_relation_terms(r_v, r_t, sims)).backward()
    assert r_v.grad.abs().sum() > 0 and r_t.grad.abs().sum() > 0
    assert sims.grad is None  # only its arg-max is read


def test_relation_loss_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="text_proxy"):
        official_relation_terms(R_V, R_T, SIMS, text_proxy="words")
    with pytest.raises(ValueError, match="image_relations"):
        official_relation_terms(R_V[:3, :3], R_T, SIMS)
