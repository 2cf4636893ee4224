"""L2RM's two-component Beta mixture (notes 3.2-3.3): hand-computed EM steps and behaviour."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ncl.division.beta_mixture import (
    BetaMixture,
    beta_clean_component,
    beta_clean_probability,
    beta_e_step,
    beta_log_density,
    beta_m_step,
    fit_beta_mixture,
    normalise_for_beta,
)


def two_betas(n_low: int = 800, n_high: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Samples of Beta(2, 20) (mean 0.09, "clean") then Beta(20, 4) (mean 0.83, "noisy")."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.beta(2, 20, n_low), rng.beta(20, 4, n_high)])
    truth = np.concatenate([np.ones(n_low, bool), np.zeros(n_high, bool)])
    return x, truth


# ---------------------------------------------------------------- (a) M-step by hand


def test_m_step_hand_computed():
    x = np.array([0.1, 0.2, 0.6, 0.9])
    r0 = [0.9, 0.8, 0.3, 0.1]
    resp = np.array([[a, 1 - a] for a in r0])
    alphas, betas, weights = beta_m_step(x, resp, np.array([5.0, 5.0]), np.array([5.0, 5.0]))
    # component 0: W = 2.1, sum r x = 0.09 + 0.16 + 0.18 + 0.09 = 0.52,
    # sum r x^2 = 0.009 + 0.032 + 0.108 + 0.081 = 0.23
    m0 = 0.52 / 2.1
    v0 = 0.23 / 2.1 - m0**2
    a0 = m0 * (m0 * (1 - m0) / v0 - 1)
    # component 1: W = 1.9, sum r x = 0.01 + 0.04 + 0.42 + 0.81 = 1.28,
    # sum r x^2 = 0.001 + 0.008 + 0.252 + 0.729 = 0.99
    m1 = 1.28 / 1.9
    v1 = 0.99 / 1.9 - m1**2
    a1 = m1 * (m1 * (1 - m1) / v1 - 1)
    np.testing.assert_allclose(alphas, [a0, a1], rtol=1e-12)
    np.testing.assert_allclose(betas, [a0 * (1 - m0) / m0, a1 * (1 - m1) / m1], rtol=1e-12)
    np.testing.assert_allclose(weights, [2.1 / 4, 1.9 / 4], rtol=1e-12)
    np.testing.assert_allclose(alphas / (alphas + betas), [m0, m1], rtol=1e-12)  # means kept


def test_m_step_no_spread_gives_uniform_and_empty_component_is_kept():
    x = np.array([0.3, 0.3, 0.7])
    resp = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])  # component 1 has no mass
    alphas, betas, weights = beta_m_step(x, resp, np.array([2.0, 3.0]), np.array([4.0, 6.0]))
    assert (alphas[1], betas[1]) == (3.0, 6.0)  # skipped: previous parameters
    np.testing.assert_allclose(weights, [1.0, 0.0])
    alphas, betas, _ = beta_m_step(x, np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]),
                                   np.array([2.0, 3.0]), np.array([4.0, 6.0]))
    assert (alphas[1], betas[1]) == (1.0, 1.0)  # one point, s2 = 0: uniform Beta
    with pytest.raises(ValueError, match="resp"):
        beta_m_step(x, np.ones((3, 3)) / 3, np.ones(2), np.ones(2))


# ---------------------------------------------------------------- (b) E-step by hand


def _log_beta_pdf(x: float, a: float, b: float) -> float:
    x = min(max(x, 1e-6), 1 - 1e-6)
    return ((a - 1) * math.log(x) + (b - 1) * math.log(1 - x)
            + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b))


def test_e_step_hand_computed():
    x = [0.2, 0.5, 0.9, 0.0]  # 0.0 exercises the clamp to 1e-6
    alphas, betas, weights = [2.0, 5.0], [5.0, 2.0], [0.3, 0.7]
    resp, total = beta_e_step(np.array(x), np.array(alphas), np.array(betas), np.array(weights))
    expected_total = 0.0
    for i, xi in enumerate(x):
        joint = [math.log(weights[k]) + _log_beta_pdf(xi, alphas[k], betas[k]) for k in range(2)]
        norm = math.log(math.exp(joint[0]) + math.exp(joint[1]))
        expected_total += norm
        assert resp[i, 0] == pytest.approx(math.exp(joint[0] - norm), rel=1e-10, abs=1e-300)
        assert resp[i, 1] == pytest.approx(math.exp(joint[1] - norm), rel=1e-10)
    assert total == pytest.approx(expected_total, rel=1e-12)
    # Beta(2, 5) at 0.2: 30 * 0.2 * 0.8^4
    assert math.exp(beta_log_density(np.array([0.2]), np.array([2.0]), np.array([5.0]))[0, 0]) \
        == pytest.approx(30 * 0.2 * 0.8**4, rel=1e-12)


# ---------------------------------------------------------------- (b') one EM round at 0 and 1

#: Values with both ends, and two components: Beta(2, 5), and Beta(0.7, 1) whose exponent
#: a - 1 < 0 makes its density infinite at 0 and whose b - 1 = 0 makes 0 * log(0) at 1.
EDGE_X = np.array([0.0, 0.1, 0.35, 0.8, 1.0])
EDGE_A, EDGE_B, EDGE_W = np.array([2.0, 0.7]), np.array([5.0, 1.0]), np.array([0.6, 0.4])


def _hand_log_density(x: np.ndarray, eps: float) -> np.ndarray:
    """(N, 2) log densities written from the Beta formula with scipy.special.gammaln, x moved
    into [eps, 1 - eps] as the fork's x_eps does (eps = 0: IEEE infinities and NaN)."""
    from scipy.special import gammaln

    xc = np.minimum(np.maximum(x, eps), 1.0 - eps)
    out = np.empty((x.size, 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in range(2):
            a, b = EDGE_A[k], EDGE_B[k]
            out[:, k] = ((a - 1) * np.log(xc) + (b - 1) * np.log(1.0 - xc)
                         + gammaln(a + b) - gammaln(a) - gammaln(b))
    return out


def test_one_e_step_and_m_step_by_hand_with_x_at_0_and_1() -> None:
    """The fork's clamp (x_eps = 1e-6, the default) moves 0 and 1 to 1e-6 and 1 - 1e-6 in the
    density only; the M-step's weighted moments use the values themselves, 0 and 1 included."""
    log_p = _hand_log_density(EDGE_X, 1e-6)
    assert np.isfinite(log_p).all()
    # Beta(2, 5) at 1e-6 by its pdf 30 x (1 - x)^4
    assert log_p[0, 0] == pytest.approx(math.log(30 * 1e-6 * (1 - 1e-6) ** 4), rel=1e-12)
    joint = log_p + np.log(EDGE_W)
    norm = np.log(np.exp(joint).sum(axis=1))
    want_r = np.exp(joint - norm[:, None])
    resp, total = beta_e_step(EDGE_X, EDGE_A, EDGE_B, EDGE_W)
    np.testing.assert_allclose(resp, want_r, rtol=1e-12, atol=1e-300)
    assert total == pytest.approx(norm.sum(), rel=1e-12)
    np.testing.assert_allclose(beta_log_density(EDGE_X, EDGE_A, EDGE_B), log_p, rtol=1e-12)

    # M-step from those responsibilities: m, s2 per component, alpha = m (m (1 - m) / s2 - 1),
    # beta = alpha (1 - m) / m, weights W_k / N
    new_a, new_b, new_w = beta_m_step(EDGE_X, want_r, EDGE_A, EDGE_B)
    for k in range(2):
        r = want_r[:, k]
        m = float((r * EDGE_X).sum() / r.sum())
        s2 = float((r * EDGE_X**2).sum() / r.sum() - m * m)
        alpha = m * (m * (1 - m) / s2 - 1)
        assert new_a[k] == pytest.approx(alpha, rel=1e-10)
        assert new_b[k] == pytest.approx(alpha * (1 - m) / m, rel=1e-10)
        assert new_w[k] == pytest.approx(r.sum() / EDGE_X.size, rel=1e-12)


def test_without_a_clamp_0_and_1_give_the_forks_infinities_and_nan() -> None:
    """x_eps = 0: at x = 0, (0.7 - 1) log 0 = +inf and (2 - 1) log 0 = -inf; at x = 1,
    (5 - 1) log 0 = -inf and (1 - 1) log 0 = NaN. The E-step's log-sum-exp of [-inf, +inf] is
    +inf, so row 0's responsibilities are [0, NaN]; row 4's is NaN, so both are NaN."""
    log_p = beta_log_density(EDGE_X, EDGE_A, EDGE_B, clamp=0.0)
    assert log_p[0, 0] == -np.inf and log_p[0, 1] == np.inf
    assert log_p[4, 0] == -np.inf and np.isnan(log_p[4, 1])
    np.testing.assert_allclose(log_p[1:4], _hand_log_density(EDGE_X, 0.0)[1:4], rtol=1e-12)
    resp, total = beta_e_step(EDGE_X, EDGE_A, EDGE_B, EDGE_W, clamp=0.0)
    assert resp[0, 0] == 0.0 and np.isnan(resp[0, 1]) and np.isnan(resp[4]).all()
    assert np.isnan(total)
    clamped, _ = beta_e_step(EDGE_X, EDGE_A, EDGE_B, EDGE_W)
    np.testing.assert_allclose(resp[1:4], clamped[1:4], rtol=1e-12)  # the interior: no change
    # the fit refuses such values rather than return NaN parameters
    with pytest.raises(ValueError, match="exact 0 or 1"):
        fit_beta_mixture(EDGE_X, clamp=0.0)
    with pytest.raises(ValueError, match="clamp"):
        beta_log_density(EDGE_X, EDGE_A, EDGE_B, clamp=0.5)


def test_l2rm_normalisation_never_reaches_0_or_1_so_no_clamp_is_safe() -> None:
    """normalise_for_beta moves the extremes to 1e-3 and 1 - 1e-3 (the official code), so the
    unclamped fit runs; a normalised value of 1e-8 (inside the 1e-6 clamp) is where the two
    densities differ."""
    losses = torch.tensor([0.0, 1e-8, 0.05, 0.1, 0.12, 0.5, 0.7, 0.9, 0.95, 1.0],
                          dtype=torch.float64)
    x = normalise_for_beta(losses).numpy()
    assert x.min() > 0.0 and x.max() < 1.0 and x[1] == pytest.approx(1e-8)
    unclamped = beta_clean_probability(losses, clamp=0.0)
    clamped = beta_clean_probability(losses)
    assert torch.isfinite(unclamped).all() and torch.isfinite(clamped).all()
    mixture = fit_beta_mixture(x, clamp=0.0)
    assert mixture.clamp == 0.0 and fit_beta_mixture(x).clamp == 1e-6
    a, b = mixture.alphas, mixture.betas
    d0 = beta_log_density(x[1:2], a, b, clamp=0.0)
    d6 = beta_log_density(x[1:2], a, b)
    assert not np.allclose(d0, d6)  # 1e-8 is moved to 1e-6 by the clamp only


# ---------------------------------------------------------------- (c) recovery and division


def test_fit_recovers_two_well_separated_betas():
    x, _ = two_betas()
    mixture = fit_beta_mixture(x, seed=0)
    order = np.argsort(mixture.means)
    np.testing.assert_allclose(mixture.means[order], [2 / 22, 20 / 24], atol=0.03)
    np.testing.assert_allclose(mixture.weights[order], [0.8, 0.2], atol=0.03)
    assert mixture.history[-1] == mixture.log_likelihood


@pytest.mark.parametrize("n_low", [800, 200])  # the clean component as majority and as minority
def test_clean_probability_separates_low_from_high_losses(n_low: int):
    x, truth = two_betas(n_low=n_low, n_high=1000 - n_low, seed=1)
    losses = torch.tensor(3.0 * x + 1.0, dtype=torch.float32)  # raw losses: normalised inside
    prob = beta_clean_probability(losses, seed=0)
    assert prob.shape == (1000,) and prob.dtype == torch.float32
    assert float(prob.min()) >= 0.0 and float(prob.max()) <= 1.0
    clean = torch.from_numpy(truth)
    assert prob[clean].gt(0.5).float().mean().item() > 0.95
    assert prob[~clean].lt(0.5).float().mean().item() > 0.95


def test_clean_component_is_chosen_by_posterior_at_probe():
    # Component 1 has the low mean, component 0 the high one: index order must not matter.
    mixture = BetaMixture(alphas=np.array([20.0, 2.0]), betas=np.array([4.0, 20.0]),
                          weights=np.array([0.5, 0.5]), n_iter=0, n_iter_refine=0,
                          log_likelihood=0.0, history=(0.0,))
    assert beta_clean_component(mixture) == 1
    # The posterior at the probe decides, not the mean: Beta(5, 45) has the lower mean (0.1) but
    # a density ~ x^4 at 1e-3, far below the flat Beta(1, 1.5) (mean 0.4).
    flat = BetaMixture(alphas=np.array([5.0, 1.0]), betas=np.array([45.0, 1.5]),
                       weights=np.array([0.9, 0.1]), n_iter=0, n_iter_refine=0,
                       log_likelihood=0.0, history=(0.0,))
    assert int(np.argmin(flat.means)) == 0 and beta_clean_component(flat) == 1
    with pytest.raises(ValueError, match="probe"):
        beta_clean_component(mixture, probe=0.0)


# ---------------------------------------------------------------- (d) determinism and init


def test_deterministic_for_a_seed():
    x, _ = two_betas(seed=2)
    a, b = fit_beta_mixture(x, seed=5), fit_beta_mixture(x, seed=5)
    for name in ("alphas", "betas", "weights"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert a.history == b.history
    losses = torch.from_numpy(x)
    p1, p2 = beta_clean_probability(losses, seed=5), beta_clean_probability(losses, seed=5)
    assert torch.equal(p1, p2) and p1.dtype == torch.float64


def test_initialisation_is_kmeans_then_moments():
    # Two obvious clusters: whatever the seeding, k-means finds them; max_iter=0 returns the init.
    lo, hi = [0.10, 0.12, 0.14], [0.80, 0.86]
    mixture = fit_beta_mixture(np.array(lo + hi), max_iter=0, refine_tol=None, seed=3)
    assert mixture.n_iter == 0 and len(mixture.history) == 1
    k_lo = int(np.argmin(mixture.means))
    m, v = 0.12, (0.01 + 0.0144 + 0.0196) / 3 - 0.12**2
    alpha = m * (m * (1 - m) / v - 1)
    assert mixture.alphas[k_lo] == pytest.approx(alpha, rel=1e-9)
    assert mixture.betas[k_lo] == pytest.approx(alpha * (1 - m) / m, rel=1e-9)
    np.testing.assert_allclose(sorted(mixture.weights), [0.4, 0.6])


# ---------------------------------------------------------------- (e) EM loop and refine phase


def test_em_stopping_rule_and_refine_phase():
    rng = np.random.default_rng(4)  # overlapping components: EM needs many steps
    x = np.concatenate([rng.beta(2, 5, 600), rng.beta(4, 3, 400)])
    first = fit_beta_mixture(x, refine_tol=None, seed=0)
    assert first.n_iter_refine == 0 and first.n_iter <= 10
    full = fit_beta_mixture(x, seed=0)
    assert full.n_iter == first.n_iter
    assert full.history[: 1 + first.n_iter] == first.history
    assert len(full.history) == 1 + full.n_iter + full.n_iter_refine
    assert full.n_iter_refine > 0 and full.log_likelihood > first.log_likelihood
    # Every step but the last of a phase improved by more than its tolerance; the last did not.
    steps = np.diff(full.history)
    assert np.all(steps[: first.n_iter - 1] > 1e-2)
    assert np.all(steps[first.n_iter: -1] > 0.1) and steps[-1] <= 0.1


def test_refine_respects_its_cap():
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.beta(2, 5, 600), rng.beta(4, 3, 400)])
    capped = fit_beta_mixture(x, max_iter=1, tol=0.0, refine_tol=0.0, refine_max_iter=2, seed=0)
    assert (capped.n_iter, capped.n_iter_refine) == (1, 2)
    assert len(capped.history) == 4
    assert fit_beta_mixture(x, refine_max_iter=0, seed=0).n_iter_refine == 0


# ---------------------------------------------------------------- (f) normalisation


def test_normalise_replaces_only_the_extremes():
    out = normalise_for_beta(torch.tensor([2.0, 4.0, 6.0, 3.0], dtype=torch.float64))
    assert out.dtype == torch.float64
    assert out.tolist() == pytest.approx([1e-3, 0.5, 1 - 1e-3, 0.25], rel=1e-12)
    # 0.0005 and 0.9996 lie inside (0, 1e-3) and (0.999, 1): kept, not clipped.
    out = normalise_for_beta(torch.tensor([0.0, 0.0005, 0.9996, 1.0], dtype=torch.float64))
    assert out.tolist() == pytest.approx([1e-3, 0.0005, 0.9996, 1 - 1e-3], rel=1e-12)
    assert normalise_for_beta(torch.tensor([1.0, 3.0]), low=0.1, high=0.8).tolist() == \
        pytest.approx([0.1, 0.8])
    with pytest.raises(ValueError, match="low"):
        normalise_for_beta(torch.tensor([1.0, 3.0]), low=0.5, high=0.4)


# ---------------------------------------------------------------- (g) bad input


@pytest.mark.parametrize(
    ("losses", "kwargs", "match"),
    [
        (torch.tensor([]), {}, "losses"),
        (torch.tensor([0.1]), {}, "losses"),
        (torch.tensor([0.1, float("nan"), 0.3]), {}, "losses"),
        (torch.tensor([0.1, float("inf"), 0.3]), {}, "losses"),
        (torch.ones(2, 3), {}, "losses"),
        (torch.tensor([0.1, 0.5]), {"max_iter": -1}, "max_iter"),
        (torch.tensor([0.1, 0.5]), {"tol": -1.0}, "tol"),
        (torch.tensor([0.1, 0.5]), {"refine_tol": float("nan")}, "refine_tol"),
        (torch.tensor([0.1, 0.5]), {"probe": 1.0}, "probe"),
    ],
)
def test_clean_probability_bad_input(losses, kwargs, match):
    with pytest.raises(ValueError, match=match):
        beta_clean_probability(losses, **kwargs)


@pytest.mark.parametrize(
    ("x", "match"),
    [
        (np.array([]), "at least 2"),
        (np.array([[0.1, 0.2]]), "1-D"),
        (np.array([0.1, np.nan]), "NaN"),
        (np.array([0.1, 1.5]), r"\[0, 1\]"),
        (np.array([0.4, 0.4, 0.4]), "distinct"),
        ([0.1, 0.2], "numpy array"),
    ],
)
def test_fit_bad_input(x, match):
    with pytest.raises(ValueError, match=match):
        fit_beta_mixture(x)


# ---------------------------------------------------------------- (h) constant losses


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_constant_losses_give_ones_and_warn(dtype: torch.dtype):
    with pytest.warns(RuntimeWarning, match="all losses are equal"):
        prob = beta_clean_probability(torch.full((6,), 0.7, dtype=dtype))
    assert prob.dtype == dtype and torch.equal(prob, torch.ones(6, dtype=dtype))
