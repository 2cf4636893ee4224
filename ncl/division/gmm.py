"""Co-divide, step 1: per-sample losses -> clean probability (LNC Eq. 1-3; spec 4.2.4)."""

from __future__ import annotations

import warnings

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture
from torch import Tensor

from ncl.division._checks import check_finite, check_vector


def minmax_normalize(losses: Tensor) -> Tensor:
    """Min-max normalise a loss vector to [0, 1] (spec 4.2.4).

    The official code divides by ``max - min`` unconditionally and produces NaN when all
    losses are equal (spec 7.2). Here a constant vector maps to **zeros**: with no spread
    there is nothing to rank, and zeros keep every downstream value finite.

    Args:
        losses: (N,) per-sample losses, finite.

    Returns:
        (N,) tensor of the same dtype and device, ``(losses - min) / (max - min)``.

    Raises:
        ValueError: if ``losses`` is not a non-empty 1-D tensor or holds NaN/Inf.
    """
    check_vector(losses, "losses")
    check_finite(losses, "losses")
    x = losses if losses.is_floating_point() else losses.float()
    lo, hi = x.min(), x.max()
    spread = hi - lo
    if spread == 0:
        return torch.zeros_like(x)
    return (x - lo) / spread


def gmm_clean_probability(
    losses: Tensor,
    max_iter: int = 10,
    tol: float = 1e-2,
    reg_covar: float = 5e-4,
    seed: int | None = 0,
) -> Tensor:
    """Clean confidence ``w_i``: posterior of the low-mean component of a 2-GMM (LNC Eq. 3).

    Follows spec 4.2.4: min-max normalise the losses over the whole training set, fit
    ``sklearn.mixture.GaussianMixture(n_components=2, covariance_type="full",
    init_params="kmeans", n_init=1, max_iter=10, tol=1e-2, reg_covar=5e-4)`` and return the
    posterior of the component with the **smaller mean** (the small-loss, "clean" mode).

    Determinism: ``seed`` is passed as ``random_state``, so the result depends only on the
    losses and the seed. The official code leaves ``random_state=None``, i.e. it draws from
    numpy's global RNG, whose state depends on everything consumed before (spec 7.1); pass
    ``seed=None`` to reproduce that behaviour.

    The official setting stops after 10 EM iterations on purpose, so sklearn's
    ``ConvergenceWarning`` is silenced here (it would fire every epoch and mean nothing).

    Degenerate input: if all losses are equal there is no evidence that any sample is
    noisy and a GMM on a single point mass is meaningless (the official code gets NaN
    from the normalisation). Every sample then gets probability **1.0** and a
    ``RuntimeWarning`` is emitted.

    Args:
        losses: (N,) per-sample losses, N >= 2, finite.
        max_iter: EM iterations (official 10).
        tol: EM convergence threshold on the lower bound (official 1e-2).
        reg_covar: added to the covariance diagonal (official 5e-4).
        seed: ``random_state`` of the GMM; ``None`` uses numpy's global RNG (official).

    Returns:
        (N,) clean probabilities in [0, 1]; dtype of ``losses`` if floating (else
        float32), on the device of ``losses``.

    Raises:
        ValueError: if ``losses`` is not 1-D, has fewer than 2 entries or holds NaN/Inf,
            or if ``max_iter < 1``, ``tol <= 0`` or ``reg_covar < 0``.
    """
    check_vector(losses, "losses", min_len=2)
    check_finite(losses, "losses")
    if max_iter < 1:
        raise ValueError(f"`max_iter` must be >= 1, got {max_iter}")
    if tol <= 0:
        raise ValueError(f"`tol` must be > 0, got {tol}")
    if reg_covar < 0:
        raise ValueError(f"`reg_covar` must be >= 0, got {reg_covar}")

    out_dtype = losses.dtype if losses.is_floating_point() else torch.float32
    normalized = minmax_normalize(losses)
    if bool((normalized == 0).all()):
        warnings.warn(
            "gmm_clean_probability: all losses are equal; returning clean probability 1.0 "
            "for every sample",
            RuntimeWarning,
            stacklevel=2,
        )
        return torch.ones(losses.shape, dtype=out_dtype, device=losses.device)

    x = normalized.detach().cpu().to(torch.float64).numpy().reshape(-1, 1)  # (N, 1)
    posterior = _fit_low_mean_posterior(x, max_iter, tol, reg_covar, seed)  # (N,)
    return torch.from_numpy(posterior).to(dtype=out_dtype, device=losses.device)


def _fit_low_mean_posterior(
    x: np.ndarray, max_iter: int, tol: float, reg_covar: float, seed: int | None
) -> np.ndarray:
    """Fit the official 2-component GMM on (N, 1) data; posterior of the low-mean mode."""
    gmm = GaussianMixture(
        n_components=2,
        covariance_type="full",
        init_params="kmeans",
        n_init=1,
        max_iter=max_iter,
        tol=tol,
        reg_covar=reg_covar,
        random_state=seed,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gmm.fit(x)
    clean_component = int(np.argmin(gmm.means_.reshape(-1)))
    return gmm.predict_proba(x)[:, clean_component]
