"""Matching probabilities and InfoNCE against loop transcriptions of RCL Eq. 1-2 / Eq. 8."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ncl.losses import info_nce, log_matching_probabilities


def infonce_loss(sims: torch.Tensor, tau: float = 0.05, eps: float = 1e-10) -> torch.Tensor:
    """RCL's per-sample CL (Eq. 8) through the one InfoNCE."""
    return info_nce(sims, tau, eps=eps).loss


Matrix = list[list[float]]


def ref_probs(s: Matrix, tau: float, eps: float) -> tuple[Matrix, Matrix]:
    """P_i2t[i][j] = E_ij / (sum_k E_ik + eps); P_t2i[i][j] = E_ji / (sum_k E_ki + eps)."""
    b = len(s)
    e = [[math.exp(v / tau) for v in row] for row in s]
    i2t = [[e[i][j] / (sum(e[i]) + eps) for j in range(b)] for i in range(b)]
    t2i = [[e[j][i] / (sum(e[k][i] for k in range(b)) + eps) for j in range(b)] for i in range(b)]
    return i2t, t2i


def rand_sims(b: int, seed: int) -> torch.Tensor:
    return torch.rand(b, b, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("b", [4, 5])
@pytest.mark.parametrize("tau,eps", [(0.05, 1e-10), (0.2, 0.0), (0.05, 1e3)])
def test_log_probabilities_match_loops(b: int, tau: float, eps: float) -> None:
    sims = rand_sims(b, b)
    log_i2t, log_t2i = log_matching_probabilities(sims, tau, eps)
    ri, rt = ref_probs(sims.tolist(), tau, eps)
    assert torch.allclose(log_i2t.exp(), torch.tensor(ri, dtype=torch.float64), rtol=1e-10, atol=0)
    assert torch.allclose(log_t2i.exp(), torch.tensor(rt, dtype=torch.float64), rtol=1e-10, atol=0)


@pytest.mark.parametrize("b", [4, 5])
@pytest.mark.parametrize("eps", [1e-10, 0.0, 50.0])
def test_infonce_matches_loops(b: int, eps: float) -> None:
    sims = rand_sims(b, 20 + b)
    ri, rt = ref_probs(sims.tolist(), 0.05, eps)
    want = [-math.log(ri[i][i]) - math.log(rt[i][i]) for i in range(b)]
    got = infonce_loss(sims, 0.05, eps)
    assert got.shape == (b,)
    assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), rtol=1e-10, atol=0)
    # official scalar: -mean_i log P_i2t[i,i] - mean_i log P_t2i[i,i] == mean of per-sample
    official = -sum(math.log(ri[i][i]) for i in range(b)) / b
    official -= sum(math.log(rt[i][i]) for i in range(b)) / b
    assert got.mean().item() == pytest.approx(official, rel=1e-12)


def test_infonce_eps0_is_symmetric_cross_entropy() -> None:
    sims = rand_sims(5, 3)
    target = torch.arange(5)
    want = F.cross_entropy(sims / 0.1, target, reduction="none") + F.cross_entropy(
        sims.t() / 0.1, target, reduction="none"
    )
    assert torch.allclose(infonce_loss(sims, 0.1, 0.0), want, rtol=1e-12)


def test_eps_regime_where_official_underflows() -> None:
    # Every exp(S/tau) = exp(-1000) underflows: official P = 0/(0+eps) = 0 and -log P = inf.
    # Here P is 0 too, but the log is analytic: -(z_ii - log(B e^-1000 + eps)) ~ 1000 + log(eps).
    sims = torch.full((4, 4), -50.0, dtype=torch.float64)
    log_i2t, _ = log_matching_probabilities(sims, 0.05, 1e-10)
    assert bool((log_i2t.exp() == 0).all())
    want = 2 * (1000.0 + math.log(1e-10))
    want_t = torch.full((4,), want, dtype=torch.float64)
    assert torch.allclose(infonce_loss(sims, 0.05, 1e-10), want_t)


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match="tau"):
        infonce_loss(torch.rand(3, 3), tau=0.0)
    with pytest.raises(ValueError, match="eps"):
        infonce_loss(torch.rand(3, 3), eps=-1.0)
    with pytest.raises(ValueError, match="sims"):
        infonce_loss(torch.rand(3))
