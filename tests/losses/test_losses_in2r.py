"""IN2R's losses against the official formulas (``vse.py``: ``infonce`` and
``ContrastiveLoss(mode="train")``; ``co_train.py``: the labelled and rectification losses),
transcribed here with exp, log and explicit loops over list matrices."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.losses.in2r import labelled_loss, rectified_loss, warmup_loss
from ncl.losses.l2rm import rce_warmup_loss


def official_infonce(s: list[list[float]], tau: float = 0.05, eps: float = 1e-7) -> float:
    """``infonce``: row softmaxes of ``exp(S / tau)`` both ways, the reverse cross-entropy
    against ``log(I + eps)`` and the cross-entropy of the diagonal, halved."""
    n = len(s)
    e = [[math.exp(v / tau) for v in row] for row in s]
    i2t = [[e[i][j] / sum(e[i]) for j in range(n)] for i in range(n)]
    cols = [[e[j][i] for j in range(n)] for i in range(n)]  # rows of S^T
    t2i = [[cols[i][j] / sum(cols[i]) for j in range(n)] for i in range(n)]
    log_mask = [[math.log((1.0 if i == j else 0.0) + eps) for j in range(n)] for i in range(n)]
    rce_i2t = -sum(log_mask[i][j] * i2t[i][j] for i in range(n) for j in range(n)) / n
    rce_t2i = -sum(log_mask[i][j] * t2i[i][j] for i in range(n) for j in range(n)) / n
    ce_i2t = -sum(math.log(i2t[i][i]) for i in range(n)) / n
    ce_t2i = -sum(math.log(t2i[i][i]) for i in range(n)) / n
    return 0.5 * (rce_i2t + rce_t2i + ce_i2t + ce_t2i)


def official_hardest(s: list[list[float]], margin: float) -> float:
    """``ContrastiveLoss(mode="train", hard_negative=True)``: per row the largest
    ``[m + S_ij - S_ii]_+`` and per column the largest ``[m + S_ij - S_jj]_+`` (diagonals set
    to 0), summed."""
    n = len(s)
    rows = sum(max([0.0] + [max(0.0, margin + s[i][j] - s[i][i]) for j in range(n) if j != i])
               for i in range(n))
    cols = sum(max([0.0] + [max(0.0, margin + s[i][j] - s[j][j]) for i in range(n) if i != j])
               for j in range(n))
    return rows + cols


def unit_rows(generator: torch.Generator, n: int, dim: int) -> torch.Tensor:
    x = torch.randn(n, dim, generator=generator, dtype=torch.float64)
    return x / x.norm(dim=1, keepdim=True)


def as_lists(x: torch.Tensor) -> list[list[float]]:
    return [[float(v) for v in row] for row in x]


S = [[0.9, 0.2, 0.4], [0.3, 0.8, 0.1], [0.5, 0.6, 0.7]]


def test_infonce_is_rce_plus_ce_at_tau_005() -> None:
    got = rce_warmup_loss(torch.tensor(S, dtype=torch.float64))
    assert float(got) == pytest.approx(official_infonce(S), rel=1e-9)
    transposed = rce_warmup_loss(torch.tensor(S, dtype=torch.float64).t())
    assert float(transposed) == pytest.approx(float(got), rel=1e-12)
    # a 2 x 2 case in closed form at tau 1: P_00 = 1 / (1 + e^(0.2 - 0.9)), ...
    two = [[0.9, 0.2], [0.3, 0.8]]
    p00, p11 = 1 / (1 + math.exp(-0.7)), 1 / (1 + math.exp(-0.5))  # row softmax diagonals
    t00, t11 = 1 / (1 + math.exp(-0.6)), 1 / (1 + math.exp(-0.6))  # column softmax diagonals
    log_eps, log_one = math.log(1e-7), math.log(1 + 1e-7)
    rce = -(log_one * (p00 + p11 + t00 + t11) + log_eps * (4 - p00 - p11 - t00 - t11)) / 2
    ce = -(math.log(p00) + math.log(p11) + math.log(t00) + math.log(t11)) / 2
    want = 0.5 * (rce + ce)
    got_two = rce_warmup_loss(torch.tensor(two, dtype=torch.float64), tau=1.0)
    assert float(got_two) == pytest.approx(want, rel=1e-6)


def test_warmup_loss_adds_the_two_cross_view_matrices() -> None:
    g = torch.Generator().manual_seed(0)
    i1, i2, c1, c2 = (unit_rows(g, 4, 6) for _ in range(4))
    terms = warmup_loss((i1, i2), (c1, c2))
    assert float(terms["pair"]) == pytest.approx(official_infonce(as_lists(i1 @ c1.t())), rel=1e-9)
    assert float(terms["image"]) == pytest.approx(official_infonce(as_lists(i1 @ i2.t())), rel=1e-9)
    assert float(terms["caption"]) == pytest.approx(official_infonce(as_lists(c1 @ c2.t())), rel=1e-9)
    assert set(warmup_loss((i1, i2), (c1, c2), intra=False)) == {"pair"}


def test_labelled_loss_is_three_summed_hardest_triplets() -> None:
    assert official_hardest([[0.9, 0.2], [0.3, 0.8]], 0.2) == pytest.approx(0.0)
    # by hand: rows [0.2 + 0.85 - 0.9]_+ = 0.15 and [0.2 + 0.3 - 0.8]_+ = 0; columns
    # [0.2 + 0.3 - 0.9]_+ = 0 and [0.2 + 0.85 - 0.8]_+ = 0.25
    assert official_hardest([[0.9, 0.85], [0.3, 0.8]], 0.2) == pytest.approx(0.4)
    g = torch.Generator().manual_seed(1)
    i1, i2, c1, c2 = (unit_rows(g, 5, 3) for _ in range(4))
    terms = labelled_loss((i1, i2), (c1, c2))
    assert float(terms["pair"]) == pytest.approx(official_hardest(as_lists(i1 @ c1.t()), 0.2), rel=1e-12)
    assert float(terms["image"]) == pytest.approx(official_hardest(as_lists(i1 @ i2.t()), 0.3), rel=1e-12)
    assert float(terms["caption"]) == pytest.approx(official_hardest(as_lists(c1 @ c2.t()), 0.3), rel=1e-12)
    sims = torch.tensor([[0.9, 0.85], [0.3, 0.8]], dtype=torch.float64)
    one = torch.eye(2, dtype=torch.float64)  # I1 = identity, C1 = S^T: I1 C1^T = S
    assert float(labelled_loss((one, one), (sims.t().contiguous(), one), intra=False)["pair"]) == pytest.approx(0.4)


def test_rectified_loss_is_half_infonce_of_queries_against_targets() -> None:
    g = torch.Generator().manual_seed(2)
    queries, targets = unit_rows(g, 4, 5), unit_rows(g, 4, 5)
    got = rectified_loss(queries, targets)
    assert float(got) == pytest.approx(0.5 * official_infonce(as_lists(queries @ targets.t())), rel=1e-9)
    assert float(rectified_loss(queries, targets, weight=0.0)) == 0.0


def test_gradient_flows_into_queries_and_targets() -> None:
    g = torch.Generator().manual_seed(3)
    queries = unit_rows(g, 3, 4).requires_grad_()
    targets = unit_rows(g, 3, 4).requires_grad_()
    rectified_loss(queries, targets).backward()
    assert queries.grad is not None and float(queries.grad.abs().sum()) > 0
    assert targets.grad is not None and float(targets.grad.abs().sum()) > 0
