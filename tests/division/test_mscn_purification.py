"""MSCN's purification by value (ncl.division.mscn): the Beta mixture initialised from the
meta values, its EM on the training values, the split."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.special import betaln

from ncl.division.beta_mixture import beta_e_step, beta_m_step
from ncl.division.mscn import (beta_from_moments, clamp_extremes, fit_from_start,
                               meta_mixture_start, purify)


def test_clamp_moves_only_the_extremes() -> None:
    got = clamp_extremes(np.array([0.0, 1.0, 1.5, -2.0, 5e-4, 0.5]))
    assert got.tolist() == [1e-3, 1 - 1e-3, 1 - 1e-3, 1e-3, 5e-4, 0.5]


def test_beta_from_moments_by_hand() -> None:
    # values 0.2, 0.4: m = 0.3, v = 0.01; alpha = 0.3 (0.21 / 0.01 - 1) = 6, beta = 6 * 0.7 / 0.3 = 14
    a, b = beta_from_moments(np.array([0.2, 0.4]))
    assert (a, b) == pytest.approx((6.0, 14.0))


def test_start_is_fitted_on_the_meta_groups() -> None:
    values = np.array([0.2, 0.4, 0.7, 0.9, 1.0])  # the 1.0 is clamped to 0.999
    labels = np.array([0, 0, 1, 1, 1])
    alphas, betas, weights = meta_mixture_start(values, labels)
    clean = np.array([0.7, 0.9, 0.999])
    m, v = clean.mean(), clean.var()
    a_clean = m * (m * (1 - m) / v - 1)
    assert alphas.tolist() == pytest.approx([6.0, a_clean])
    assert betas.tolist() == pytest.approx([14.0, a_clean * (1 - m) / m])
    assert weights.tolist() == [0.5, 0.5]


def test_em_from_start_matches_the_steps_written_out() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.beta(2, 8, 300), rng.beta(9, 2, 700)])
    start = (np.array([2.0, 8.0]), np.array([7.0, 2.0]), np.array([0.5, 0.5]))
    got = fit_from_start(x, start, max_iter=3, tol=-np.inf)  # exactly three rounds
    params = start
    for _ in range(3):
        resp, _ = beta_e_step(x, *params, 1e-6)
        params = beta_m_step(x, resp, params[0], params[1])
    assert got.n_iter == 3
    np.testing.assert_allclose(got.alphas, params[0], rtol=1e-12)
    np.testing.assert_allclose(got.weights, params[2], rtol=1e-12)


def test_first_posterior_is_bayes_rule_on_the_meta_start() -> None:
    # max_iter=0: no M-step, the posterior is the start's, computed here by hand
    meta = np.array([0.1, 0.2, 0.3, 0.7, 0.8, 0.95])
    labels = np.array([0, 0, 0, 1, 1, 1])
    x = np.array([0.15, 0.5, 0.9])
    result = purify(torch.tensor(x), torch.tensor(meta), torch.tensor(labels), max_iter=0)
    (a0, b0), (a1, b1) = beta_from_moments(meta[:3]), beta_from_moments(meta[3:])

    def dens(v: np.ndarray, a: float, b: float) -> np.ndarray:
        return np.exp((a - 1) * np.log(v) + (b - 1) * np.log1p(-v) - betaln(a, b))

    want = dens(x, a1, b1) / (dens(x, a0, b0) + dens(x, a1, b1))
    assert result.prob.double().numpy() == pytest.approx(want, rel=1e-5)
    assert result.clean.tolist() == (want > 0.5).tolist() == [False, True, True]


def test_purify_separates_two_groups() -> None:
    rng = np.random.default_rng(1)
    noisy, clean = rng.beta(2, 6, 400), rng.beta(8, 2, 600)
    meta = np.concatenate([rng.beta(2, 6, 50), rng.beta(8, 2, 50)])
    labels = np.repeat([0, 1], 50)
    result = purify(torch.tensor(np.concatenate([noisy, clean])), torch.tensor(meta),
                    torch.tensor(labels))
    pred = result.clean.numpy()
    assert pred[:400].mean() < 0.1 and pred[400:].mean() > 0.9
    assert result.mixture.n_iter <= 10
