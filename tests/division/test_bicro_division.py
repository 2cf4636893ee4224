"""BiCro's division (ncl.division.bicro) on fixed loss vectors, against a hand-written EM of the
official ``BetaMixture1D`` (plain Python loops, the Beta density from ``math.lgamma``: no scipy)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ncl.division.bicro import bicro_clean_probability, bicro_split, fit_bicro_beta

#: Small losses (12 clean-looking) and large ones (8); the minimum is pair 1 (0.0).
LOSSES = [0.085, 0.0, 0.06, 0.5, 0.243, 0.119, 0.027, 0.022, 0.18, 0.252, 0.195, 0.129, 0.595,
          0.437, 0.593, 0.837, 0.919, 0.924, 0.48, 0.582]
#: Two tight clusters: from round 3 on, 8 weighted densities fall below the 1e-12 floor.
TIGHT = [0.0154, 0.0285, 0.0043, 0.0285, 0.0094, 0.0127, 0.0248, 0.0123, 0.0165, 0.0008, 0.0226,
         0.0161, 0.9799, 0.9937, 0.9791, 0.9836, 0.974, 0.9821, 0.9761, 0.9779]
#: A vector whose fit leaves component 0 with the *higher* mean.
REVERSED = [0.501, 0.559, 0.547, 0.601, 0.477, 0.361, 0.482, 0.38, 0.543, 0.582, 0.571, 0.375,
            0.514, 0.495, 0.398, 0.644, 0.86, 0.41, 0.526, 0.424, 0.582, 0.611, 0.605]


def _pdf(x: float, a: float, b: float) -> float:
    """The Beta density, with scipy's values at the ends (inf for a shape < 1)."""
    if x == 0.0 and a < 1 or x == 1.0 and b < 1:
        return math.inf
    if x == 0.0 and a > 1 or x == 1.0 and b > 1:
        return 0.0
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    return math.exp(log_norm + (a - 1) * math.log(x) + (b - 1) * math.log1p(-x)) if 0 < x < 1 \
        else math.exp(log_norm)


def _normalise(losses: list[float]) -> list[float]:
    x = torch.tensor(losses, dtype=torch.float32)  # the official float32 normalisation
    return ((x - x.min()) / (x.max() - x.min())).double().tolist()


def _reference_fit(x: list[float], rounds: int = 10) -> tuple[list[float], list[float], list[float]]:
    """The official EM, written out: clamp to [1e-4, 1 - 1e-4], start (1, 2) / (2, 1) / (1/2, 1/2),
    E-step floored at 1e-12, weighted-moment M-step."""
    xs = [min(max(v, 1e-4), 1 - 1e-4) for v in x]
    a, b, w = [1.0, 2.0], [2.0, 1.0], [0.5, 0.5]
    for _ in range(rounds):
        r = [[max(w[k] * _pdf(v, a[k], b[k]), 1e-12) for v in xs] for k in range(2)]
        tot = [r[0][i] + r[1][i] for i in range(len(xs))]
        r = [[r[k][i] / tot[i] for i in range(len(xs))] for k in range(2)]
        for k in range(2):
            s = sum(r[k])
            m = sum(ri * v for ri, v in zip(r[k], xs)) / s
            var = sum(ri * (v - m) ** 2 for ri, v in zip(r[k], xs)) / s
            a[k] = m * (m * (1 - m) / var - 1)
            b[k] = a[k] * (1 - m) / m
        w = [sum(r[0]) / len(xs), sum(r[1]) / len(xs)]
    return a, b, w


def _reference_posterior(x: list[float], fit: tuple, component: int) -> list[float]:
    a, b, w = fit
    out = []
    for v in x:
        dens = [w[k] * _pdf(v, a[k], b[k]) for k in range(2)]
        total = dens[0] + dens[1] + 1e-12
        out.append(math.nan if math.isinf(dens[component]) else dens[component] / total)
    return out


@pytest.mark.parametrize("losses", [LOSSES, TIGHT, REVERSED])
def test_fit_matches_the_written_out_em(losses: list[float]) -> None:
    x = _normalise(losses)
    a, b, w = _reference_fit(x)
    mixture = fit_bicro_beta(np.array(x))
    np.testing.assert_allclose(mixture.alphas, a, rtol=1e-9)
    np.testing.assert_allclose(mixture.betas, b, rtol=1e-9)
    np.testing.assert_allclose(mixture.weights, w, rtol=1e-9)


def test_official_posterior_is_nan_at_the_smallest_loss_which_is_then_noisy() -> None:
    """Quirk (4): alpha_0 < 1 makes the density infinite at x = 0; the NaN pair is not clean and
    the NaN minimum keeps the fallback from firing. ``clamped`` gives the cleanest pair ~0.91."""
    x = _normalise(LOSSES)
    fit = _reference_fit(x)
    assert fit[0][0] < 1
    prob = bicro_clean_probability(torch.tensor(LOSSES, dtype=torch.float32))
    expected = _reference_posterior(x, fit, 0)
    assert math.isnan(prob[1]) and math.isnan(expected[1])
    np.testing.assert_allclose(prob.numpy(), expected, rtol=1e-9)
    clean = bicro_split(prob)
    assert not clean[1] and clean.tolist() == [p > 0.5 for p in expected]
    clamped = bicro_clean_probability(torch.tensor(LOSSES, dtype=torch.float32), posterior_input="clamped")
    xs = [min(max(v, 1e-4), 1 - 1e-4) for v in x]
    np.testing.assert_allclose(clamped.numpy(), _reference_posterior(xs, fit, 0), rtol=1e-9)
    assert bool(torch.isfinite(clamped).all()) and clamped[1] > 0.9 and bicro_split(clamped)[1]


def test_component_zero_is_clean_even_with_the_higher_mean() -> None:
    """Quirk (3): on this vector component 0 ends with the higher mean; the official posterior
    is component 0's, ``lower_mean`` takes component 1's (the two sum to 1)."""
    x = _normalise(REVERSED)
    fit = _reference_fit(x)
    means = [fit[0][k] / (fit[0][k] + fit[1][k]) for k in range(2)]
    assert means[0] > means[1]
    losses = torch.tensor(REVERSED, dtype=torch.float32)
    official = bicro_clean_probability(losses)
    fixed = bicro_clean_probability(losses, clean_component="lower_mean")
    np.testing.assert_allclose(official.numpy(), _reference_posterior(x, fit, 0), rtol=1e-9)
    np.testing.assert_allclose(fixed.numpy(), _reference_posterior(x, fit, 1), rtol=1e-9)
    total = (official + fixed).numpy()  # NaN at x = 0 and 1 (component 1's shapes are < 1)
    assert np.isnan(total).sum() == 2
    np.testing.assert_allclose(total[np.isfinite(total)], 1.0, atol=1e-9)


def test_fallback_threshold_is_the_unsorted_entry() -> None:
    """Quirk (5): all 200 probabilities exceed 0.5, so the threshold becomes entry N // 100 = 2:
    the official 0.95 (unsorted) leaves 17 pairs clean, the sorted 0.517 (the
    old entry 3, entry 2 having moved up) leaves 197."""
    prob = torch.linspace(0.51, 0.99, 200, dtype=torch.float64)
    prob[2] = 0.95
    official, fixed = bicro_split(prob), bicro_split(prob, fallback="sorted")
    assert int(official.sum()) == int((prob > 0.95).sum()) == 17
    assert float(torch.sort(prob).values[2]) == pytest.approx(0.51 + 3 * 0.48 / 199)
    assert int(fixed.sum()) == 197 and not fixed[0] and not fixed[1] and not fixed[3]


def test_split_threshold_and_nan() -> None:
    prob = torch.tensor([0.2, 0.5, 0.51, math.nan, 0.9], dtype=torch.float64)
    assert bicro_split(prob).tolist() == [False, False, True, False, True]
    assert bicro_split(torch.tensor([math.nan, 0.6, 0.7])).tolist() == [False, True, True]


def test_constant_losses_give_ones_with_a_warning() -> None:
    with pytest.warns(RuntimeWarning, match="all losses are equal"):
        prob = bicro_clean_probability(torch.full((5,), 0.3))
    assert prob.tolist() == [1.0] * 5
