"""DECL's losses (spec 4.6.2-4.6.4) against direct, loop-by-loop transcriptions of the spec's
formulas in Python floats (math.lgamma / a series digamma), on small matrices."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.losses.decl import (
    correspondence_statistics,
    dirichlet_kl_to_uniform,
    edl_loss,
    edl_row_loss,
    evidence,
    hardness,
    rdh_loss,
    reduce_rdh,
)


def digamma(x: float) -> float:
    """psi(x) by recurrence up to x >= 20 and the asymptotic series (error < 1e-12)."""
    acc = 0.0
    while x < 20.0:
        acc -= 1.0 / x
        x += 1.0
    inv = 1.0 / x
    inv2 = inv * inv
    return acc + math.log(x) - 0.5 * inv - inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 / 252))


def spec_row_loss(alpha: list[float], y: list[float], lambda2: float) -> float:
    """Spec 4.6.2 for one row, literally: A + B + lambda2 * KL(Dir(alpha~) || Dir(1))."""
    k, s = len(alpha), sum(alpha)
    a = sum((yj - aj / s) ** 2 for aj, yj in zip(alpha, y))
    b = sum(aj * (s - aj) / (s * s * (s + 1)) for aj in alpha)
    at = [(aj - 1) * (1 - yj) + 1 for aj, yj in zip(alpha, y)]
    st = sum(at)
    kl = (math.lgamma(st) - sum(math.lgamma(x) for x in at) - math.lgamma(k)
          + sum((x - 1) * (digamma(x) - digamma(st)) for x in at))
    return a + b + lambda2 * kl


def spec_rdh(t: list[list[float]], k: int, margin: float) -> list[float]:
    """Spec 4.6.3 per sample on T = tanh(Z): top-k of row i of C_s and column i of C_im."""
    n = len(t)
    out = []
    for i in range(n):
        row = sorted((max(0.0, margin + t[i][j] - t[i][i]) if j != i else 0.0 for j in range(n)),
                     reverse=True)
        col = sorted((max(0.0, margin + t[r][i] - t[i][i]) if r != i else 0.0 for r in range(n)),
                     reverse=True)
        out.append((sum(row[:k]) + sum(col[:k])) / k)
    return out


@pytest.fixture
def logits() -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    return torch.randn(6, 6, generator=g, dtype=torch.float64) * 1.5


def test_evidence_range_and_value() -> None:
    z = torch.tensor([[0.0, 100.0, -100.0]], dtype=torch.float64)
    e = evidence(z, tau=0.1)
    assert e[0, 0] == 1.0
    assert e[0, 1].item() == pytest.approx(math.exp(10.0))
    assert e[0, 2].item() == pytest.approx(math.exp(-10.0))


@pytest.mark.parametrize("noisy_rows", [(), (1, 4), tuple(range(6))])
def test_edl_matches_spec_transcription(logits: torch.Tensor, noisy_rows: tuple[int, ...]) -> None:
    e = evidence(logits, 0.1)
    y = torch.eye(6, dtype=torch.float64)
    for i in noisy_rows:
        y[i] = 0.0
    got = edl_loss(e, y, lambda2=0.1)
    for i in range(6):
        want = (spec_row_loss((e[i] + 1).tolist(), y[i].tolist(), 0.1)
                + spec_row_loss((e[:, i] + 1).tolist(), y[i].tolist(), 0.1))
        assert got[i].item() == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_edl_kl_weight_scales_only_the_kl(logits: torch.Tensor) -> None:
    alpha = evidence(logits, 0.1) + 1
    y = torch.eye(6, dtype=torch.float64)
    full, none = edl_row_loss(alpha, y, 0.1, 1.0), edl_row_loss(alpha, y, 0.1, 0.0)
    half = edl_row_loss(alpha, y, 0.1, 0.5)
    assert torch.allclose(half, (full + none) / 2)
    assert torch.allclose(full - none, 0.1 * dirichlet_kl_to_uniform((alpha - 1) * (1 - y) + 1))


def test_kl_is_exact_at_the_largest_evidence_and_batch() -> None:
    """Evidence e^10 everywhere in a 128-wide row: float32 input, float64 arithmetic."""
    alpha = torch.full((2, 128), math.exp(10.0) + 1.0, dtype=torch.float32)
    alpha[1, :64] = math.exp(-10.0) + 1.0
    got = dirichlet_kl_to_uniform(alpha)
    assert got.dtype == torch.float32
    for r in range(2):
        a = alpha[r].double().tolist()
        s = sum(a)
        want = (math.lgamma(s) - sum(math.lgamma(x) for x in a) - math.lgamma(128)
                + sum((x - 1) * (digamma(x) - digamma(s)) for x in a))
        assert got[r].item() == pytest.approx(want, rel=1e-6)
        assert got[r].item() >= 0.0
    assert torch.isfinite(edl_loss(torch.full((128, 128), math.exp(10.0)),
                                   torch.eye(128), 0.1)).all()


def test_kl_of_the_uniform_dirichlet_is_zero() -> None:
    assert dirichlet_kl_to_uniform(torch.ones(3, 7)).abs().max() < 1e-12


@pytest.mark.parametrize("k", [1, 2, 5, 6])
def test_rdh_matches_spec_transcription(logits: torch.Tensor, k: int) -> None:
    got = rdh_loss(logits, k, margin=0.2)
    want = spec_rdh(torch.tanh(logits).tolist(), k, 0.2)
    assert got.tolist() == pytest.approx(want, rel=1e-12)


def test_rdh_of_a_batch_smaller_than_k_uses_b_minus_one(logits: torch.Tensor) -> None:
    k = hardness(step=1, batch_size=128, actual_batch=6)
    assert k == 5
    assert rdh_loss(logits, k).tolist() == pytest.approx(spec_rdh(torch.tanh(logits).tolist(), 5, 0.2))


def test_rdh_reduction_and_all_noisy_prediction(logits: torch.Tensor) -> None:
    per_pair = rdh_loss(logits.requires_grad_(), 3)
    keep = torch.tensor([True, False, True, False, False, True])
    assert reduce_rdh(per_pair, keep, 0.8).item() == pytest.approx(0.8 * per_pair[keep].sum().item())
    assert reduce_rdh(per_pair, keep, 0.8, "mean").item() == pytest.approx(0.8 * per_pair[keep].mean().item())
    none = reduce_rdh(per_pair, torch.zeros(6, dtype=torch.bool), 0.8)
    assert none.item() == 0.0 and none.requires_grad  # all predicted noisy: RDH is 0


@pytest.mark.parametrize(("step", "want"), [(1, 127), (4720, 10), (4920, 5), (5000, 5)])
def test_hardness_schedule(step: int, want: int) -> None:
    """k = max(int(128 - 0.025 step), 5): 127.975 -> 127, 10, then the floor mu = 5."""
    assert hardness(step, 128, 128, eta=0.025, mu=5) == want


def test_hardness_smaller_batch_and_actual_batch_start() -> None:
    assert hardness(100, 128, 16) == 15  # k = 125 > B: B - 1
    assert hardness(100, 16, 16) == 13  # from the actual batch: int(16 - 2.5)


def test_correspondence_statistics() -> None:
    e = torch.tensor([[5.0, 1.0, 0.5], [6.0, 2.0, 0.1], [0.2, 0.3, 9.0]], dtype=torch.float64)
    out = correspondence_statistics(e)
    joint = e + e.t()
    norm = joint / joint.sum(1, keepdim=True)
    assert out[:, 0].tolist() == [1.0, 0.0, 1.0]  # row 1's largest is column 0
    assert out[:, 1].tolist() == pytest.approx([3 / (e[i].sum().item() + 3) for i in range(3)])
    assert out[:, 2].tolist() == pytest.approx([3 / (e[:, i].sum().item() + 3) for i in range(3)])
    assert out[:, 3].tolist() == pytest.approx(norm.diagonal().tolist())


#: Raw scores whose large entries all saturate float32's tanh (it is exactly 1 above about
#: 9.02) but not float64's: row 0's 10 and 12, row 1's 12 and 15.
SATURATED = [[10.0, 12.0, -20.0],
             [12.0, 15.0, -20.0],
             [-20.0, -20.0, 5.0]]


def test_prediction_of_saturated_rows_depends_on_the_precision() -> None:
    """Float32 (the official code's precision): every saturated entry has evidence exp(10), so
    N's row 0 ties between columns 0 and 1 (2 exp(10) each) and the first maximum, column 0,
    keeps pair 0; row 1 ties the same way and column 0 wins, so pair 1 is predicted noisy. In
    float64, tanh(10) < tanh(12) < tanh(15): row 0's maximum is column 1 (noisy), row 1's is
    column 1 (clean). Row 2's own evidence exp(tanh(5)/0.1) dwarfs exp(-10): clean both ways."""
    z = torch.tensor(SATURATED)
    official = correspondence_statistics(evidence(z.float(), 0.1))
    assert official.dtype == torch.float64
    assert official[:, 0].tolist() == [1.0, 0.0, 1.0]
    wide = correspondence_statistics(evidence(z.double(), 0.1))
    assert wide[:, 0].tolist() == [0.0, 1.0, 1.0]
    # float32 uncertainty of row 0 by hand: evidence exp(10), exp(10), exp(-10), K = 3
    sat, low = math.exp(10.0), math.exp(-10.0)
    assert official[0, 1].item() == pytest.approx(3 / (2 * sat + low + 3), rel=1e-6)
    assert official[0, 3].item() == pytest.approx(2 * sat / (4 * sat + 2 * low), rel=1e-6)
    with pytest.raises(ValueError, match="float32 or float64"):
        correspondence_statistics(evidence(z.half(), 0.1))


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="k"):
        rdh_loss(torch.zeros(3, 3), 4)
    with pytest.raises(ValueError, match="alpha"):
        edl_row_loss(torch.ones(2, 3), torch.ones(3, 2), 0.1)
