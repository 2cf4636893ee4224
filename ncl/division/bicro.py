"""BiCro's division of the training pairs (CVPR 2023; docs/methods/bicro.md): a two-component
Beta mixture on each network's min-max normalised mean hinge, then a threshold.

This is not L2RM's mixture (:mod:`ncl.division.beta_mixture`: k-means++ start, log-space EM,
a clean component found by a probe). BiCro's (official ``BetaMixture1D``, the mixture of Arazo
et al.'s label-noise code) starts from fixed shapes and works in linear space:

* start ``alpha = (1, 2)``, ``beta = (2, 1)``, ``pi = (1/2, 1/2)``;
* the fit sees ``x`` clamped to ``[1e-4, 1 - 1e-4]``;
* E-step ``r_k(x) = pi_k Beta(x; alpha_k, beta_k)``, every value ``<= 1e-12`` raised to
  ``1e-12``, then normalised over ``k``;
* M-step by weighted moments, ``m = sum r x / sum r``, ``s2 = sum r (x - m)^2 / sum r``,
  ``alpha = m (m (1 - m) / s2 - 1)``, ``beta = alpha (1 - m) / m``, ``pi_k = sum r_k / N``;
* ``max_iter`` (10) rounds, no tolerance;
* clean probability: ``pi_c p_c(x) / (sum_k pi_k p_k(x) + 1e-12)``.

Three quirks of the official code are switches here (``official`` keeps each):

* ``clean_component``: the code takes component 0 whatever the fit made of it
  (``official``); ``lower_mean`` takes the component with the smaller mean
  ``alpha / (alpha + beta)`` (the small-loss one).
* ``posterior_input``: the code evaluates the posterior on the *unclamped* ``x``
  (``official``): at ``x = 0`` (the smallest loss) the density of a component with
  ``alpha < 1`` is infinite and the posterior NaN, so that pair is never clean, and a NaN makes
  ``prob.min()`` NaN, so the 1 % fallback never fires; ``clamped`` evaluates it on the
  clamped ``x`` the mixture was fitted on (finite).
* ``fallback``: when every probability exceeds the threshold the code takes
  ``np.sort(prob)[N // 100]`` of an ``(N, 1)`` column, which sorts each one-element row and so
  picks the unsorted ``prob[N // 100]`` (``official``); ``sorted`` takes the
  ``N // 100``-th smallest probability, as the comment means.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from scipy import stats
from torch import Tensor

from ncl.division._checks import check_finite, check_vector

CleanComponent = Literal["official", "lower_mean"]
PosteriorInput = Literal["official", "clamped"]
Fallback = Literal["official", "sorted"]

#: The official constants: the fit's clamp of ``x`` and the floor of the responsibilities
#: (also the posterior's guard in the denominator).
FIT_CLAMP = 1e-4
EPS = 1e-12
#: The official start: component 0 leans to small values, component 1 to large ones.
START_ALPHAS, START_BETAS, START_WEIGHTS = (1.0, 2.0), (2.0, 1.0), (0.5, 0.5)


@dataclass(frozen=True, eq=False)
class BiCroBeta:
    """A fitted two-component Beta mixture (float64 arrays of shape ``(2,)``)."""

    alphas: np.ndarray
    betas: np.ndarray
    weights: np.ndarray

    @property
    def means(self) -> np.ndarray:
        """``(2,)`` component means ``alpha / (alpha + beta)``."""
        return self.alphas / (self.alphas + self.betas)

    def weighted_densities(self, x: np.ndarray) -> np.ndarray:
        """``(2, N)`` ``pi_k Beta(x; alpha_k, beta_k)`` (scipy's density: ``inf`` at ``x = 0``
        for ``alpha < 1``, at ``x = 1`` for ``beta < 1``)."""
        return np.stack([self.weights[k] * stats.beta.pdf(x, self.alphas[k], self.betas[k])
                         for k in range(2)])


def fit_clamp(x: np.ndarray, clamp: float = FIT_CLAMP) -> np.ndarray:
    """``x`` with values ``>= 1 - clamp`` set to ``1 - clamp`` and ``<= clamp`` to ``clamp``."""
    out = np.array(x, dtype=np.float64)
    out[out >= 1 - clamp] = 1 - clamp
    out[out <= clamp] = clamp
    return out


def responsibilities(mixture: BiCroBeta, x: np.ndarray) -> np.ndarray:
    """E-step: ``(2, N)`` weighted densities floored at ``1e-12``, normalised over components."""
    r = mixture.weighted_densities(x)
    r[r <= EPS] = EPS
    return r / r.sum(axis=0)


def weighted_beta_moments(x: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """``(alpha, beta)`` of one component by weighted moments (module docstring)."""
    mean = float(np.sum(w * x) / np.sum(w))
    var = float(np.sum(w * (x - mean) ** 2) / np.sum(w))
    alpha = mean * (mean * (1 - mean) / var - 1)
    return alpha, alpha * (1 - mean) / mean


def fit_bicro_beta(x: np.ndarray, max_iter: int = 10) -> BiCroBeta:
    """Fit the mixture to ``(N,)`` values in [0, 1] from the official start (module docstring).

    Args:
        x: ``(N,)`` normalised losses; clamped into ``[1e-4, 1 - 1e-4]`` for the fit.
        max_iter: EM rounds (official 10), each an E-step then an M-step.

    Returns:
        The mixture after ``max_iter`` rounds.
    """
    if max_iter < 0:
        raise ValueError(f"`max_iter` must be >= 0, got {max_iter}")
    xc = fit_clamp(x)
    mixture = BiCroBeta(np.array(START_ALPHAS), np.array(START_BETAS), np.array(START_WEIGHTS))
    for _ in range(max_iter):
        r = responsibilities(mixture, xc)
        shapes = [weighted_beta_moments(xc, r[k]) for k in range(2)]
        mixture = BiCroBeta(np.array([s[0] for s in shapes]), np.array([s[1] for s in shapes]),
                            r.sum(axis=1) / r.sum())
    return mixture


def clean_posterior(mixture: BiCroBeta, x: np.ndarray, component: int) -> np.ndarray:
    """``(N,)`` ``pi_c p_c(x) / (sum_k pi_k p_k(x) + 1e-12)``; NaN where a density is infinite."""
    dens = mixture.weighted_densities(x)
    with np.errstate(invalid="ignore"):
        return dens[component] / (dens.sum(axis=0) + EPS)


def bicro_clean_probability(losses: Tensor, clean_component: CleanComponent = "official",
                            posterior_input: PosteriorInput = "official",
                            max_iter: int = 10) -> Tensor:
    """BiCro's clean probability of every training pair from one network's losses.

    ``x = (l - min l) / (max l - min l)`` in the losses' dtype (float32 in training, as the
    official code), the mixture of :func:`fit_bicro_beta`, then the posterior of the clean
    component (``clean_component``) on ``x`` (``posterior_input``; module docstring).

    Args:
        losses: ``(N,)`` per-sample mean hinges, finite, ``N >= 2``.
        clean_component, posterior_input: the switches of the module docstring.
        max_iter: EM rounds (10).

    Returns:
        ``(N,)`` float64 on the losses' device; with ``posterior_input="official"`` it may hold
        NaN (at ``x = 0`` when ``alpha_c < 1``). Constant losses: all ones and a
        ``RuntimeWarning`` (the official normalisation divides by zero).
    """
    check_vector(losses, "losses", min_len=2)
    check_finite(losses, "losses")
    if clean_component not in ("official", "lower_mean"):
        raise ValueError(f"`clean_component` must be 'official' or 'lower_mean', got {clean_component!r}")
    if posterior_input not in ("official", "clamped"):
        raise ValueError(f"`posterior_input` must be 'official' or 'clamped', got {posterior_input!r}")
    if bool((losses == losses[0]).all()):
        warnings.warn("bicro_clean_probability: all losses are equal; returning clean "
                      "probability 1.0 for every pair", RuntimeWarning, stacklevel=2)
        return torch.ones(losses.shape, dtype=torch.float64, device=losses.device)
    values = losses if losses.is_floating_point() else losses.float()
    x = ((values - values.min()) / (values.max() - values.min())).detach().cpu().double().numpy()
    mixture = fit_bicro_beta(x, max_iter)
    component = 0 if clean_component == "official" else int(np.argmin(mixture.means))
    at = x if posterior_input == "official" else fit_clamp(x)
    prob = clean_posterior(mixture, at, component)
    return torch.from_numpy(prob).to(losses.device)


def bicro_split(prob: Tensor, threshold: float = 0.5, fallback: Fallback = "official") -> Tensor:
    """BiCro's (and NCR's) ``split_prob``: clean iff ``prob > threshold``; when even the smallest
    probability exceeds the threshold, the threshold becomes ``prob[N // 100]``
    (``official``, the unsorted column) or ``sort(prob)[N // 100]`` (``sorted``).

    NaN follows numpy: ``prob.min()`` is NaN when any probability is, so the fallback does not
    fire, and a NaN pair is never clean.

    Args:
        prob: ``(N,)`` clean probabilities (NaN allowed).
        threshold: ``p_threshold`` (0.5).
        fallback: the switch above.

    Returns:
        ``(N,)`` bool, True = predicted clean (the peer's labelled set).
    """
    check_vector(prob, "prob")
    if fallback not in ("official", "sorted"):
        raise ValueError(f"`fallback` must be 'official' or 'sorted', got {fallback!r}")
    p = prob.detach().cpu().double().numpy()
    cut = float(threshold)
    if np.min(p) > cut:  # False when any value is NaN (numpy's min propagates it)
        cut = float(p[len(p) // 100] if fallback == "official" else np.sort(p)[len(p) // 100])
    with np.errstate(invalid="ignore"):
        return torch.from_numpy(p > cut).to(prob.device)
