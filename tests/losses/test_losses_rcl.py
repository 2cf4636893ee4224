"""RCL's CCL (Eq. 14-18), negative sampling and ablation losses against loop transcriptions."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.losses import (
    RCL_ABLATION_REDUCTION,
    complementary_contrastive_loss,
    RCL_EPS,
    info_nce,
    matching_probabilities,
    num_negatives_from_ratio,
    rcl_ablation_loss,
    sample_negatives,
    single_negative_loss,
    triplet_loss,
)

TAU = 0.05


Matrix = list[list[float]]


def ref_probs(s: Matrix, tau: float, eps: float) -> tuple[Matrix, Matrix]:
    b = len(s)
    e = [[math.exp(v / tau) for v in row] for row in s]
    i2t = [[e[i][j] / (sum(e[i]) + eps) for j in range(b)] for i in range(b)]
    t2i = [[e[j][i] / (sum(e[k][i] for k in range(b)) + eps) for j in range(b)] for i in range(b)]
    return i2t, t2i


def ref_phi(kind: str, p: float, q: float, eps: float) -> float:
    if kind == "log":  # Eq. 15 (+eps as in the code)
        return -math.log(1.0 - p + eps)
    if kind == "exp":  # Eq. 16
        return math.exp(-(1.0 - p))
    if kind == "gce":  # Eq. 17 (+eps as in the code)
        return (1.0 - (1.0 - p + eps) ** q) / q
    if kind == "tan":  # Eq. 18
        return math.tan(p)
    return p  # Eq. 14, MAE


def ref_ccl(
    s: Matrix, kind: str, mask: list[list[bool]], q: float = 0.2, eps: float = 1e-10
) -> list[float]:
    """l_i = sum_{j in Omega_i} phi(P_i2t[i][j]) + phi(P_t2i[i][j])."""
    i2t, t2i = ref_probs(s, TAU, eps)
    b = len(s)
    return [
        sum(
            ref_phi(kind, i2t[i][j], q, eps) + ref_phi(kind, t2i[i][j], q, eps)
            for j in range(b)
            if mask[i][j]
        )
        for i in range(b)
    ]


def all_off_diagonal(b: int) -> list[list[bool]]:
    return [[i != j for j in range(b)] for i in range(b)]


def mask_of(idx: torch.Tensor, b: int) -> list[list[bool]]:
    rows = idx.tolist()
    return [[j in rows[i] for j in range(b)] for i in range(b)]


def rand_sims(b: int, seed: int) -> torch.Tensor:
    return torch.rand(b, b, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def assert_close(got: torch.Tensor, want: list[float], rtol: float = 1e-9) -> None:
    want_t = torch.tensor(want, dtype=got.dtype)
    assert torch.allclose(got, want_t, rtol=rtol, atol=1e-12), (got, want)


# ---------------------------------------------------------------- probabilities


def test_matching_probabilities_match_loops() -> None:
    sims = rand_sims(5, 0)
    p_i2t, p_t2i = matching_probabilities(sims, TAU, 1e-10)
    ri, rt = ref_probs(sims.tolist(), TAU, 1e-10)
    assert torch.allclose(p_i2t, torch.tensor(ri, dtype=torch.float64), rtol=1e-10)
    assert torch.allclose(p_t2i, torch.tensor(rt, dtype=torch.float64), rtol=1e-10)
    # p_t2i row i is column i of the image softmax: caption i querying images
    assert torch.allclose(p_t2i.sum(1), torch.ones(5, dtype=torch.float64))


# ---------------------------------------------------------------- CCL, all negatives


@pytest.mark.parametrize("kind", ["log", "exp", "gce", "tan", "mae"])
@pytest.mark.parametrize("b", [4, 5])
def test_ccl_matches_loops(kind: str, b: int) -> None:
    sims = rand_sims(b, b + 7)
    got = complementary_contrastive_loss(sims, TAU, kind, q=0.2)
    assert got.shape == (b,)
    assert_close(got, ref_ccl(sims.tolist(), kind, all_off_diagonal(b)))


@pytest.mark.parametrize("kind", ["log", "gce"])
def test_ccl_eps0_is_paper_equation(kind: str) -> None:
    sims = rand_sims(4, 1)
    got = complementary_contrastive_loss(sims, TAU, kind, q=0.5, eps=0.0)
    assert_close(got, ref_ccl(sims.tolist(), kind, all_off_diagonal(4), q=0.5, eps=0.0))


def test_ccl_mean_equals_official_reduction() -> None:
    # official: mean_i sum_j phi(P_i2t) + mean_i sum_j phi(P_t2i), two separate means
    b = 5
    sims = rand_sims(b, 3)
    ri, rt = ref_probs(sims.tolist(), TAU, 1e-10)
    m_i2t = sum(-math.log(1 - ri[i][j] + 1e-10) for i in range(b) for j in range(b) if i != j) / b
    m_t2i = sum(-math.log(1 - rt[i][j] + 1e-10) for i in range(b) for j in range(b) if i != j) / b
    got = complementary_contrastive_loss(sims, TAU, "log").mean().item()
    assert got == pytest.approx(m_i2t + m_t2i, rel=1e-10)


# ---------------------------------------------------------------- negative sampling


@pytest.mark.parametrize(
    "ratio,expected",
    [(-1.0, 7), (0.0, 7), (1.0, 7), (1.5, 7), (0.5, 4), (0.3, 2), (0.1, 0)],
)
def test_num_negatives_from_ratio(ratio: float, expected: int) -> None:
    assert num_negatives_from_ratio(8, ratio) == expected


def test_sample_negatives_properties_and_reproducibility() -> None:
    b, k = 6, 3
    idx = sample_negatives(b, k, generator=torch.Generator().manual_seed(5))
    again = sample_negatives(b, k, generator=torch.Generator().manual_seed(5))
    assert idx.shape == (b, k) and idx.dtype == torch.int64
    assert torch.equal(idx, again)
    for i, row in enumerate(idx.tolist()):
        assert i not in row and len(set(row)) == k
    full = sample_negatives(b, b - 1)
    assert [sorted(r) for r in full.tolist()] == [[j for j in range(b) if j != i] for i in range(b)]
    assert sample_negatives(b, 0).shape == (b, 0)


def test_sample_negatives_covers_every_off_diagonal() -> None:
    b = 4
    g = torch.Generator().manual_seed(0)
    seen = torch.zeros(b, b, dtype=torch.bool)
    for _ in range(100):
        idx = sample_negatives(b, 1, generator=g)
        seen[torch.arange(b), idx[:, 0]] = True
    assert torch.equal(seen, ~torch.eye(b, dtype=torch.bool))


@pytest.mark.parametrize("kind", ["log", "exp", "gce", "tan", "mae"])
def test_ccl_random_negatives_match_loops(kind: str) -> None:
    b, ratio = 5, 0.5  # int(0.5 * 5) = 2 negatives per row
    sims = rand_sims(b, 11)
    idx = sample_negatives(b, 2, generator=torch.Generator().manual_seed(9))
    got = complementary_contrastive_loss(
        sims, TAU, kind, negative_ratio=ratio, generator=torch.Generator().manual_seed(9)
    )
    assert_close(got, ref_ccl(sims.tolist(), kind, mask_of(idx, b)))
    # dropping negatives must change the value (guards against ignoring the ratio)
    assert not torch.allclose(got, complementary_contrastive_loss(sims, TAU, kind))


def test_ccl_zero_negatives_gives_zero() -> None:
    out = complementary_contrastive_loss(rand_sims(5, 2), negative_ratio=0.1)  # int(0.5) = 0
    assert torch.equal(out, torch.zeros(5, dtype=torch.float64))


# ---------------------------------------------------------------- ablations (Tables 6-7)


@pytest.mark.parametrize("variant,kind", [("nl", "log"), ("mae_single", "mae")])
def test_single_negative_variants_match_loops(variant: str, kind: str) -> None:
    b = 5
    sims = rand_sims(b, 13)
    idx = sample_negatives(b, 1, generator=torch.Generator().manual_seed(3))
    got = rcl_ablation_loss(
        sims, variant, generator=torch.Generator().manual_seed(3)  # type: ignore[arg-type]
    )
    assert_close(got, ref_ccl(sims.tolist(), kind, mask_of(idx, b)))
    same = single_negative_loss(
        sims, loss=kind, generator=torch.Generator().manual_seed(3)  # type: ignore[arg-type]
    )
    assert torch.equal(got, same)


def test_ablation_dispatch() -> None:
    sims = rand_sims(5, 17)
    assert torch.equal(rcl_ablation_loss(sims, "tr", margin=0.3), triplet_loss(sims, 0.3, "sum"))
    assert torch.equal(rcl_ablation_loss(sims, "tr_hn"), triplet_loss(sims, 0.2, "hardest"))
    assert torch.equal(rcl_ablation_loss(sims, "cl", tau=0.1), info_nce(sims, 0.1, eps=RCL_EPS).loss)
    assert torch.equal(rcl_ablation_loss(sims, "ccl"), complementary_contrastive_loss(sims))
    assert set(RCL_ABLATION_REDUCTION) == {"tr", "tr_hn", "cl", "nl", "mae_single", "ccl"}


# ---------------------------------------------------------------- gradient direction


def _one_sgd_step(kind: str) -> tuple[torch.Tensor, ...]:
    """Diagonal probabilities (both directions) and mean loss before/after one SGD step."""
    torch.manual_seed(0)
    sims = torch.rand(5, 5, dtype=torch.float64, requires_grad=True)
    before = torch.stack([p.diagonal().detach() for p in matching_probabilities(sims, TAU)])
    loss_before = complementary_contrastive_loss(sims, TAU, kind).mean()  # type: ignore
    loss_before.backward()
    with torch.no_grad():
        sims -= 1e-3 * sims.grad
        after = torch.stack([p.diagonal() for p in matching_probabilities(sims, TAU)])
        loss_after = complementary_contrastive_loss(sims, TAU, kind).mean()  # type: ignore
    return before, after, loss_before.detach(), loss_after, sims.grad


def test_log_ccl_step_raises_every_diagonal_probability() -> None:
    before, after, loss_before, loss_after, grad = _one_sgd_step("log")
    # every off-diagonal mass 1 - P_ii shrinks, in both directions, for every sample
    assert bool((after > before).all())
    assert loss_after < loss_before
    # no positive term, yet the diagonal is pushed up through the normalisation
    assert bool((grad.diagonal() < 0).all())


@pytest.mark.parametrize("kind", ["exp", "gce", "tan", "mae"])
def test_other_bounds_step_raise_mean_diagonal_share(kind: str) -> None:
    # for the flatter bounds a single sample's share may dip; the batch mean must rise
    before, after, loss_before, loss_after, grad = _one_sgd_step(kind)
    assert after.mean() > before.mean()
    assert loss_after < loss_before
    assert bool((grad.diagonal() < 0).all())


# ---------------------------------------------------------------- bad input


def test_bad_inputs_raise() -> None:
    sims = torch.rand(4, 4)
    with pytest.raises(ValueError, match="loss"):
        complementary_contrastive_loss(sims, loss="ce")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="q"):
        complementary_contrastive_loss(sims, loss="gce", q=0.0)
    with pytest.raises(ValueError, match="tau"):
        complementary_contrastive_loss(sims, tau=-1.0)
    with pytest.raises(ValueError, match="variant"):
        rcl_ablation_loss(sims, "ce")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_negatives"):
        sample_negatives(4, 4)
    with pytest.raises(ValueError, match="B >= 2"):
        single_negative_loss(torch.rand(1, 1))
