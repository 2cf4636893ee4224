"""CRCL's Active Complementary Loss against loop transcriptions of Eq. 3, 6, 8-10 and spec 4.4.2."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.losses import (
    OFFICIAL_COMPLEMENTARY_WEIGHT,
    active_complementary_loss,
    active_complementary_terms,
    average_matching_probability,
    complementary_contrastive_loss,
    robust_complementary_loss,
)

TAU = 0.05
EPS = {"paper": 0.0, "official": 1e-10}
Matrix = list[list[float]]


# ---------------------------------------------------------------- paper, written as printed


def paper_probs(s: Matrix, tau: float, eps: float) -> tuple[Matrix, Matrix]:
    """Eq. 3 in the paper's indices: p_o[i][j] = f(I_i, T_j), p_d[i][j] = f(T_j, I_i)."""
    n = len(s)
    e = [[math.exp(s[i][j] / tau) for j in range(n)] for i in range(n)]
    p_o = [[e[i][j] / (sum(e[i][l] for l in range(n)) + eps) for j in range(n)] for i in range(n)]
    p_d = [[e[i][j] / (sum(e[l][j] for l in range(n)) + eps) for j in range(n)] for i in range(n)]
    return p_o, p_d


def paper_lr(s: Matrix, q: list[float], tau: float, eps: float) -> list[float]:
    """Eq. 6: sum_{j!=i} tan(p_o_ij) / (sum_k tan p_o_ik)^q
    + sum_{j!=i} tan(p_d_ji) / (sum_k tan p_d_ki)^q."""
    p_o, p_d = paper_probs(s, tau, eps)
    n = len(s)
    out = []
    for i in range(n):
        den_o = sum(math.tan(p_o[i][k]) for k in range(n)) ** q[i]
        den_d = sum(math.tan(p_d[k][i]) for k in range(n)) ** q[i]
        num_o = sum(math.tan(p_o[i][j]) for j in range(n) if j != i)
        num_d = sum(math.tan(p_d[j][i]) for j in range(n) if j != i)
        out.append(num_o / den_o + num_d / den_d)
    return out


def paper_acl(s: Matrix, y: list[float], lam: float, tau: float, eps: float) -> list[float]:
    """Eq. 8: -y (log p_o_ii + log p_d_ii) + lambda L_r(1 - y)."""
    p_o, p_d = paper_probs(s, tau, eps)
    lr = paper_lr(s, [1.0 - v for v in y], tau, eps)
    return [
        -y[i] * (math.log(p_o[i][i]) + math.log(p_d[i][i])) + lam * lr[i] for i in range(len(s))
    ]


# ---------------------------------------------------------------- official, as spec 4.4.2 says


def official_scalar(s: Matrix, y: list[float], tau: float) -> float:
    """Spec 4.4.2 steps 1-2 and 7: L = mean(y Lpos) + 5 mean(Lneg), P^2 = rownorm(E^T)."""
    eps, n = 1e-10, len(s)
    e = [[math.exp(v / tau) for v in row] for row in s]
    et = [[e[j][i] for j in range(n)] for i in range(n)]
    p1 = [[e[i][j] / (sum(e[i]) + eps) for j in range(n)] for i in range(n)]
    p2 = [[et[i][j] / (sum(et[i]) + eps) for j in range(n)] for i in range(n)]
    pos = [-math.log(p1[i][i]) - math.log(p2[i][i]) for i in range(n)]
    neg = []
    for i in range(n):
        t1 = [math.tan(v) for v in p1[i]]
        t2 = [math.tan(v) for v in p2[i]]
        neg.append(
            sum(t1[j] for j in range(n) if j != i) / sum(t1) ** (1 - y[i])
            + sum(t2[j] for j in range(n) if j != i) / sum(t2) ** (1 - y[i])
        )
    return sum(y[i] * pos[i] for i in range(n)) / n + 5 * sum(neg) / n


def rand_sims(b: int, seed: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return low + (high - low) * torch.rand(b, b, generator=g, dtype=torch.float64)


def rand_labels(b: int, seed: int) -> torch.Tensor:
    y = torch.rand(b, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    y[0], y[-1] = 0.0, 1.0  # always include both extremes
    return y


def assert_close(got: torch.Tensor, want: list[float], rtol: float = 1e-9) -> None:
    want_t = torch.tensor(want, dtype=got.dtype)
    assert torch.allclose(got, want_t, rtol=rtol, atol=1e-12), (got, want_t)


# ---------------------------------------------------------------- ACL values


@pytest.mark.parametrize("form", ["paper", "official"])
@pytest.mark.parametrize("b", [2, 4, 5])
def test_acl_matches_eq8_loops(form: str, b: int) -> None:
    sims, y = rand_sims(b, b), rand_labels(b, b + 1)
    got = active_complementary_loss(sims, y, TAU, weight=5.0, form=form)  # type: ignore[arg-type]
    assert got.shape == (b,)
    assert_close(got, paper_acl(sims.tolist(), y.tolist(), 5.0, TAU, EPS[form]))


def test_acl_mean_matches_official_scalar() -> None:
    sims, y = rand_sims(6, 3), rand_labels(6, 4)
    got = active_complementary_loss(sims, y, TAU, form="official").mean().item()
    assert got == pytest.approx(official_scalar(sims.tolist(), y.tolist(), TAU), rel=1e-10)
    assert OFFICIAL_COMPLEMENTARY_WEIGHT == 5.0


def test_forms_differ_where_eps_matters() -> None:
    # sims = -1 at tau 0.05: E = e^-20 ~ 2e-9, so the 1e-10 guard changes P by ~1 %
    sims = rand_sims(4, 5, low=-1.0, high=-0.99)
    y = rand_labels(4, 6)
    paper = active_complementary_loss(sims, y, TAU, form="paper")
    official = active_complementary_loss(sims, y, TAU, form="official")
    assert_close(paper, paper_acl(sims.tolist(), y.tolist(), 5.0, TAU, 0.0))
    assert_close(official, paper_acl(sims.tolist(), y.tolist(), 5.0, TAU, 1e-10))
    assert not torch.allclose(paper, official, rtol=1e-4)


def test_terms_compose_and_weight_scales_only_complementary() -> None:
    sims, y = rand_sims(5, 7), rand_labels(5, 8)
    t = active_complementary_terms(sims, y, TAU, weight=2.5)
    torch.testing.assert_close(t.loss, t.active + 2.5 * t.complementary)
    p_o, p_d = paper_probs(sims.tolist(), TAU, 1e-10)
    want_active = [-y[i].item() * (math.log(p_o[i][i]) + math.log(p_d[i][i])) for i in range(5)]
    assert_close(t.active, want_active)
    assert_close(t.complementary, paper_lr(sims.tolist(), (1 - y).tolist(), TAU, 1e-10))
    only_active = active_complementary_loss(sims, y, TAU, weight=0.0)
    torch.testing.assert_close(only_active, t.active)


def test_labels_all_one_reduce_to_infonce_plus_tan_ccl() -> None:
    # y = 1: q = 0, so L_r is RCL's unnormalised tan CCL, and L_d is the full InfoNCE term
    sims = rand_sims(5, 9)
    t = active_complementary_terms(sims, torch.ones(5, dtype=torch.float64), TAU)
    torch.testing.assert_close(t.complementary, complementary_contrastive_loss(sims, TAU, "tan"))
    p_o, p_d = paper_probs(sims.tolist(), TAU, 1e-10)
    assert_close(t.active, [-(math.log(p_o[i][i]) + math.log(p_d[i][i])) for i in range(5)])


def test_labels_all_zero_give_normalised_ratio_only() -> None:
    sims = rand_sims(5, 10)
    t = active_complementary_terms(sims, torch.zeros(5, dtype=torch.float64), TAU, form="paper")
    assert torch.equal(t.active, torch.zeros(5, dtype=torch.float64))
    assert_close(t.complementary, paper_lr(sims.tolist(), [1.0] * 5, TAU, 0.0))
    assert bool((t.complementary < 2).all())  # each direction is a ratio below 1 at q = 1


def test_fixed_q_ablation_and_robust_loss_agree() -> None:
    sims, y = rand_sims(4, 11), rand_labels(4, 12)
    fixed = active_complementary_terms(sims, y, TAU, q=0.3).complementary
    assert_close(fixed, paper_lr(sims.tolist(), [0.3] * 4, TAU, 1e-10))
    torch.testing.assert_close(robust_complementary_loss(sims, 0.3, TAU), fixed)
    per_sample = active_complementary_terms(sims, y, TAU).complementary
    torch.testing.assert_close(robust_complementary_loss(sims, 1 - y, TAU), per_sample)
    assert not torch.allclose(fixed, per_sample)


# ---------------------------------------------------------------- the SCC estimate (Eq. 10)


@pytest.mark.parametrize("form", ["paper", "official"])
def test_average_matching_probability_matches_loops(form: str) -> None:
    sims = rand_sims(5, 13, low=-1.0, high=-0.99).requires_grad_()
    got = average_matching_probability(sims, TAU, form)  # type: ignore[arg-type]
    p_o, p_d = paper_probs(sims.tolist(), TAU, EPS[form])
    assert_close(got, [(p_o[i][i] + p_d[i][i]) / 2 for i in range(5)])
    assert not got.requires_grad


# ---------------------------------------------------------------- edge cases and numerics


def extreme_sims() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    signs = torch.randint(0, 2, (4, 4), generator=g).float() * 2 - 1
    neg = torch.full((4, 4), -50.0)
    neg[0, 1] = 50.0
    return {
        "zeros": torch.zeros(4, 4),
        "identity": torch.eye(4),
        "anti_identity": 1 - torch.eye(4),
        "logits_pm50": 50.0 * signs,
        "negative_dominates": neg,
        "all_-50": torch.full((4, 4), -50.0),
    }


@pytest.mark.parametrize("form", ["paper", "official"])
@pytest.mark.parametrize("name", list(extreme_sims()))
def test_values_and_gradients_finite_on_extreme_sims(form: str, name: str) -> None:
    sims = extreme_sims()[name].clone().requires_grad_()
    y = torch.tensor([0.0, 0.3, 0.9, 1.0])
    loss = active_complementary_loss(sims, y, TAU, form=form)  # type: ignore[arg-type]
    assert torch.isfinite(loss).all(), loss
    loss.mean().backward()
    assert sims.grad is not None and torch.isfinite(sims.grad).all()


def test_gradient_flows_into_sims_not_labels_and_half_precision() -> None:
    sims = rand_sims(3, 14).float().requires_grad_()
    y = torch.tensor([0.2, 0.5, 1.0], requires_grad=True)
    active_complementary_loss(sims, y).sum().backward()
    assert y.grad is None and sims.grad is not None and sims.grad.abs().sum() > 0
    half = active_complementary_loss(rand_sims(3, 14).half(), torch.tensor([0.2, 0.5, 1.0]))
    assert half.dtype == torch.float32 and torch.isfinite(half).all()


def test_positive_pairs_lower_the_loss() -> None:
    # a sanity property of ACL: raising every diagonal similarity lowers every term
    sims, y = rand_sims(5, 15), torch.full((5,), 0.5, dtype=torch.float64)
    better = sims + torch.eye(5, dtype=torch.float64)
    assert bool((active_complementary_loss(better, y) < active_complementary_loss(sims, y)).all())


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"labels": torch.ones(3)}, "shape"),
        ({"labels": torch.tensor([0.5, 1.5, 0.0, 0.2])}, r"\[0, 1\]"),
        ({"labels": torch.tensor([0.5, float("nan"), 0.0, 0.2])}, r"\[0, 1\]"),
        ({"labels": torch.ones(4, dtype=torch.long)}, "floating"),
        ({"form": "code"}, "form"),
        ({"q": 1.5}, "q"),
        ({"weight": -1.0}, "weight"),
        ({"tau": 0.0}, "tau"),
        ({"sims": torch.zeros(4, 3)}, "square"),
    ],
)
def test_rejects_bad_arguments(kwargs: dict, match: str) -> None:
    args = {"sims": torch.zeros(4, 4), "labels": torch.ones(4), **kwargs}
    with pytest.raises(ValueError, match=match):
        active_complementary_loss(**args)


def test_robust_loss_rejects_bad_q() -> None:
    with pytest.raises(ValueError, match="q"):
        robust_complementary_loss(torch.zeros(3, 3), None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape"):
        robust_complementary_loss(torch.zeros(3, 3), torch.zeros(2))
