"""GSC's split (official ``split_batch``) with values by hand: min-max, the higher-mean
component's posterior, the two EMAs with beta and their minimum."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.mixture import GaussianMixture

from ncl.division.gsc import structure_posterior, update_targets


def test_two_clear_groups_give_the_high_group_posterior_one() -> None:
    scores = torch.tensor([0.90, 0.92, 0.91, 0.89, 0.10, 0.12, 0.11, 0.93], dtype=torch.float64)
    w = structure_posterior(scores)
    assert w.tolist() == pytest.approx([1, 1, 1, 1, 0, 0, 0, 1], abs=1e-6)


def test_posterior_is_the_official_gmm_on_minmax_scores() -> None:
    """The official fit, written out: min-max, GaussianMixture(2, max_iter=10, tol=1e-2,
    reg_covar=5e-4), predict_proba of means_.argmax() (same random_state)."""
    rng = np.random.RandomState(3)
    raw = np.concatenate([rng.normal(0.7, 0.1, 60), rng.normal(0.3, 0.15, 40)])
    x = ((raw - raw.min()) / (raw.max() - raw.min())).reshape(-1, 1)
    gmm = GaussianMixture(n_components=2, max_iter=10, tol=1e-2, reg_covar=5e-4, random_state=0).fit(x)
    want = gmm.predict_proba(x)[:, gmm.means_.argmax()]
    got = structure_posterior(torch.from_numpy(raw), seed=0)
    assert np.allclose(got.numpy(), want, atol=1e-10)


def test_ema_and_minimum_by_hand() -> None:
    scores = torch.tensor([0.9, 0.9, 0.1, 0.1], dtype=torch.float64)  # posterior ~ 1, 1, 0, 0
    preds = torch.tensor([0.8, 0.2, 0.6, 0.0], dtype=torch.float64)
    topo_old = torch.tensor([1.0, 0.5, 1.0, 0.2], dtype=torch.float64)
    pred_old = torch.tensor([1.0, 1.0, 0.4, 0.5], dtype=torch.float64)
    out = update_targets(scores, preds, topo_old, pred_old, beta=0.7)
    w = out.posterior.tolist()
    assert w == pytest.approx([1, 1, 0, 0], abs=1e-6)
    topo = [0.7 * 1 + 0.3 * 1.0, 0.7 * 1 + 0.3 * 0.5, 0.7 * 0 + 0.3 * 1.0, 0.7 * 0 + 0.3 * 0.2]
    pred = [0.7 * 0.8 + 0.3 * 1.0, 0.7 * 0.2 + 0.3 * 1.0, 0.7 * 0.6 + 0.3 * 0.4, 0.7 * 0.0 + 0.3 * 0.5]
    assert out.topo_targets.tolist() == pytest.approx(topo, abs=1e-6)  # 1.0, 0.85, 0.3, 0.06
    assert out.pred_targets.tolist() == pytest.approx(pred, abs=1e-12)  # 0.86, 0.44, 0.54, 0.15
    assert out.targets.tolist() == pytest.approx([0.86, 0.44, 0.3, 0.06], abs=1e-6)


def test_first_split_from_the_official_start() -> None:
    """All tables start at 1: y = min(0.7 p + 0.3, 0.7 w + 0.3)."""
    ones = torch.ones(4, dtype=torch.float64)
    out = update_targets(torch.tensor([0.2, 0.8, 0.75, 0.25], dtype=torch.float64),
                         torch.tensor([0.5, 0.5, 1.0, 1.0], dtype=torch.float64), ones, ones)
    assert out.targets.tolist() == pytest.approx([0.3, 0.65, 1.0, 0.3], abs=1e-6)


def test_constant_scores_keep_every_pair_clean() -> None:
    """The official min-max divides 0 by 0 here; every pair gets posterior 1 instead."""
    ones = torch.ones(3, dtype=torch.float64)
    out = update_targets(torch.full((3,), 0.4, dtype=torch.float64), ones * 0.5, ones, ones)
    assert out.posterior.tolist() == [1.0, 1.0, 1.0]
    assert out.targets.tolist() == pytest.approx([0.65, 0.65, 0.65])


def test_bad_input_is_refused() -> None:
    ones = torch.ones(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="beta"):
        update_targets(ones, ones, ones, ones, beta=1.5)
    with pytest.raises(ValueError):
        structure_posterior(torch.tensor([0.1, float("nan"), 0.3]))
