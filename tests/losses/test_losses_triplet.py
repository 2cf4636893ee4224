"""Triplet and soft-margin losses versus loop transcriptions (spec 4.2.1, 4.2.7; LNC Eq. 10-11)."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.losses import (
    hinge_matrices,
    soft_margin,
    soft_margin_triplet_loss,
    triplet_loss,
)

# ---------------------------------------------------------------- independent references


def ref_hinge(s: list[list[float]], m_s, m_im) -> tuple[list[list[float]], list[list[float]]]:
    """C_s[i][j] = max(0, m_s(i,j) + S_ij - S_ii), C_im[i][j] = max(0, m_im(i,j) + S_ij - S_jj)."""
    b = len(s)
    cs = [[0.0] * b for _ in range(b)]
    cim = [[0.0] * b for _ in range(b)]
    for i in range(b):
        for j in range(b):
            if i != j:
                cs[i][j] = max(0.0, m_s(i, j) + s[i][j] - s[i][i])
                cim[i][j] = max(0.0, m_im(i, j) + s[i][j] - s[j][j])
    return cs, cim


def ref_aggregate(cs, cim, negatives: str) -> list[float]:
    b = len(cs)
    out = []
    for i in range(b):
        row = [cs[i][j] for j in range(b)]
        col = [cim[r][i] for r in range(b)]
        if negatives == "hardest":
            out.append(max(row) + max(col))
        elif negatives == "sum":
            out.append(sum(row) + sum(col))
        else:
            out.append(sum(row) / b + sum(col) / b)
    return out


def rand_sims(b: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, b, generator=g, dtype=torch.float64)


def close(a: torch.Tensor, b: list, tol: float = 1e-9) -> None:
    want = torch.tensor(b, dtype=torch.float64)
    assert torch.allclose(a.double(), want, atol=tol, rtol=0), (a, b)


# ---------------------------------------------------------------- hinge matrices


@pytest.mark.parametrize("shape", ["scalar", "col", "row", "full", "0d"])
def test_hinge_matrices_match_loops(shape: str) -> None:
    b = 5
    sims = rand_sims(b, 0)
    g = torch.Generator().manual_seed(1)
    if shape == "scalar":
        margin, m = 0.2, (lambda i, j: 0.2)
    elif shape == "0d":
        margin, m = torch.tensor(0.3, dtype=torch.float64), (lambda i, j: 0.3)
    else:
        full = torch.rand(b, b, generator=g, dtype=torch.float64) * 0.4
        if shape == "col":
            margin = full[:, :1]
            m = lambda i, j: float(full[i, 0])  # noqa: E731
        elif shape == "row":
            margin = full[:1, :]
            m = lambda i, j: float(full[0, j])  # noqa: E731
        else:
            margin = full
            m = lambda i, j: float(full[i, j])  # noqa: E731
    cs, cim = hinge_matrices(sims, margin)
    rcs, rcim = ref_hinge(sims.tolist(), m, m)
    close(cs, rcs)
    close(cim, rcim)


@pytest.mark.parametrize("negatives", ["hardest", "sum", "mean"])
@pytest.mark.parametrize("b", [4, 5])
def test_triplet_loss_matches_loops(negatives: str, b: int) -> None:
    sims = rand_sims(b, b)
    out = triplet_loss(sims, 0.2, negatives)
    cs, cim = ref_hinge(sims.tolist(), lambda i, j: 0.2, lambda i, j: 0.2)
    assert out.shape == (b,)
    close(out, ref_aggregate(cs, cim, negatives))


def test_triplet_loss_hand_computed() -> None:
    # S = [[0.5, 0.6, 0.1], [0.2, 0.4, 0.3], [0.0, 0.3, 0.9]], margin 0.2
    sims = torch.tensor([[0.5, 0.6, 0.1], [0.2, 0.4, 0.3], [0.0, 0.3, 0.9]], dtype=torch.float64)
    # C_s (anchor image i): row0: [., .3, 0], row1: [0, ., .1], row2: [0, 0, .]
    # C_im (anchor caption j, column j): col0: [., 0, 0], col1: [.4, ., .1], col2: [0, 0, .]
    close(triplet_loss(sims, 0.2, "hardest"), [0.3 + 0.0, 0.1 + 0.4, 0.0 + 0.0])
    close(triplet_loss(sims, 0.2, "sum"), [0.3, 0.1 + 0.5, 0.0])
    close(triplet_loss(sims, 0.2, "mean"), [0.3 / 3, 0.6 / 3, 0.0])  # divides by B = 3


def test_triplet_gradient_with_all_hinges_active() -> None:
    # A huge margin makes every off-diagonal hinge active: each S_ii then gets exactly -(B-1)
    # from C_s row i and -(B-1) from C_im column i, each S_ij +1 from either matrix.
    b = 4
    sims = rand_sims(b, 3).requires_grad_(True)
    triplet_loss(sims, 10.0, "sum").sum().backward()
    want = torch.full((b,), -2.0 * (b - 1), dtype=torch.float64)
    assert torch.allclose(sims.grad.diagonal(), want)
    off = sims.grad[~torch.eye(b, dtype=torch.bool)]
    assert torch.allclose(off, torch.full_like(off, 2.0))


# ---------------------------------------------------------------- soft margins (Eq. 10)


def test_per_sample_vs_official_differ_on_crafted_example() -> None:
    sims = torch.tensor([[0.5, 0.45], [0.35, 0.6]], dtype=torch.float64)
    alpha = torch.tensor([0.2, 0.0], dtype=torch.float64)
    # paper: C_s[0,1] = .2+.45-.5 = .15; C_s[1,0] = 0+.35-.6 < 0;
    #        C_im[1,0] (anchor caption 0) = .2+.35-.5 = .05;
    #        C_im[0,1] (anchor caption 1) = 0+.45-.6 < 0           -> [0.20, 0.00]
    close(soft_margin_triplet_loss(sims, alpha, "per_sample"), [0.20, 0.0])
    # official, (B,1) column M_ij = a_i: C_im[1,0] = a_1+.35-.5<0; C_im[0,1] = a_0+.45-.6 = .05
    close(soft_margin_triplet_loss(sims, alpha[:, None], "official_2023"), [0.15, 0.05])
    # official with the (B,B) broadcast of that column gives the same
    full = alpha[:, None].expand(2, 2)
    close(soft_margin_triplet_loss(sims, full, "official_2023"), [0.15, 0.05])


def ref_lnc_eq10(s: list[list[float]], a: list[float]) -> list[float]:
    """LNC Eq. 10 with hardest negatives found by argmax over j != i."""
    b = len(s)
    out = []
    for i in range(b):
        jh = max((j for j in range(b) if j != i), key=lambda j: s[i][j])  # hardest caption
        vh = max((r for r in range(b) if r != i), key=lambda r: s[r][i])  # hardest image
        out.append(max(0.0, a[i] - s[i][i] + s[i][jh]) + max(0.0, a[i] - s[i][i] + s[vh][i]))
    return out


@pytest.mark.parametrize("b", [4, 5])
def test_per_sample_matches_lnc_eq10(b: int) -> None:
    sims = rand_sims(b, 10 + b)
    a = torch.rand(b, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 0.2
    want = ref_lnc_eq10(sims.tolist(), a.tolist())
    close(soft_margin_triplet_loss(sims, a, "per_sample"), want)


def test_official_2023_matrix_matches_loops() -> None:
    b = 5
    sims = rand_sims(b, 7)
    g = torch.Generator().manual_seed(4)
    w = torch.rand(b, generator=g, dtype=torch.float64)
    p = torch.rand(b, generator=g, dtype=torch.float64)
    target = w[:, None] + (1 - w[:, None]) * p[None, :]  # T_ij = w_i + (1 - w_i) P_j
    margins = soft_margin(target)  # exponential, alpha 0.2, m 10

    def m(i: int, j: int) -> float:
        t = float(w[i]) + (1 - float(w[i])) * float(p[j])
        return 0.2 * (10**t - 1) / 9

    cs, cim = ref_hinge(sims.tolist(), m, m)
    want = ref_aggregate(cs, cim, "hardest")
    close(soft_margin_triplet_loss(sims, margins, "official_2023"), want)


# ---------------------------------------------------------------- recasting functions (Eq. 11)


def test_recasting_functions_match_formulas() -> None:
    ys = [0.0, 0.1, 0.37, 0.5, 0.8, 1.0]
    y = torch.tensor(ys, dtype=torch.float64)
    close(soft_margin(y, 0.2, "linear"), [0.2 * v for v in ys])
    close(soft_margin(y, 0.2, "exponential"), [0.2 * (10**v - 1) / 9 for v in ys])
    close(soft_margin(y, 0.3, "exponential", base=2.0), [0.3 * (2**v - 1) / 1 for v in ys])
    sin_want = [0.2 * (math.sin(math.pi * v - math.pi / 2) / 2 + 0.5) for v in ys]
    close(soft_margin(y, 0.2, "sin"), sin_want)
    div = 0.62
    k = 10 + 100 * (div - 0.5)
    sig_want = [0.2 / (1 + math.exp(-k * (v - div))) for v in ys]
    close(soft_margin(y, 0.2, "sigmoid", div=div), sig_want)
    k2 = 4 + 50 * (div - 0.5)
    got = soft_margin(y, 1.0, "sigmoid", div=div, sigmoid_slope=4.0, sigmoid_slope_gain=50.0)
    close(got, [1 / (1 + math.exp(-k2 * (v - div))) for v in ys])


def test_recasting_endpoints() -> None:
    y = torch.tensor([0.0, 1.0])
    for kind in ("linear", "exponential", "sin"):
        assert torch.allclose(soft_margin(y, 0.2, kind), torch.tensor([0.0, 0.2]), atol=1e-7)
    at_div = soft_margin(torch.tensor([0.4]), 0.2, "sigmoid", div=0.4)
    assert torch.allclose(at_div, torch.tensor([0.1]))


# ---------------------------------------------------------------- bad input


def test_bad_inputs_raise() -> None:
    sims = torch.rand(3, 3)
    with pytest.raises(ValueError, match="sims"):
        triplet_loss(torch.rand(3, 4))
    with pytest.raises(ValueError, match="sims"):
        triplet_loss(torch.zeros(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="margin"):
        hinge_matrices(sims, torch.rand(3))  # 1-D is ambiguous
    with pytest.raises(ValueError, match="margin"):
        hinge_matrices(sims, torch.rand(2, 2))
    with pytest.raises(ValueError, match="negatives"):
        triplet_loss(sims, 0.2, "max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode"):
        soft_margin_triplet_loss(sims, torch.rand(3), "paper")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="soft_margins"):
        soft_margin_triplet_loss(sims, torch.rand(3, 1), "per_sample")
    with pytest.raises(ValueError, match="soft_margins"):
        soft_margin_triplet_loss(sims, torch.rand(3), "official_2023")
    with pytest.raises(ValueError, match="labels"):
        soft_margin(torch.tensor([1.2]))
    with pytest.raises(ValueError, match="div"):
        soft_margin(torch.tensor([0.5]), kind="sigmoid")
    with pytest.raises(ValueError, match="base"):
        soft_margin(torch.tensor([0.5]), base=1.0)
    with pytest.raises(ValueError, match="kind"):
        soft_margin(torch.tensor([0.5]), kind="tanh")  # type: ignore[arg-type]
