"""L2RM's ``bmm_density_clamp`` (the fork's ``x_eps`` of the Beta density, issue 40): it
reaches the division's mixture, and the fit uses it."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from ncl.callbacks.division import fit_mixtures
from ncl.callbacks.protocols import GMMSpec
from ncl.errors import ConfigError
from ncl.methods.l2rm import L2RM
from ncl.models.sgraf import SGRAF
from tiny_runs import TINY_SGRAF

BACKBONE = partial(SGRAF, **TINY_SGRAF)


def test_the_option_reaches_the_division_mixture() -> None:
    assert L2RM(50, BACKBONE).hparams.bmm_density_clamp == 1e-6  # the fork's x_eps default
    _, gmm = L2RM(50, BACKBONE, bmm_density_clamp=0.0, division_batch_size=4).division_pass(1)
    assert gmm.mixture == "beta" and gmm.density_clamp == 0.0 and gmm.seed == 0
    assert (gmm.max_iter, gmm.tol, gmm.refine_tol) == (10, 1e-2, 0.1)
    with pytest.raises(ConfigError, match="model.bmm_density_clamp"):
        L2RM(50, BACKBONE, bmm_density_clamp=-1e-6)


def test_the_division_fit_uses_the_clamp() -> None:
    """Losses whose normalised values are 1e-3 (the replaced minimum), 20 values in
    [1e-9, 5e-7] (inside the 1e-6 clamp), two Beta samples and 1 - 1e-3 (the replaced
    maximum): the two fits differ, and the unclamped one is finite (the normalisation never
    produces an exact 0 or 1)."""
    rng = np.random.default_rng(0)
    values = np.concatenate([[0.0], np.linspace(1e-9, 5e-7, 20), rng.beta(2, 8, 40),
                             rng.beta(8, 2, 20), [1.0]])
    losses = torch.tensor(values)[None]
    with_clamp = fit_mixtures(losses, GMMSpec(mixture="beta"))
    without = fit_mixtures(losses, GMMSpec(mixture="beta", density_clamp=0.0))
    assert torch.isfinite(without).all()
    assert not torch.equal(with_clamp, without)
