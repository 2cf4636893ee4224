"""MSCN's data purification (``split_data`` of ``main_MSCN.py`` at hhc1997/MSCN 01febc2):
a two-component Beta mixture initialised from the meta set, fitted on the training pairs.

1. Every value (corrected similarity in (0, 1)) at or beyond the ends is moved inside:
   ``x >= 1 -> 1 - 1e-3``, ``x <= 0 -> 1e-3`` (:func:`clamp_extremes`; only the extremes, as
   the official ``10e-4``).
2. One Beta is fitted to the meta set's non-corresponding pairs and one to its corresponding
   pairs by the method of moments (``TrueBetaDistribution.from_samples`` of the pomegranate
   fork; :func:`beta_from_moments`); they are the mixture's components 0 (noisy) and 1
   (clean), with equal weights (``GeneralMixtureModel``'s default).
3. EM on the training values (``fit(stop_threshold=1e-2, max_iterations=10)``) with ncl's
   Beta mixture steps (:func:`~ncl.division.beta_mixture.beta_e_step`,
   :func:`~ncl.division.beta_mixture.beta_m_step`): an E-step on the start, then up to
   ``max_iter`` (M-step, E-step) rounds, stopping when the total log-likelihood gains
   ``<= tol``.
4. ``prob`` = posterior of component 1, ``clean = prob > 0.5``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ncl.division.beta_mixture import DENSITY_CLAMP, BetaMixture, beta_e_step, beta_m_step

#: The official clamp of the similarities (``10e-4`` = 1e-3).
SIM_EPS = 1e-3


def clamp_extremes(x: np.ndarray, eps: float = SIM_EPS) -> np.ndarray:
    """``x >= 1 -> 1 - eps`` and ``x <= 0 -> eps`` (float64 copy); other values unchanged."""
    out = np.array(x, dtype=np.float64)
    out[out >= 1] = 1.0 - eps
    out[out <= 0] = eps
    return out


def beta_from_moments(x: np.ndarray) -> tuple[float, float]:
    """Method-of-moments Beta fit ``(alpha, beta)`` of values in (0, 1):
    ``m = mean``, ``v = var`` (population), ``alpha = m (m (1 - m) / v - 1)``,
    ``beta = alpha (1 - m) / m``.

    Raises:
        ValueError: fewer than two values, no spread, or moments that give no Beta
            (``v >= m (1 - m)``).
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or x.shape[0] < 2:
        raise ValueError(f"a Beta fit needs at least two values, got shape {x.shape}")
    m, v = float(x.mean()), float(x.var())
    if not 0.0 < v < m * (1.0 - m):
        raise ValueError(f"values with mean {m:.4g} and variance {v:.4g} fit no Beta")
    alpha = m * (m * (1.0 - m) / v - 1.0)
    return alpha, alpha * (1.0 - m) / m


def meta_mixture_start(meta_values: np.ndarray, meta_labels: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(alphas, betas, weights)`` of the start: component 0 from the meta values labelled 0,
    component 1 from those labelled 1 (both clamped, :func:`clamp_extremes`), weights 1/2."""
    values = clamp_extremes(meta_values)
    labels = np.asarray(meta_labels)
    noisy = beta_from_moments(values[labels < 0.5])
    clean = beta_from_moments(values[labels > 0.5])
    return (np.array([noisy[0], clean[0]]), np.array([noisy[1], clean[1]]), np.full(2, 0.5))


def fit_from_start(x: np.ndarray, start: tuple[np.ndarray, np.ndarray, np.ndarray],
                   max_iter: int = 10, tol: float = 1e-2, clamp: float = DENSITY_CLAMP) -> BetaMixture:
    """EM from ``start`` on ``x`` (already clamped): E-step, then up to ``max_iter`` rounds of
    (M-step, E-step) while the total log-likelihood gains more than ``tol``."""
    params = start
    resp, ll = beta_e_step(x, *params, clamp)
    history, n_iter, gain = [ll], 0, np.inf
    while n_iter < max_iter and gain > tol:
        params = beta_m_step(x, resp, params[0], params[1])
        resp, new_ll = beta_e_step(x, *params, clamp)
        gain, ll = new_ll - ll, new_ll
        history.append(ll)
        n_iter += 1
    return BetaMixture(params[0], params[1], params[2], n_iter, 0, ll, tuple(history), clamp)


@dataclass(frozen=True, eq=False)
class Purification:
    """One network's purification: ``prob`` ``(N,)`` posterior of the clean component,
    ``clean`` ``(N,)`` bool ``prob > 0.5``, and the fitted mixture."""

    prob: Tensor
    clean: Tensor
    mixture: BetaMixture


def purify(train_values: Tensor, meta_values: Tensor, meta_labels: Tensor, max_iter: int = 10,
           tol: float = 1e-2, threshold: float = 0.5, clamp: float = DENSITY_CLAMP) -> Purification:
    """The purification split of ``(N,)`` training values from ``(M,)`` meta values and their
    ``(M,)`` 0/1 labels (module docstring, steps 1-4). ``prob`` is float32 on the CPU."""
    start = meta_mixture_start(meta_values.detach().cpu().double().numpy(),
                               meta_labels.detach().cpu().numpy())
    x = clamp_extremes(train_values.detach().cpu().double().numpy())
    mixture = fit_from_start(x, start, max_iter, tol, clamp)
    prob = torch.from_numpy(mixture.posterior(x)[:, 1]).float()
    return Purification(prob, prob > threshold, mixture)
