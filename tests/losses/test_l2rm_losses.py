"""L2RM's warm-up (RCE + InfoNCE) and symmetric KL losses against plain-Python references."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.losses.l2rm import (
    rce_warmup_loss,
    rce_warmup_terms,
    symmetric_kl_loss,
    symmetric_kl_terms,
)

Matrix = list[list[float]]


# ---------------------------------------------------------------- independent references


def ref_rce_terms(s: Matrix, tau: float, eps: float) -> dict[str, float]:
    """Notes 2, term by term with math.exp / math.log (softmax then log, as the official)."""
    b = len(s)
    e = [[math.exp(v / tau) for v in row] for row in s]
    p = [[e[i][j] / sum(e[i]) for j in range(b)] for i in range(b)]  # image i -> caption j
    t = [[e[i][j] / sum(e[k][j] for k in range(b)) for i in range(b)] for j in range(b)]

    def rce(m: Matrix) -> float:
        return -sum(math.log((1.0 if i == j else 0.0) + eps) * m[i][j]
                    for i in range(b) for j in range(b)) / b

    def nce(m: Matrix) -> float:
        return -sum(math.log(m[i][i]) for i in range(b)) / b

    return {"rce_i2t": rce(p), "rce_t2i": rce(t), "nce_i2t": nce(p), "nce_t2i": nce(t)}


def ref_skl_terms(s: Matrix, plan: Matrix, tau: float, eps: float) -> dict[str, float]:
    """Notes 4.6 with lists: P, R with +eps denominators; clamped plan row/column-normalised."""
    q, b = len(s), len(s[0])
    e = [[math.exp(v / tau) for v in row] for row in s]
    p = [[e[i][j] / (sum(e[i]) + eps) for j in range(b)] for i in range(q)]  # (Q, B)
    col = [sum(e[i][j] for i in range(q)) for j in range(b)]
    r = [[e[i][j] / (col[j] + eps) for i in range(q)] for j in range(b)]  # (B, Q)
    c = [[max(v, eps) for v in row] for row in plan]
    y_i2t = [[c[i][j] / sum(c[i]) for j in range(b)] for i in range(q)]
    csum = [sum(c[i][j] for i in range(q)) for j in range(b)]
    y_t2i = [[c[i][j] / csum[j] for i in range(q)] for j in range(b)]

    def kl(a: Matrix, bb: Matrix) -> float:  # sum a (log a - log bb) over all entries
        return sum(x * (math.log(x) - math.log(y)) for ra, rb in zip(a, bb)
                   for x, y in zip(ra, rb))

    return {"kl_i2t": kl(y_i2t, p) / q, "kl_t2i": kl(y_t2i, r) / b,
            "klr_i2t": kl(p, y_i2t) / q, "klr_t2i": kl(r, y_t2i) / b}


def rand(shape: tuple[int, int], seed: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


S3 = [[0.9, 0.2, 0.4], [0.3, 0.7, 0.1], [0.5, 0.6, 0.8]]

# ---------------------------------------------------------------- RCE warm-up loss


def test_rce_closed_form_2x2():
    # S = I, tau = 1: P_ii = e / (e + 1) in both directions.
    eps = 1e-7
    p_diag = math.e / (math.e + 1)
    rce = -(2 * math.log(1 + eps) * p_diag + 2 * math.log(eps) * (1 - p_diag)) / 2
    nce = math.log(1 + math.exp(-1))
    expected = 0.5 * (2 * rce + 2 * nce)  # = rce + nce
    got = rce_warmup_loss(torch.eye(2, dtype=torch.float64), tau=1.0, eps=eps)
    assert got.item() == pytest.approx(expected, rel=1e-12)
    assert got.item() == pytest.approx(16.118 / (math.e + 1) + 0.3133, abs=1e-3)


@pytest.mark.parametrize(("tau", "eps"), [(0.05, 1e-7), (0.5, 1e-7), (0.5, 0.1)])
def test_rce_terms_match_reference_3x3(tau: float, eps: float):
    got = rce_warmup_terms(torch.tensor(S3, dtype=torch.float64), tau=tau, eps=eps)
    ref = ref_rce_terms(S3, tau, eps)
    for key, value in ref.items():
        assert got[key].item() == pytest.approx(value, rel=1e-9, abs=1e-12), key
    total = rce_warmup_loss(torch.tensor(S3, dtype=torch.float64), tau=tau, eps=eps)
    assert total.item() == pytest.approx(0.5 * sum(ref.values()), rel=1e-9)


def test_rce_float32_matches_reference():
    got = rce_warmup_loss(torch.tensor(S3), tau=0.05)
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(0.5 * sum(ref_rce_terms(S3, 0.05, 1e-7).values()), rel=1e-5)


def test_rce_batch_of_one():
    # P = T = [[1]]: both NCE terms are 0, each RCE term is -log(1 + eps).
    got = rce_warmup_loss(torch.tensor([[0.3]], dtype=torch.float64), eps=1e-7)
    assert got.item() == pytest.approx(-math.log1p(1e-7), rel=1e-9)


def test_rce_symmetric_under_transpose_and_permutation():
    s = rand((5, 5), 0)
    base = rce_warmup_terms(s)
    swapped = rce_warmup_terms(s.t())
    assert swapped["rce_i2t"].item() == pytest.approx(base["rce_t2i"].item(), rel=1e-12)
    assert swapped["nce_t2i"].item() == pytest.approx(base["nce_i2t"].item(), rel=1e-12)
    perm = torch.tensor([3, 0, 4, 1, 2])
    assert rce_warmup_loss(s[perm][:, perm]).item() == pytest.approx(rce_warmup_loss(s).item(),
                                                                     rel=1e-12)


def test_rce_extreme_logits_stay_finite():
    # Softmax-then-log would give log(0) = -inf here; log_softmax gives the exact finite value.
    s = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    got = rce_warmup_terms(s, tau=1e-3)
    assert torch.isfinite(got["nce_i2t"])
    assert got["nce_i2t"].item() == pytest.approx(1000.0, rel=1e-5)


def test_rce_gradient_flows_to_sims():
    s = rand((4, 4), 1).requires_grad_(True)
    rce_warmup_loss(s).backward()
    assert s.grad is not None and bool(torch.isfinite(s.grad).all())
    assert s.grad.diagonal().lt(0).all()  # raising a positive pair lowers the loss


@pytest.mark.parametrize(
    ("sims", "kwargs", "match"),
    [
        (torch.zeros(2, 3), {}, "sims"),
        (torch.zeros(3), {}, "sims"),
        (torch.zeros(2, 2, dtype=torch.long), {}, "sims"),
        (torch.zeros(2, 2), {"tau": 0.0}, "tau"),
        (torch.zeros(2, 2), {"tau": -1.0}, "tau"),
        (torch.zeros(2, 2), {"eps": 0.0}, "eps"),
    ],
)
def test_rce_bad_inputs(sims, kwargs, match):
    with pytest.raises(ValueError, match=match):
        rce_warmup_loss(sims, **kwargs)


# ---------------------------------------------------------------- symmetric KL loss

S23 = [[0.9, 0.2, 0.4], [0.3, 0.7, 0.1]]
PLAN23 = [[0.05, 0.01, 0.0], [0.0, 0.03, 0.02]]


# eps = 0.5 makes the placement of eps (softmax denominators, plan clamp) visible.
@pytest.mark.parametrize(("tau", "eps"), [(0.05, 1e-10), (0.5, 1e-10), (0.5, 0.5), (1.0, 0.02)])
def test_skl_terms_match_reference_2x3(tau: float, eps: float):
    got = symmetric_kl_terms(torch.tensor(S23, dtype=torch.float64),
                             torch.tensor(PLAN23, dtype=torch.float64), tau=tau, eps=eps)
    ref = ref_skl_terms(S23, PLAN23, tau, eps)
    for key, value in ref.items():
        assert got[key].item() == pytest.approx(value, rel=1e-9, abs=1e-12), key
    total = symmetric_kl_loss(torch.tensor(S23, dtype=torch.float64),
                              torch.tensor(PLAN23, dtype=torch.float64), tau=tau, eps=eps)
    assert total.item() == pytest.approx(0.5 * sum(ref.values()), rel=1e-9)


def test_skl_single_image_row():
    # Q = 1: each caption's distribution over one image is ~1 = its target, so only i2t counts.
    s, plan = [[0.2, 0.5, 0.9]], [[0.3, 0.1, 0.6]]
    got = symmetric_kl_terms(torch.tensor(s, dtype=torch.float64),
                             torch.tensor(plan, dtype=torch.float64), tau=0.5)
    ref = ref_skl_terms(s, plan, 0.5, 1e-10)
    assert abs(got["kl_t2i"].item()) < 1e-9 and abs(got["klr_t2i"].item()) < 1e-9
    assert got["kl_i2t"].item() == pytest.approx(ref["kl_i2t"], rel=1e-9)
    assert got["kl_i2t"].item() > 0.01


def test_skl_one_by_one_is_zero():
    got = symmetric_kl_loss(torch.tensor([[0.4]]), torch.tensor([[0.7]]))
    assert abs(got.item()) < 1e-6


def test_skl_zero_for_plan_proportional_to_model():
    # Row- and column-normalising exp(S / tau) gives exactly P and R: the minimum, ~ 0.
    s = rand((4, 6), 2).requires_grad_(True)
    plan = 3.0 * torch.exp(s.detach() / 0.05)
    loss = symmetric_kl_loss(s, plan)
    assert abs(loss.item()) < 1e-8
    loss.backward()
    assert s.grad.abs().max().item() < 1e-6  # a stationary point
    other = symmetric_kl_loss(s.detach(), torch.ones(4, 6))
    assert other.item() > 0.1


def test_skl_symmetries():
    s, plan = rand((3, 5), 3), rand((3, 5), 4)
    base = symmetric_kl_loss(s, plan).item()
    assert symmetric_kl_loss(s.t(), plan.t()).item() == pytest.approx(base, rel=1e-12)
    assert symmetric_kl_loss(s, 7.0 * plan).item() == pytest.approx(base, rel=1e-9)
    rows, cols = torch.tensor([2, 0, 1]), torch.tensor([4, 1, 0, 3, 2])
    assert symmetric_kl_loss(s[rows][:, cols], plan[rows][:, cols]).item() == pytest.approx(
        base, rel=1e-12)
    terms = symmetric_kl_terms(s, plan)
    swapped = symmetric_kl_terms(s.t(), plan.t())
    assert swapped["kl_i2t"].item() == pytest.approx(terms["kl_t2i"].item(), rel=1e-12)
    assert swapped["klr_t2i"].item() == pytest.approx(terms["klr_i2t"].item(), rel=1e-12)


def test_skl_plan_zeros_are_clamped_to_eps():
    s = torch.tensor(S23, dtype=torch.float64)
    zeros = torch.tensor(PLAN23, dtype=torch.float64)
    clamped = zeros.clamp(min=1e-10)
    assert symmetric_kl_loss(s, zeros).item() == symmetric_kl_loss(s, clamped).item()
    assert math.isfinite(symmetric_kl_loss(s, torch.zeros(2, 3)).item())


def test_skl_gradient_to_sims_not_plan():
    s = rand((3, 4), 5).requires_grad_(True)
    plan = rand((3, 4), 6).requires_grad_(True)
    symmetric_kl_loss(s, plan).backward()
    assert plan.grad is None
    assert s.grad is not None and bool(torch.isfinite(s.grad).all())
    assert s.grad.abs().max().item() > 1e-3


def test_skl_half_precision_and_large_logits():
    s = torch.rand(4, 4, generator=torch.Generator().manual_seed(7)).half()
    out = symmetric_kl_loss(s, torch.eye(4))
    assert out.dtype == torch.float32 and torch.isfinite(out)
    # exp(S / tau) would overflow float32 here; the log-space form does not.
    big = symmetric_kl_loss(torch.tensor([[10.0, 0.0], [0.0, 10.0]]), torch.eye(2), tau=0.05)
    assert torch.isfinite(big)


@pytest.mark.parametrize(
    ("sims", "plan", "kwargs", "match"),
    [
        (torch.zeros(2, 3), torch.zeros(3, 2), {}, "plan"),
        (torch.zeros(3), torch.zeros(3), {}, "sims"),
        (torch.zeros(0, 3), torch.zeros(0, 3), {}, "sims"),
        (torch.zeros(2, 2), torch.tensor([[0.1, -0.1], [0.0, 0.2]]), {}, "plan"),
        (torch.zeros(2, 2), torch.tensor([[0.1, float("nan")], [0.0, 0.2]]), {}, "plan"),
        (torch.zeros(2, 2), torch.ones(2, 2), {"tau": 0.0}, "tau"),
        (torch.zeros(2, 2), torch.ones(2, 2), {"eps": 0.0}, "eps"),
        (torch.zeros(2, 2), [[1.0, 0.0], [0.0, 1.0]], {}, "plan"),
    ],
)
def test_skl_bad_inputs(sims, plan, kwargs, match):
    with pytest.raises(ValueError, match=match):
        symmetric_kl_loss(sims, plan, **kwargs)
