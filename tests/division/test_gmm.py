"""Tests for ncl.division.gmm (spec 4.2.4, LNC Eq. 3)."""

import numpy as np
import pytest
import torch

from ncl.division import gmm_clean_probability, minmax_normalize


def _bimodal(clean_first: bool = True, n: int = 1000, clean_frac: float = 0.8):
    rng = np.random.RandomState(0)
    n_clean = int(n * clean_frac)
    clean = rng.normal(0.1, 0.02, n_clean)
    noisy = rng.normal(0.8, 0.05, n - n_clean)
    losses = np.concatenate([clean, noisy])
    truth = np.concatenate([np.ones(n_clean, bool), np.zeros(n - n_clean, bool)])
    order = rng.permutation(n)
    return torch.tensor(losses[order], dtype=torch.float32), torch.tensor(truth[order])


def test_minmax_hand_computed():
    out = minmax_normalize(torch.tensor([2.0, 4.0, 6.0, 3.0]))
    torch.testing.assert_close(out, torch.tensor([0.0, 0.5, 1.0, 0.25]))


def test_minmax_all_equal_gives_zeros_not_nan():
    out = minmax_normalize(torch.full((5,), 0.3))
    assert torch.equal(out, torch.zeros(5))


def test_minmax_rejects_nan():
    with pytest.raises(ValueError, match="losses"):
        minmax_normalize(torch.tensor([0.1, float("nan")]))


def test_gmm_separates_bimodal_losses():
    losses, truth = _bimodal()
    prob = gmm_clean_probability(losses, seed=0)
    assert prob.shape == (1000,)
    assert prob.dtype == torch.float32
    assert float(prob.min()) >= 0.0 and float(prob.max()) <= 1.0
    accuracy = ((prob > 0.5) == truth).float().mean().item()
    assert accuracy > 0.95


def test_gmm_picks_smaller_mean_not_larger_weight():
    # 20 % low-loss, 80 % high-loss: the clean component is the MINORITY here.
    losses, truth = _bimodal(clean_frac=0.2)
    prob = gmm_clean_probability(losses, seed=0)
    accuracy = ((prob > 0.5) == truth).float().mean().item()
    assert accuracy > 0.95


def test_gmm_deterministic_for_seed():
    losses, _ = _bimodal()
    a = gmm_clean_probability(losses, seed=3)
    b = gmm_clean_probability(losses, seed=3)
    assert torch.equal(a, b)


def test_gmm_invariant_to_affine_rescaling_of_losses():
    # Min-max normalisation makes sum- vs mean-reduced per-sample losses equivalent.
    losses, _ = _bimodal()
    a = gmm_clean_probability(losses.double(), seed=0)
    b = gmm_clean_probability(losses.double() * 128.0 + 5.0, seed=0)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_gmm_all_equal_losses_returns_ones_with_warning():
    with pytest.warns(RuntimeWarning, match="all losses are equal"):
        prob = gmm_clean_probability(torch.full((10,), 0.7))
    assert torch.equal(prob, torch.ones(10))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_gmm_rejects_non_finite(bad):
    losses = torch.tensor([0.1, 0.2, bad, 0.4])
    with pytest.raises(ValueError, match="NaN/Inf"):
        gmm_clean_probability(losses)


def test_gmm_rejects_too_few_samples_and_bad_shapes():
    with pytest.raises(ValueError, match="at least 2"):
        gmm_clean_probability(torch.tensor([0.5]))
    with pytest.raises(ValueError, match="1-D"):
        gmm_clean_probability(torch.rand(3, 2))
    with pytest.raises(ValueError, match="max_iter"):
        gmm_clean_probability(torch.rand(5), max_iter=0)


def test_gmm_two_samples_works():
    prob = gmm_clean_probability(torch.tensor([0.0, 1.0]))
    assert prob[0] > prob[1]
