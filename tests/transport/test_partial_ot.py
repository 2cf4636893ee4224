"""Entropic partial OT through a dummy row and column (L2RM notes 4.5) versus POT and an LP."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ncl.transport import augmented_problem, partial_ot, partial_ot_plan

TIGHT = {"max_iter": 20000, "threshold": 1e-10}


def cost_matrix(q: int, b: int, seed: int = 0) -> torch.Tensor:
    """relu(1 - s) with s in [0.2, 0.8], as at the start of L2RM training; float64."""
    g = torch.Generator().manual_seed(seed)
    sims = 0.2 + 0.6 * torch.rand(q, b, generator=g, dtype=torch.float64)
    return torch.relu(1.0 - sims)


def own_mask(q: int, b: int) -> torch.Tensor:
    mask = torch.ones(q, b, dtype=torch.bool)
    mask[range(b), range(b)] = False
    return mask


def lp_partial_ot(cost: np.ndarray, a: np.ndarray, b: np.ndarray, mass: float) -> np.ndarray:
    """Exact partial OT: min <C, T> s.t. T 1 <= a, T^T 1 <= b, sum T = mass, T >= 0."""
    from scipy.optimize import linprog

    q, n = cost.shape
    rows = np.kron(np.eye(q), np.ones((1, n)))  # row sums
    cols = np.kron(np.ones((1, q)), np.eye(n))  # column sums
    res = linprog(
        cost.ravel(),
        A_ub=np.vstack([rows, cols]),
        b_ub=np.concatenate([a, b]),
        A_eq=np.ones((1, q * n)),
        b_eq=[mass],
        bounds=(0, None),
        method="highs",
    )
    assert res.success, res.message
    return res.x.reshape(q, n)


# ---------------------------------------------------------------- marginals and mass


def test_marginals_mass_and_mask_official_settings():
    q, b = 16, 8
    cost, mask = cost_matrix(q, b), own_mask(q, b)
    res = partial_ot(cost, rho=0.1, reg=0.07, mask=mask)
    plan = res.plan
    assert plan.shape == (q, b) and plan.dtype == torch.float64
    assert res.converged and res.iterations < 1000
    assert bool((plan >= 0).all())
    # the dummy column/row take the rest of each marginal: real sums stay below 1/Q, 1/B
    assert float(plan.sum(1).max()) <= 1 / q + 1e-9
    assert float(plan.sum(0).max()) <= 1 / b + 1e-9
    # masked own pairs are exactly zero (kernel exponent -1e6), the rest strictly positive
    assert bool((plan[~mask] == 0).all())
    assert bool((plan[mask] > 0).all())
    # At the official stopping rule the real mass is rho plus a small excess (measured
    # 0.1025 here; 0.101 at Q = B = 128); rho = 0.2 gives 0.2017, so 0.01 separates them.
    assert abs(res.mass - 0.1) < 0.01
    assert abs(partial_ot(cost, rho=0.2, reg=0.07, mask=mask).mass - 0.2) < 0.01
    assert res.mass == pytest.approx(float(plan.sum()))


@pytest.mark.parametrize("rho", [0.1, 0.3])
@pytest.mark.parametrize("reg", [0.07, 0.01])
def test_converged_mass_is_rho(rho, reg):
    # Converged, the real block carries rho + (corner mass): measured within 1e-6 of rho.
    res = partial_ot(cost_matrix(8, 6, seed=1), rho=rho, reg=reg, **TIGHT)
    assert res.converged
    assert abs(res.mass - rho) < 1e-5
    # the augmented plan's columns are exact after the last v-update; rows converge
    col_gap = 1 / 6 - res.plan.sum(0)
    row_gap = 1 / 8 - res.plan.sum(1)
    assert bool((col_gap > 0).all()) and bool((row_gap > -1e-9).all())


def test_all_zero_cost_is_the_independent_coupling_not_nan():
    # max C = 0: xi and the corner cost are 0, nothing prices the dummy; the plan is
    # a~ b~^T / (2 - rho) and the real mass 1 / (2 - rho) (documented).
    q, b, rho = 4, 3, 0.1
    res = partial_ot(torch.zeros(q, b, dtype=torch.float64), rho=rho, **TIGHT)
    assert not bool(res.plan.isnan().any())
    expected = 1.0 / (q * b * (2 - rho))
    assert torch.allclose(res.plan, torch.full((q, b), expected, dtype=torch.float64), atol=1e-12)
    masked = partial_ot_plan(torch.zeros(q, b), rho=rho, mask=own_mask(q, b))
    assert not bool(masked.isnan().any()) and bool((masked[~own_mask(q, b)] == 0).all())


def test_dummy_scale_does_not_change_the_converged_plan():
    # xi only shifts the dummy row and column of the cost; balanced OT ignores shifts.
    cost = cost_matrix(6, 5, seed=2)
    ref = partial_ot_plan(cost, reg=0.05, dummy_scale=100.0, **TIGHT)
    for scale in (0.0, 1.0, 10.0):
        other = partial_ot_plan(cost, reg=0.05, dummy_scale=scale, **TIGHT)
        assert torch.allclose(other, ref, atol=1e-9, rtol=0)


# ---------------------------------------------------------------- against other solvers


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("reg", [0.07, 0.01])
def test_equals_pot_sinkhorn_on_the_augmented_problem(masked, reg):
    ot = pytest.importorskip("ot")
    q, b, rho = 7, 5, 0.2
    cost = cost_matrix(q, b, seed=3)
    mask = own_mask(q, b) if masked else None
    a_aug, b_aug, c_aug = augmented_problem(cost, rho)
    c_pot = c_aug.clone()
    if masked:
        c_pot[:q, :b][~mask] = 1e4  # exp(-1e4 / reg) == 0, as our -1e6 exponent
    ref = ot.sinkhorn(
        a_aug.numpy(), b_aug.numpy(), c_pot.numpy(), reg,
        method="sinkhorn_log", numItermax=20000, stopThr=1e-11,
    )[:q, :b]
    ours = partial_ot_plan(cost, rho=rho, reg=reg, mask=mask, **TIGHT).numpy()
    # measured max relative |diff| 1.5e-9 at reg 0.07 and 5.5e-8 at reg 0.01
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-15)
    # At the official threshold (1e-3 on u) the plan is an early stop of the same iteration:
    # measured max |diff| / max(plan) = 0.010-0.011 at reg 0.07 and 0.13-0.15 at reg 0.01.
    loose = partial_ot_plan(cost, rho=rho, reg=reg, mask=mask).numpy()
    rel = np.abs(loose - ref).max() / ref.max()
    assert rel < (0.05 if reg == 0.07 else 0.3)


def test_pot_entropic_partial_wasserstein_same_mass_and_assignment():
    # POT solves min <C,T> - reg H(T) with T 1 <= a, T^T 1 <= b, sum T = m: the entropy is on
    # the real block only, whereas the augmented problem also charges the dummy entries.
    # Measured on cost_matrix(8, 8), rho 0.1: reg 0.07 max |diff| 2.1e-3 for entries up to
    # 0.013 (15 %), per-column argmax agrees on 6 of 8 columns; reg 0.01: 4.7e-3 for entries
    # up to 0.038, argmax 8 of 8. So on random costs only the mass is comparable; on the
    # clear-cut case below the two plans agree to 6e-9 (off-match entries are ~e^-15).
    ot = pytest.importorskip("ot")
    q = b = 6
    rho, reg = 0.5, 0.05
    g = torch.Generator().manual_seed(4)
    sims = 0.1 + 0.05 * torch.rand(q, b, generator=g, dtype=torch.float64)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    sims[perm, torch.arange(b)] = 0.9  # caption j clearly matches image perm[j]
    cost = 1.0 - sims
    ours = partial_ot_plan(cost, rho=rho, reg=reg, **TIGHT).numpy()
    ref = ot.partial.entropic_partial_wasserstein(
        np.full(q, 1 / q), np.full(b, 1 / b), cost.numpy(), reg, m=rho,
        numItermax=10000, stopThr=1e-12,
    )
    assert abs(ref.sum() - rho) < 1e-9 and abs(ours.sum() - rho) < 1e-5
    np.testing.assert_array_equal(ours.argmax(0), perm.numpy())
    np.testing.assert_array_equal(ref.argmax(0), perm.numpy())
    np.testing.assert_allclose(ours, ref, atol=1e-6, rtol=0)


def test_small_reg_approaches_the_exact_partial_ot_lp():
    # Unique LP optimum: 1/3 on (0, 0) then 1/6 on (1, 1); objective 1/15.
    cost = np.array([[0.1, 0.9, 0.8], [0.7, 0.2, 0.9], [0.8, 0.9, 0.6]])
    a = b = np.full(3, 1 / 3)
    exact = lp_partial_ot(cost, a, b, 0.5)
    np.testing.assert_allclose(exact, [[1 / 3, 0, 0], [0, 1 / 6, 0], [0, 0, 0]], atol=1e-9)
    errors = []
    for reg in (0.05, 0.01):
        plan = partial_ot_plan(torch.tensor(cost), rho=0.5, reg=reg, max_iter=5000,
                               threshold=1e-10).numpy()
        errors.append(np.abs(plan - exact).max())
        objective = (plan * cost).sum()
        assert objective >= (exact * cost).sum() - 1e-6  # never below the LP optimum
    # measured 0.050 at reg 0.05 and 0.0016 at reg 0.01 (support {(0,0), (1,1)})
    assert errors[1] < 5e-3 < errors[0]
    assert (plan * cost).sum() == pytest.approx((exact * cost).sum(), abs=1e-3)


# ---------------------------------------------------------------- solver behaviour


def test_iterations_and_convergence_flag():
    cost = cost_matrix(5, 4, seed=5)
    once = partial_ot(cost, threshold=1e9)
    assert once.iterations == 1 and once.converged
    capped = partial_ot(cost, threshold=0.0, max_iter=3)
    assert capped.iterations == 3 and not capped.converged
    assert capped.last_change > 0
    default = partial_ot(cost)
    assert default.converged and 1 < default.iterations < 1000
    assert default.last_change < 1e-3


def test_float32_and_float64_inputs_agree_and_dtypes():
    cost = cost_matrix(9, 6, seed=6)
    p64 = partial_ot_plan(cost, mask=own_mask(9, 6))
    p32 = partial_ot_plan(cost.float(), mask=own_mask(9, 6))
    assert p64.dtype == torch.float64 and p32.dtype == torch.float32
    assert torch.allclose(p32.double(), p64, atol=1e-6, rtol=0)
    assert partial_ot_plan(cost.bfloat16()).dtype == torch.float32


def test_no_gradient_and_input_untouched():
    cost = cost_matrix(4, 4, seed=7).requires_grad_(True)
    before = cost.detach().clone()
    plan = partial_ot_plan(cost)
    assert not plan.requires_grad and plan.grad_fn is None
    assert torch.equal(cost.detach(), before)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"cost": torch.ones(3)}, "cost"),
        ({"cost": torch.ones(3, 3, dtype=torch.long)}, "cost"),
        ({"cost": torch.tensor([[0.1, float("nan")]])}, "cost"),
        ({"cost": torch.tensor([[0.1, float("inf")]])}, "cost"),
        ({"cost": torch.tensor([[0.1, -0.2]])}, "cost"),
        ({"cost": torch.zeros(0, 3)}, "cost"),
        ({"rho": 0.0}, "rho"),
        ({"rho": 1.0}, "rho"),
        ({"rho": -0.1}, "rho"),
        ({"reg": 0.0}, "reg"),
        ({"reg": float("nan")}, "reg"),
        ({"mask": torch.ones(3, 2, dtype=torch.bool)}, "mask"),
        ({"mask": torch.ones(2, 3)}, "mask"),
        ({"max_iter": 0}, "max_iter"),
        ({"threshold": -1.0}, "threshold"),
        ({"dummy_scale": -1.0}, "dummy_scale"),
    ],
)
def test_bad_inputs_raise_naming_the_argument(kwargs, name):
    args = {"cost": torch.rand(2, 3)} | kwargs
    with pytest.raises(ValueError, match=f"`{name}`"):
        partial_ot(**args)
