"""CREAM's InfoNCE pieces against loop transcriptions of the official ``InfoNCELoss`` formulas
(exp, sums, divisions; docs/methods/cream.md) and hand-computed filters."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.losses.cream import (batch_filter, infonce_log_losses, infonce_prediction, per_sample_infonce,
                              soft_label_infonce, soft_label_weights, step_filters)

Matrix = list[list[float]]


def sims_of(b: int, seed: int) -> torch.Tensor:
    return torch.rand(b, b, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def ref_losses(s: Matrix, t: float) -> tuple[Matrix, Matrix]:
    """Official: E = exp(S/T); L^r_ij = -log(E_ij / sum_k E_ik); L^c_ij = -log(E_ij / sum_k E_kj)."""
    b = len(s)
    e = [[math.exp(v / t) for v in row] for row in s]
    rows = [[-math.log(e[i][j] / sum(e[i])) for j in range(b)] for i in range(b)]
    cols = [[-math.log(e[i][j] / sum(e[k][j] for k in range(b))) for j in range(b)] for i in range(b)]
    return rows, cols


def ref_weights(s: Matrix, y: list[float], f: float, eps: float) -> tuple[Matrix, Matrix]:
    """Official: S° = S with a zero diagonal; W^r_ij = (1 - y_i) S°_ij / (sum_k S°_ik + eps),
    W^c_ij = (1 - y_j) S°_ij / (sum_k S°_kj + eps); below f -> 0; + diag(y)."""
    b = len(s)
    p = [[0.0 if i == j else s[i][j] for j in range(b)] for i in range(b)]
    wr = [[(1 - y[i]) * p[i][j] / (sum(p[i]) + eps) for j in range(b)] for i in range(b)]
    wc = [[(1 - y[j]) * p[i][j] / (sum(p[k][j] for k in range(b)) + eps) for j in range(b)] for i in range(b)]
    for w in (wr, wc):
        for i in range(b):
            for j in range(b):
                w[i][j] = (0.0 if w[i][j] < f else w[i][j]) + (y[i] if i == j else 0.0)
    return wr, wc


def test_per_sample_loss_and_prediction_match_loops() -> None:
    s, t = sims_of(5, 0), 0.07
    rows, cols = ref_losses(s.tolist(), t)
    expected = torch.tensor([rows[i][i] + cols[i][i] for i in range(5)], dtype=torch.float64)
    assert torch.allclose(per_sample_infonce(s, t), expected, rtol=1e-10, atol=0)
    p = torch.tensor([(math.exp(-rows[i][i]) + math.exp(-cols[i][i])) / 2 for i in range(5)],
                     dtype=torch.float64)
    assert torch.allclose(infonce_prediction(s, t), p, rtol=1e-10, atol=0)


def test_a_hand_computed_two_by_two() -> None:
    # S = [[1, 0], [0, 1]] at T = 1: every softmax of the pair is e / (e + 1)
    s = torch.eye(2, dtype=torch.float64)
    q = math.e / (math.e + 1)
    assert torch.allclose(per_sample_infonce(s, 1.0), torch.full((2,), -2 * math.log(q), dtype=torch.float64))
    assert torch.allclose(infonce_prediction(s, 1.0), torch.full((2,), q, dtype=torch.float64))


@pytest.mark.parametrize("f", [0.0, 0.05, 0.3])
def test_soft_label_weights_match_loops(f: float) -> None:
    s, y = sims_of(5, 1), [1.0, 0.2, 0.7, 0.0, 0.5]
    wr, wc = soft_label_weights(s, torch.tensor(y, dtype=torch.float64), f, 1e-6)
    er, ec = ref_weights(s.tolist(), y, f, 1e-6)
    assert torch.allclose(wr, torch.tensor(er, dtype=torch.float64), rtol=1e-12, atol=0)
    assert torch.allclose(wc, torch.tensor(ec, dtype=torch.float64), rtol=1e-12, atol=0)
    if f == 0.0:  # every row of W^r and column of W^c sums to 1 (up to eps)
        assert torch.allclose(wr.sum(1), torch.ones(5, dtype=torch.float64), atol=1e-5)
        assert torch.allclose(wc.sum(0), torch.ones(5, dtype=torch.float64), atol=1e-5)


def test_hand_weights_of_a_three_by_three() -> None:
    s = torch.tensor([[0.9, 0.2, 0.6], [0.1, 0.8, 0.3], [0.4, 0.4, 0.7]], dtype=torch.float64)
    y = torch.tensor([0.5, 1.0, 0.0], dtype=torch.float64)
    wr, wc = soft_label_weights(s, y, 0.0, 0.0)
    # row 0: (1 - 0.5) * [0, 0.2, 0.6] / 0.8 = [0, 0.125, 0.375], diagonal 0.5
    assert torch.allclose(wr[0], torch.tensor([0.5, 0.125, 0.375], dtype=torch.float64))
    assert torch.allclose(wr[1], torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64))  # y = 1
    # column 2: (1 - 0) * [0.6, 0.3, 0] / 0.9, diagonal 0
    assert torch.allclose(wc[:, 2], torch.tensor([2 / 3, 1 / 3, 0.0], dtype=torch.float64))
    wr, _ = soft_label_weights(s, y, 0.2, 0.0)  # 0.125 < 0.2 is zeroed
    assert torch.allclose(wr[0], torch.tensor([0.5, 0.0, 0.375], dtype=torch.float64))
    # a weight equal to the filter stays (official: zeroed only when strictly below)
    even = torch.tensor([[0.9, 0.5], [0.5, 0.9]], dtype=torch.float64)
    wr, wc = soft_label_weights(even, torch.zeros(2, dtype=torch.float64), 1.0, 0.0)
    assert torch.equal(wr, torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64))
    assert torch.equal(wc, wr)


def test_smooth_weights_are_uniform() -> None:
    y = torch.tensor([1.0, 0.4, 0.0, 0.7], dtype=torch.float64)
    wr, wc = soft_label_weights(sims_of(4, 2), y, 0.0, 1e-6, smooth=True)
    expected = torch.diag(y) + ((1 - y) / 3).unsqueeze(1) * (1 - torch.eye(4, dtype=torch.float64))
    assert torch.allclose(wr, expected) and torch.allclose(wc, expected.t())


def reference_loss(s: torch.Tensor, y: torch.Tensor, t: float, f: float) -> torch.Tensor:
    """The official formula step by step in torch (exp and division), for values and gradients."""
    b = s.shape[0]
    e = torch.exp(s / t)
    rows = -torch.log(e / e.sum(1, keepdim=True))
    cols = -torch.log(e / e.sum(0, keepdim=True))
    p = s * (1 - torch.eye(b, dtype=s.dtype))
    wr = (1 - y).unsqueeze(1) * p / (p.sum(1, keepdim=True) + 1e-6)
    wc = (1 - y).unsqueeze(0) * p / (p.sum(0, keepdim=True) + 1e-6)
    wr = wr * (wr >= f) + torch.diag(y)
    wc = wc * (wc >= f) + torch.diag(y)
    return (rows * wr + cols * wc).sum() / b


@pytest.mark.parametrize("f", [0.0, 0.1])
def test_soft_label_loss_and_gradient(f: float) -> None:
    s = sims_of(6, 3).requires_grad_(True)
    y = torch.tensor([1.0, 0.9, 0.3, 0.0, 0.6, 0.8], dtype=torch.float64)
    loss = soft_label_infonce(s, y, 0.07, f)
    ref = reference_loss(s, y, 0.07, f)
    assert torch.allclose(loss, ref, rtol=1e-10)
    (grad,) = torch.autograd.grad(loss, s)
    (ref_grad,) = torch.autograd.grad(ref, s)
    assert torch.allclose(grad, ref_grad, rtol=1e-8, atol=1e-12)
    # the gradient runs through the weights too (official: the weights are not detached)
    plain = s.detach().requires_grad_(True)
    w_rows, w_cols = soft_label_weights(plain, y, f)
    rows, cols = infonce_log_losses(plain, 0.07)
    frozen = ((rows * w_rows.detach()).sum() + (cols * w_cols.detach()).sum()) / 6
    assert not torch.allclose(grad, torch.autograd.grad(frozen, plain)[0], rtol=1e-6, atol=0)


def test_label_one_is_plain_infonce() -> None:
    s = sims_of(5, 4)
    loss = soft_label_infonce(s, torch.ones(5, dtype=torch.float64), 0.07, 0.0)
    assert torch.allclose(loss, per_sample_infonce(s, 0.07).mean(), rtol=1e-10)


def test_filter_is_the_size_weighted_mean() -> None:
    assert batch_filter((0.9, 0.6, 0.2), (700, 100, 200)) == pytest.approx((630 + 60 + 40) / 1000)
    assert batch_filter((0.9, 123.0, 0.2), (800, 0, 200)) == pytest.approx((720 + 40) / 1000)


def test_step_filters_by_rule() -> None:
    few = step_filters(0.3, 0.6, epoch=4, hard_start_epoch=10)
    assert (few.clean, few.hard, few.noisy) == (6.0, 0.3, 0.3)  # max(10 - 4, 0.3)
    late = step_filters(0.3, 0.6, epoch=12, hard_start_epoch=10)
    assert (late.clean, late.hard, late.noisy) == (0.3, 0.3, 0.3)
    many = step_filters(0.3, 0.86, epoch=4, hard_start_epoch=10)
    assert (many.clean, many.hard, many.noisy) == (0.0, 0.0, 0.3)
    edge = step_filters(0.3, 0.85, epoch=4, hard_start_epoch=10)  # strictly above 0.85
    assert edge.clean == 6.0
