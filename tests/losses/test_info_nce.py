"""The one InfoNCE (``ncl.losses.contrastive.info_nce``) against each InfoNCE the methods used
before it, written out here op for op as they were: ``torch.equal``, bit for bit, on random
matrices in float32 and float64 (the layout regression's numbers depend on the op order:
``log_softmax`` against the guarded log-sum-exp, ``* 0.5`` after the sum, weights last)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from ncl.losses import RCL_EPS, diagonal_info_nce, info_nce, log_matching_probabilities
from ncl.losses.crcl import active_complementary_terms, average_matching_probability
from ncl.losses.gsc import gsc_objective
from ncl.losses.l2rm import rce_warmup_terms
from ncl.losses.recon import cross_modal_relation_loss
from ncl.losses.recon_official import official_rank_loss

DTYPES = (torch.float32, torch.float64)
SIZES = (1, 5, 64, 128)


def sims_of(b: int, dtype: torch.dtype, seed: int = 0, scale: float = 1.0) -> Tensor:
    return (torch.randn(b, b, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
            * scale).to(dtype)


def weights_of(b: int, dtype: torch.dtype, seed: int = 1) -> Tensor:
    return torch.rand(b, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


# ---------------------------------------------------------------- the old formulas, by hand
def old_guarded_rows(z: Tensor, eps: float) -> Tensor:
    """RCL's ``_row_log_softmax_eps`` as it was: shift, logsumexp, logaddexp with log eps."""
    m = z.max(dim=1, keepdim=True).values.detach()
    shifted = z - m
    lse = torch.logsumexp(shifted, dim=1, keepdim=True)
    if eps > 0:
        lse = torch.logaddexp(lse, math.log(eps) - m)
    return shifted - lse


def old_rcl_infonce(sims: Tensor, tau: float, eps: float) -> Tensor:
    """RCL's ``infonce_loss``: ``-(log P_i2t[i,i] + log P_t2i[i,i])`` on the guarded rows."""
    z = sims.to(torch.promote_types(sims.dtype, torch.float32)) / tau
    return -(old_guarded_rows(z, eps).diagonal() + old_guarded_rows(z.t(), eps).diagonal())


def old_gsc_rows(sims: Tensor, t: float) -> tuple[Tensor, Tensor]:
    """GSC's ``info_nce``: ``(-log p_ii, p_ii)`` of ``log_softmax(S / T)``."""
    log_p = (sims.to(torch.promote_types(sims.dtype, torch.float32)) / t).log_softmax(dim=1).diagonal()
    return -log_p, log_p.exp()


def old_gsc_both(sims: Tensor, t: float) -> tuple[Tensor, Tensor]:
    """GSC's ``bidirectional_info_nce``: both directions, ``* 0.5``."""
    (l1, p1), (l2, p2) = old_gsc_rows(sims, t), old_gsc_rows(sims.t(), t)
    return (l1 + l2) * 0.5, (p1 + p2) * 0.5


def old_recon_official_rows(sims: Tensor, tau: float) -> tuple[Tensor, Tensor]:
    """ReCon's ``info_nce_rows`` (``.float()``, then ``log_softmax``)."""
    log_p = (sims.float() / tau).log_softmax(dim=1).diagonal()
    return -log_p, log_p.exp().detach()


def old_recon_paper(sims: Tensor, labels: Tensor | None, tau: float) -> tuple[Tensor, Tensor]:
    """ReCon's ``cross_modal_relation_loss``: guarded rows with eps 0, ``-y (d1 + d2)``, ``/ 2``."""
    z = sims.to(torch.promote_types(sims.dtype, torch.float32)) / tau
    d1, d2 = old_guarded_rows(z, 0.0).diagonal(), old_guarded_rows(z.t(), 0.0).diagonal()
    log_diag = d1 + d2
    prediction = ((d1.exp() + d2.exp()) / 2).detach()
    loss = -log_diag if labels is None else -labels.to(log_diag) * log_diag
    return loss, prediction


# ---------------------------------------------------------------- bit for bit
def same_values_and_gradients(new: Callable[[Tensor], Tensor], old: Callable[[Tensor], Tensor],
                              sims: Tensor) -> None:
    """``new(S)`` and ``old(S)`` equal bit for bit, and so are their gradients in ``S`` for one
    random cotangent (a training run depends on both)."""
    results = []
    for fn in (new, old):
        leaf = sims.clone().requires_grad_()
        out = fn(leaf)
        out.backward(torch.rand(out.shape, generator=torch.Generator().manual_seed(7), dtype=out.dtype))
        results.append((out.detach(), leaf.grad))
    (v_new, g_new), (v_old, g_old) = results
    assert torch.equal(v_new, v_old)
    assert torch.equal(g_new, g_old)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b", SIZES)
@pytest.mark.parametrize("eps", [RCL_EPS, 0.0])
def test_rcl_and_baseline_infonce_bit_for_bit(dtype: torch.dtype, b: int, eps: float) -> None:
    sims = sims_of(b, dtype)
    same_values_and_gradients(lambda s: info_nce(s, 0.05, eps=eps).loss,
                              lambda s: old_rcl_infonce(s, 0.05, eps), sims)
    same_values_and_gradients(lambda s: info_nce(s, 0.05, eps=eps, reduction="mean").loss,
                              lambda s: old_rcl_infonce(s, 0.05, eps).mean(), sims)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b", SIZES)
def test_gsc_infonce_bit_for_bit(dtype: torch.dtype, b: int) -> None:
    sims, y = sims_of(b, dtype).sigmoid(), weights_of(b, dtype)
    got = info_nce(sims, 0.07, combine="mean", logits="per_direction")
    assert torch.equal(got.probability, old_gsc_both(sims, 0.07)[1])
    same_values_and_gradients(lambda s: info_nce(s, 0.07, combine="mean", logits="per_direction").loss,
                              lambda s: old_gsc_both(s, 0.07)[0], sims)
    same_values_and_gradients(
        lambda s: info_nce(s, 0.07, combine="mean", weights=y, reduction="mean",
                           logits="per_direction").loss,
        lambda s: (old_gsc_both(s, 0.07)[0] * y).mean(), sims)
    rows = info_nce(sims, 0.07, directions="i2t")
    assert torch.equal(rows.probability, old_gsc_rows(sims, 0.07)[1])
    # the warm-up's infonce and the structure term (T = 1, weighted mean)
    same_values_and_gradients(lambda s: info_nce(s, 0.07, directions="i2t", reduction="mean").loss,
                              lambda s: old_gsc_rows(s, 0.07)[0].mean(), sims)
    same_values_and_gradients(
        lambda s: info_nce(s, 1.0, directions="i2t", weights=y, reduction="mean").loss,
        lambda s: (old_gsc_rows(s, 1.0)[0] * y).mean(), sims_of(b, dtype, seed=3, scale=float(b)))


def test_shared_logits_round_the_gradient_differently() -> None:
    """Why ``logits`` exists: the same values, but GSC's per-direction division gives other
    gradient bits than one shared division (so the option can tell them apart)."""
    sims = sims_of(128, torch.float32).sigmoid()
    shared = sims.clone().requires_grad_()
    info_nce(shared, 0.07, combine="mean").loss.backward(torch.ones(128))
    apart = sims.clone().requires_grad_()
    info_nce(apart, 0.07, combine="mean", logits="per_direction").loss.backward(torch.ones(128))
    assert torch.allclose(shared.grad, apart.grad, rtol=1e-5, atol=1e-6)
    assert not torch.equal(shared.grad, apart.grad)


@pytest.mark.parametrize("b", SIZES)
def test_gsc_objective_bit_for_bit(b: int) -> None:
    sims, y = sims_of(b, torch.float32).sigmoid(), weights_of(b, torch.float32)
    img, cap = sims_of(b, torch.float32, 4), sims_of(b, torch.float32, 5)

    def old(s: Tensor) -> Tensor:
        a, c = torch.sigmoid(img) * y.unsqueeze(0), torch.sigmoid(cap) * y.unsqueeze(0)
        return (old_gsc_both(s, 0.07)[0] * y).mean() + 0.5 * (old_gsc_rows(a @ c.t(), 1.0)[0] * y).mean()

    same_values_and_gradients(lambda s: gsc_objective(s, img, cap, y, temperature=0.07, gamma=0.5).loss,
                              old, sims)
    assert torch.equal(gsc_objective(sims, img, cap, y).preds, old_gsc_both(sims, 0.07)[1])


@pytest.mark.parametrize("b", SIZES)
def test_recon_official_infonce_bit_for_bit(b: int) -> None:
    sims, t = sims_of(b, torch.float32, scale=3.0), weights_of(b, torch.float32)
    same_values_and_gradients(lambda s: info_nce(s.float(), 0.05, directions="i2t").loss,
                              lambda s: old_recon_official_rows(s, 0.05)[0], sims)
    assert torch.equal(info_nce(sims, 0.05, directions="i2t").probability,
                       old_recon_official_rows(sims, 0.05)[1])

    def old_rank(s: Tensor) -> Tensor:
        return (old_recon_official_rows(s, 0.05)[0] + old_recon_official_rows(s.t(), 0.05)[0]) * 0.5 * t

    same_values_and_gradients(lambda s: official_rank_loss(s, t, 0.05).loss, old_rank, sims)
    p1, p2 = old_recon_official_rows(sims, 0.05)[1], old_recon_official_rows(sims.t(), 0.05)[1]
    assert torch.equal(official_rank_loss(sims, t, 0.05).probability, (p1 + p2) * 0.5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b", SIZES)
@pytest.mark.parametrize("weighted", [False, True])
def test_recon_paper_infonce_bit_for_bit(dtype: torch.dtype, b: int, weighted: bool) -> None:
    sims = sims_of(b, dtype, scale=3.0)
    y = weights_of(b, dtype) if weighted else None
    same_values_and_gradients(lambda s: cross_modal_relation_loss(s, y, 0.1).loss,
                              lambda s: old_recon_paper(s, y, 0.1)[0], sims)
    assert torch.equal(cross_modal_relation_loss(sims, y, 0.1).probability,
                       old_recon_paper(sims, y, 0.1)[1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b", SIZES)
@pytest.mark.parametrize("form,eps", [("official", 1e-10), ("paper", 0.0)])
def test_crcl_active_term_bit_for_bit(dtype: torch.dtype, b: int, form: str, eps: float) -> None:
    sims, y = sims_of(b, dtype).sigmoid(), weights_of(b, dtype)

    def diagonals(s: Tensor) -> tuple[Tensor, Tensor]:
        z = s.to(torch.promote_types(dtype, torch.float32)) / 0.05
        return old_guarded_rows(z, eps).diagonal(), old_guarded_rows(z.t(), eps).diagonal()

    def old_active(s: Tensor) -> Tensor:
        d1, d2 = diagonals(s)
        return -y.detach().to(d1.dtype) * (d1 + d2)

    same_values_and_gradients(lambda s: active_complementary_terms(s, y, 0.05, form=form).active,
                              old_active, sims)
    d1, d2 = diagonals(sims)
    assert torch.equal(average_matching_probability(sims, 0.05, form), (d1.exp() + d2.exp()) / 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b", SIZES)
def test_l2rm_rce_terms_bit_for_bit(dtype: torch.dtype, b: int) -> None:
    def old(s: Tensor) -> Tensor:
        logits = s.to(torch.promote_types(dtype, torch.float32)) / 0.05
        log_p, log_t = torch.log_softmax(logits, dim=1), torch.log_softmax(logits.t(), dim=1)
        eye = torch.eye(b, dtype=torch.bool)
        target = torch.full_like(logits, math.log(1e-7)).masked_fill(eye, math.log1p(1e-7))
        return torch.stack([-(target * log_p.exp()).sum() / b, -(target * log_t.exp()).sum() / b,
                            -log_p.diagonal().mean(), -log_t.diagonal().mean()])

    def new(s: Tensor) -> Tensor:
        terms = rce_warmup_terms(s, 0.05, 1e-7)
        return torch.stack([terms[k] for k in ("rce_i2t", "rce_t2i", "nce_i2t", "nce_t2i")])

    same_values_and_gradients(new, old, sims_of(b, dtype).sigmoid())


# ---------------------------------------------------------------- by value, by hand
def test_every_variant_by_hand_on_two_by_two() -> None:
    """``S = [[1, 0], [2, 1]]``, tau 1: p^i2t_00 = e / (e + 1), p^t2i_00 = e / (e + e^2)."""
    sims = torch.tensor([[1.0, 0.0], [2.0, 1.0]], dtype=torch.float64)
    e = math.e
    p_i2t = [e / (e + 1), e / (e ** 2 + e)]  # row 1: exp(1) / (exp(2) + exp(1))
    p_t2i = [e / (e + e ** 2), e / (1 + e)]  # column 0: exp(1) / (exp(1) + exp(2))
    l_i2t, l_t2i = [-math.log(p) for p in p_i2t], [-math.log(p) for p in p_t2i]
    w = torch.tensor([0.5, 2.0], dtype=torch.float64)
    both = info_nce(sims, 1.0)
    assert both.loss.tolist() == pytest.approx([a + b for a, b in zip(l_i2t, l_t2i)], rel=1e-12)
    assert both.probability.tolist() == pytest.approx([(a + b) / 2 for a, b in zip(p_i2t, p_t2i)])
    mean = info_nce(sims, 1.0, combine="mean", weights=w, reduction="sum")
    assert float(mean.loss) == pytest.approx(sum(wi * (a + b) / 2 for wi, a, b in
                                                 zip([0.5, 2.0], l_i2t, l_t2i)), rel=1e-12)
    assert info_nce(sims, 1.0, directions="t2i").loss.tolist() == pytest.approx(l_t2i, rel=1e-12)
    # eps in the denominators: p = e / (e + 1 + eps)
    guarded = info_nce(sims, 1.0, eps=1.0, directions="i2t")
    assert float(guarded.loss[0]) == pytest.approx(-math.log(e / (e + 2)), rel=1e-12)
    # temperature divides: tau 0.5 doubles the logits
    half = info_nce(sims, 0.5, directions="i2t")
    assert float(half.loss[0]) == pytest.approx(-math.log(e ** 2 / (e ** 2 + 1)), rel=1e-12)


def test_diagonal_info_nce_reuses_the_matrices() -> None:
    sims = sims_of(6, torch.float64)
    logs = log_matching_probabilities(sims, 0.1, RCL_EPS)
    assert torch.equal(diagonal_info_nce(*logs).loss, info_nce(sims, 0.1, eps=RCL_EPS).loss)


def test_probability_is_detached_and_weights_are_constants() -> None:
    sims = sims_of(4, torch.float32).requires_grad_()
    w = torch.rand(4, requires_grad=True)
    terms = info_nce(sims, 0.1, weights=w)
    assert not terms.probability.requires_grad
    terms.loss.sum().backward()
    assert sims.grad is not None and w.grad is None


def test_bad_arguments_name_the_argument() -> None:
    sims = sims_of(3, torch.float32)
    for kwargs, name in (({"directions": "up"}, "directions"), ({"combine": "max"}, "combine"),
                         ({"reduction": "median"}, "reduction"), ({"eps": -1.0}, "eps"),
                         ({"weights": torch.ones(2)}, "weights")):
        with pytest.raises(ValueError, match=name):
            info_nce(sims, 0.1, **kwargs)
    with pytest.raises(ValueError, match="tau"):
        info_nce(sims, 0.0)
    with pytest.raises(ValueError, match="sims"):
        info_nce(torch.rand(3), 0.1)
    with pytest.raises(ValueError, match="direction"):
        diagonal_info_nce(None, None)
