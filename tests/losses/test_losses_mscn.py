"""MSCN's losses by value (ncl.losses.mscn): adaptive margins, the adaptive-margin
hardest-negative triplet in both margin readings, the meta BCE."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.losses.mscn import adaptive_margins, adaptive_triplet, meta_bce


def test_adaptive_margins_by_hand() -> None:
    # s(p) = 1 / (1 + (p / (1 - p))^-2): p = 0.5 -> 1/2, p = 0.75 -> 1 / (1 + 1/9) = 0.9,
    # p = 0.2 -> 1 / (1 + 16) = 1/17
    p = torch.tensor([0.5, 0.75, 0.2], dtype=torch.float64)
    got = adaptive_margins(p, 0.2)
    want = torch.tensor([0.1, 0.18, 0.2 / 17], dtype=torch.float64)
    assert torch.allclose(got, want, rtol=0, atol=1e-12)


S = torch.tensor([[0.9, 0.5, 0.1],
                  [0.3, 0.6, 0.7],
                  [0.2, 0.4, 0.8]], dtype=torch.float64)
M = torch.tensor([0.1, 0.2, 0.05], dtype=torch.float64)


def by_hand(index: str) -> list[float]:
    """Per position i: max_j [m + S_ij - S_ii]_+ (j != i) + max_i' [m_i + S_i'i - S_ii]_+."""
    n = 3
    out = []
    for i in range(n):
        cs = max(max(0.0, (M[j] if index == "column" else M[i]) + S[i, j] - S[i, i])
                 for j in range(n) if j != i)
        ci = max(max(0.0, M[i] + S[r, i] - S[i, i]) for r in range(n) if r != i)
        out.append(float(cs + ci))
    return out


@pytest.mark.parametrize("index", ["column", "anchor"])
def test_adaptive_triplet_by_hand(index: str) -> None:
    got = adaptive_triplet(S, M, index)
    assert got.tolist() == pytest.approx(by_hand(index), abs=1e-12)


def test_the_two_readings_differ_here() -> None:
    # row 1: column reading uses caption 2's margin 0.05 (0.05 + 0.7 - 0.6), anchor 0.2
    assert adaptive_triplet(S, M, "column")[1] != adaptive_triplet(S, M, "anchor")[1]
    assert float(adaptive_triplet(S, M, "column").sum()) == pytest.approx(sum(by_hand("column")))


def test_meta_bce_by_hand() -> None:
    probs = torch.tensor([0.9, 0.2, 0.6])
    labels = torch.tensor([1.0, 0.0, 0.0])
    want = -(math.log(0.9) + math.log(0.8) + math.log(0.4)) / 3
    assert float(meta_bce(probs, labels)) == pytest.approx(want, rel=1e-6)


def test_shapes_checked() -> None:
    with pytest.raises(ValueError):
        adaptive_triplet(S, M[:2])
    with pytest.raises(ValueError):
        meta_bce(torch.rand(3), torch.ones(2))
