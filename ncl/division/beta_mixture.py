"""L2RM's per-epoch division: a two-component Beta mixture on the normalised losses.

Facts: ``/work/plan/l2rm_notes.md`` sections 3.2-3.3 (the official code fits pomegranate's
``GeneralMixtureModel`` of two ``TrueBetaDistribution``; that fork no longer builds, so the EM
is written out here in numpy float64, following the behaviour described in the notes).

* :func:`normalise_for_beta` - min-max normalisation, then only the extremes 0 and 1 are moved
  inside the open interval (notes 3.2).
* :func:`fit_beta_mixture` - k-means++ initialisation, then EM with a method-of-moments M-step
  (notes 3.3 a-e); returns a :class:`BetaMixture`.
* :func:`beta_log_density`, :func:`beta_e_step`, :func:`beta_m_step` - the pieces of the EM.
* :func:`beta_clean_component` / :func:`beta_clean_probability` - the clean component is the
  one with the highest posterior at the probe ``x = 1e-3``; a sample's clean probability is its
  posterior under that component (notes 3.3 f). The caller splits with ``w > 0.5``.

Choices the notes leave open (documented where they apply): the shape floor ``MIN_SHAPE``
instead of the fork's clamp at 0, a numpy ``Generator`` instead of numpy's global RNG for the
k-means++ seeding, the cap ``refine_max_iter`` on the second EM phase, and ones (with a
``RuntimeWarning``) for constant losses.

The density's clamp of ``x`` (``clamp``, :data:`DENSITY_CLAMP`). The fork L2RM's README installs
(pomegranate pull request 901; its ``TrueBetaDistribution`` as stored at jmschrei/pomegranate
7f8ae86) has ``__init__(alpha, beta, frozen=False, min_alpha_beta=0.0, x_eps=1e-6)`` and
clamps ``x`` to ``[x_eps, 1 - x_eps]`` in the density only (the M-step's moments use ``x``
itself). L2RM builds its components through ``GeneralMixtureModel.from_samples``, whose
``blank()`` is ``TrueBetaDistribution(2, 2)``, so it runs with ``x_eps = 1e-6``: the default
here. (Other copies of a ``TrueBetaDistribution``, e.g. fcoulibaly/pomegranate, have no clamp
and return log-density 0 for ``x <= 0`` or ``x >= 1``.) ``clamp=0`` is the density with
no clamp: at ``x = 0`` the term ``(a - 1) log x`` is ``-inf`` for ``a > 1``, ``+inf`` for
``a < 1`` and NaN for ``a = 1`` (pomegranate's ``_log(0)`` is ``-inf``, as numpy's), and the
E-step's normalisation turns a row of infinities into NaN responsibilities, which the M-step's
sums spread to every parameter. L2RM never feeds exact 0 or 1 (:func:`normalise_for_beta`
replaces them by 1e-3 and 1 - 1e-3, as the official code does), so a run is safe either way;
:func:`fit_beta_mixture` refuses an exact 0 or 1 when ``clamp`` is 0.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import gammaln, logsumexp
from torch import Tensor

from ncl.division._checks import check_finite, check_vector
from ncl.division.gmm import minmax_normalize

#: ``x`` is clamped to ``[DENSITY_CLAMP, 1 - DENSITY_CLAMP]`` inside the density: the fork's
#: ``x_eps`` default in its later version, which L2RM's ``from_samples`` uses (module docstring).
DENSITY_CLAMP = 1e-6
#: A component whose summed responsibility is below this keeps its parameters (pomegranate).
MIN_COMPONENT_MASS = 1e-8
#: Floor of alpha and beta. The fork clamps at 0, which is not a valid Beta; with data in
#: (0, 1) the moment estimates are positive in exact arithmetic, so this only catches rounding.
MIN_SHAPE = 1e-6
#: The official clipping of the normalised losses and the clean-component probe (notes 3.2, 3.3f).
BETA_LOW = 1e-3
BETA_HIGH = 1.0 - 1e-3
BETA_PROBE = 1e-3


@dataclass(frozen=True, eq=False)
class BetaMixture:
    """A fitted two-component Beta mixture (float64 numpy arrays).

    Attributes:
        alphas: (K,) first shape parameters, > 0.
        betas: (K,) second shape parameters, > 0.
        weights: (K,) prior weights, summing to 1.
        n_iter: M-steps of the first EM phase (at most ``max_iter``).
        n_iter_refine: M-steps of the second phase (0 when it is off).
        log_likelihood: total log-likelihood ``sum_i log sum_k pi_k p_k(x_i)`` of the returned
            parameters on the fitted data.
        history: that total after the initial E-step and after every M-step, both phases in
            order (``1 + n_iter + n_iter_refine`` values).
    """

    alphas: np.ndarray
    betas: np.ndarray
    weights: np.ndarray
    n_iter: int
    n_iter_refine: int
    log_likelihood: float
    history: tuple[float, ...]
    clamp: float = DENSITY_CLAMP

    @property
    def means(self) -> np.ndarray:
        """(K,) component means ``alpha / (alpha + beta)``."""
        return self.alphas / (self.alphas + self.betas)

    def posterior(self, x: np.ndarray | Tensor) -> np.ndarray:
        """(N, K) responsibilities of the components for the values ``x`` (:func:`beta_e_step`,
        with the clamp the mixture was fitted with)."""
        values = _as_float64_vector(x, "x", min_len=1)
        return beta_e_step(values, self.alphas, self.betas, self.weights, self.clamp)[0]


def normalise_for_beta(losses: Tensor, low: float = BETA_LOW, high: float = BETA_HIGH) -> Tensor:
    """Min-max normalise the losses, then move the extremes into (0, 1) (notes 3.2).

    ``x = (l - min l) / (max l - min l)`` over all N samples
    (:func:`ncl.division.gmm.minmax_normalize`); then every ``x >= 1`` becomes ``high`` and every
    ``x <= 0`` becomes ``low``. Only these extremes are replaced, as in the official code: a
    value in ``(0, low)`` or ``(high, 1)`` is kept, so this is not a clip to ``[low, high]``.
    Constant losses normalise to zeros and therefore all become ``low``.

    Args:
        losses: (N,) per-sample losses, finite.
        low: the value replacing 0, in (0, 1) (official 1e-3).
        high: the value replacing 1, in (``low``, 1) (official 1 - 1e-3).

    Returns:
        (N,) values in (0, 1), floating dtype of ``losses`` (float32 for integer losses), same
        device.

    Raises:
        ValueError: on a bad ``losses`` vector (see ``minmax_normalize``) or bad bounds.
    """
    if not 0.0 < low < high < 1.0:
        raise ValueError(f"need 0 < `low` < `high` < 1, got low={low}, high={high}")
    x = minmax_normalize(losses)
    x = torch.where(x >= 1, torch.full_like(x, high), x)
    return torch.where(x <= 0, torch.full_like(x, low), x)


def beta_log_density(x: np.ndarray, alphas: np.ndarray, betas: np.ndarray,
                     clamp: float = DENSITY_CLAMP) -> np.ndarray:
    """Log Beta densities of every value under every component.

    ``log p_k(x) = (a_k - 1) log x + (b_k - 1) log(1 - x) + lnG(a_k + b_k) - lnG(a_k) - lnG(b_k)``
    with ``x`` clamped to ``[clamp, 1 - clamp]`` first (the fork's ``x_eps``, module
    docstring). With ``clamp = 0`` an ``x`` of exactly 0 or 1 gives the IEEE values of the
    formula, as the fork: ``-inf`` where the exponent ``a - 1`` (``b - 1``) is positive,
    ``+inf`` where it is negative, NaN where it is 0.

    Args:
        x: (N,) values in [0, 1].
        alphas: (K,) shapes ``a``, > 0.
        betas: (K,) shapes ``b``, > 0.
        clamp: in ``[0, 0.5)``; 1e-6 (the fork's default) or 0 (no clamp).

    Returns:
        (N, K) float64 log densities.
    """
    _check_clamp(clamp)
    xc = np.clip(np.asarray(x, dtype=np.float64), clamp, 1.0 - clamp)[:, None]
    a = np.asarray(alphas, dtype=np.float64)[None, :]
    b = np.asarray(betas, dtype=np.float64)[None, :]
    log_norm = gammaln(a + b) - gammaln(a) - gammaln(b)  # (1, K)
    # log(0) = -inf and 0 * -inf = NaN are the fork's values at an unclamped 0 or 1: no warnings
    with np.errstate(divide="ignore", invalid="ignore"):
        return (a - 1.0) * np.log(xc) + (b - 1.0) * np.log1p(-xc) + log_norm


def _check_clamp(clamp: float) -> None:
    if not 0.0 <= clamp < 0.5:
        raise ValueError(f"`clamp` must lie in [0, 0.5), got {clamp}")


def beta_e_step(
    x: np.ndarray, alphas: np.ndarray, betas: np.ndarray, weights: np.ndarray,
    clamp: float = DENSITY_CLAMP,
) -> tuple[np.ndarray, float]:
    """E-step: responsibilities and the total log-likelihood (notes 3.3 c).

    ``r_ik = pi_k p_k(x_i) / sum_j pi_j p_j(x_i)``, computed in log space with log-sum-exp;
    ``LL = sum_i log sum_k pi_k p_k(x_i)`` (a sum over the N samples, not a mean). A component
    of weight 0 gets responsibility 0. Without a clamp, a value at exactly 0 or 1 gets NaN
    responsibilities (its log densities are infinite, or NaN, :func:`beta_log_density`), as in
    the fork, and the total is then ``-inf``, ``+inf`` or NaN.

    Args:
        x: (N,) values in [0, 1].
        alphas, betas: (K,) shapes.
        weights: (K,) prior weights ``pi``, non-negative, summing to 1.
        clamp: the density's clamp of ``x`` (:func:`beta_log_density`).

    Returns:
        ``(r, LL)``: (N, K) responsibilities (rows sum to 1) and the float total.
    """
    with np.errstate(divide="ignore"):  # log(0) = -inf for an emptied component is intended
        log_w = np.log(np.asarray(weights, dtype=np.float64))
    joint = beta_log_density(x, alphas, betas, clamp) + log_w[None, :]  # (N, K)
    with np.errstate(invalid="ignore"):  # inf - inf = NaN: the fork's value at an unclamped 0/1
        total = logsumexp(joint, axis=1, keepdims=True)  # (N, 1)
        return np.exp(joint - total), float(total.sum())


def _moments_to_shapes(x: np.ndarray, r: np.ndarray) -> tuple[float, float]:
    """Weighted method of moments for one Beta component (notes 3.3 b).

    ``m = sum(r x) / W``, ``s2 = sum(r x^2) / W - m^2`` (``W = sum r > 0``);
    ``alpha = m (m (1 - m) / s2 - 1)``, ``beta = alpha (1 - m) / m``. No spread (``s2 <= 0``,
    e.g. one point) or a mean on the boundary gives the uniform ``alpha = beta = 1`` (the
    fork's older variant); both shapes are floored at :data:`MIN_SHAPE`.
    """
    w = r.sum()
    m = float((r * x).sum() / w)
    s2 = float((r * x * x).sum() / w - m * m)
    if s2 <= 0.0 or not 0.0 < m < 1.0:
        return 1.0, 1.0
    alpha = m * (m * (1.0 - m) / s2 - 1.0)
    beta = alpha * (1.0 - m) / m
    return max(alpha, MIN_SHAPE), max(beta, MIN_SHAPE)


def beta_m_step(
    x: np.ndarray, resp: np.ndarray, alphas: np.ndarray, betas: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """M-step: each component by weighted method of moments, weights ``W_k / sum W`` (notes 3.3 b).

    A component whose mass ``W_k = sum_i r_ik`` is below :data:`MIN_COMPONENT_MASS` keeps its
    previous ``(alpha, beta)``. There is no inertia: the new values replace the old ones. The
    moment estimate is not the maximum-likelihood Beta fit, so this EM is **not** guaranteed to
    increase the log-likelihood at every step (the official one is not either).

    Args:
        x: (N,) values.
        resp: (N, K) responsibilities.
        alphas, betas: (K,) current shapes (kept for components without mass).

    Returns:
        ``(alphas, betas, weights)``, each a new (K,) float64 array.
    """
    x = np.asarray(x, dtype=np.float64)
    resp = np.asarray(resp, dtype=np.float64)
    if resp.ndim != 2 or resp.shape[0] != x.shape[0] or resp.shape[1] != len(alphas):
        raise ValueError(f"`resp` must have shape (N, K)=({x.shape[0]}, {len(alphas)}), "
                         f"got {resp.shape}")
    new_a = np.array(alphas, dtype=np.float64)
    new_b = np.array(betas, dtype=np.float64)
    mass = resp.sum(axis=0)  # (K,)
    for k in range(resp.shape[1]):
        if mass[k] >= MIN_COMPONENT_MASS:
            new_a[k], new_b[k] = _moments_to_shapes(x, resp[:, k])
    return new_a, new_b, mass / mass.sum()


def _kmeans_init(
    x: np.ndarray, rng: np.random.Generator, updates: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """pomegranate's ``from_samples`` initialisation for k = 2 in one dimension (notes 3.3 a).

    k-means++ seeding (first centre uniform, second with probability proportional to the
    squared distance to the first), then ``updates`` Lloyd centroid updates (pomegranate's
    ``max_kmeans_iterations = 1``: its k-means loop runs two passes and the first one's update
    is a no-op, so exactly one update), then every point is labelled by its nearest centre
    (ties to the first). Each cluster is fitted by method of moments with unit weights; the
    prior weights are the cluster fractions. An empty cluster (impossible in 1-D with distinct
    seeds, guarded anyway) keeps the uniform Beta and weight 0.
    """
    centres = np.empty(2, dtype=np.float64)
    centres[0] = x[rng.integers(x.shape[0])]
    d2 = (x - centres[0]) ** 2
    centres[1] = x[rng.choice(x.shape[0], p=d2 / d2.sum())]

    def labels_for(c: np.ndarray) -> np.ndarray:
        return (np.abs(x - c[1]) < np.abs(x - c[0])).astype(np.int64)

    for _ in range(updates):
        labels = labels_for(centres)
        for k in range(2):
            if np.any(labels == k):
                centres[k] = x[labels == k].mean()
    labels = labels_for(centres)
    alphas, betas, weights = np.ones(2), np.ones(2), np.zeros(2)
    for k in range(2):
        member = labels == k
        if member.any():
            alphas[k], betas[k] = _moments_to_shapes(x[member], np.ones(int(member.sum())))
            weights[k] = member.mean()
    return alphas, betas, weights


def _run_em(
    x: np.ndarray,
    params: tuple[np.ndarray, np.ndarray, np.ndarray],
    max_iter: int,
    tol: float,
    clamp: float,
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], list[float], int]:
    """pomegranate's EM loop (notes 3.3 d): E-step on the starting parameters, then up to
    ``max_iter`` rounds of (M-step from the last responsibilities, E-step); stop as soon as the
    total log-likelihood improves by ``<= tol`` (a decrease stops it too). The returned
    parameters are those of the last M-step; the log-likelihoods start with the initial one.
    """
    resp, ll = beta_e_step(x, *params, clamp)
    history = [ll]
    n_iter, improvement = 0, np.inf
    while n_iter < max_iter and improvement > tol:
        params = beta_m_step(x, resp, params[0], params[1])
        resp, new_ll = beta_e_step(x, *params, clamp)
        improvement = new_ll - ll
        ll = new_ll
        history.append(ll)
        n_iter += 1
    return params, history, n_iter


def _as_float64_vector(x: np.ndarray | Tensor, name: str, min_len: int) -> np.ndarray:
    """A finite 1-D float64 numpy copy of ``x`` (ValueError naming ``name`` otherwise)."""
    if isinstance(x, Tensor):
        values = x.detach().cpu().to(torch.float64).numpy()
    elif isinstance(x, np.ndarray):
        values = x.astype(np.float64)
    else:
        # ValueError, not TypeError: ncl's convention for every bad argument.
        raise ValueError(  # noqa: TRY004
            f"`{name}` must be a numpy array or a torch.Tensor, got {type(x).__name__}")
    if values.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D (N,), got shape {values.shape}")
    if values.shape[0] < min_len:
        raise ValueError(f"`{name}` needs at least {min_len} entries, got {values.shape[0]}")
    if not np.isfinite(values).all():
        raise ValueError(f"`{name}` contains NaN/Inf; all entries must be finite")
    return values


def _check_em_settings(
    max_iter: int, tol: float, refine_tol: float | None, refine_max_iter: int
) -> None:
    if max_iter < 0:
        raise ValueError(f"`max_iter` must be >= 0, got {max_iter}")
    if not tol >= 0:
        raise ValueError(f"`tol` must be >= 0, got {tol}")
    if refine_tol is not None and not refine_tol >= 0:
        raise ValueError(f"`refine_tol` must be >= 0 or None, got {refine_tol}")
    if refine_max_iter < 0:
        raise ValueError(f"`refine_max_iter` must be >= 0, got {refine_max_iter}")


def fit_beta_mixture(
    x: np.ndarray | Tensor,
    max_iter: int = 10,
    tol: float = 1e-2,
    refine_tol: float | None = 0.1,
    refine_max_iter: int = 1000,
    seed: int | None = 0,
    kmeans_updates: int = 1,
    clamp: float = DENSITY_CLAMP,
) -> BetaMixture:
    """Fit L2RM's two-component Beta mixture by EM (notes 3.3).

    1. Initialisation: 1-D k-means with k = 2, k-means++ seeding from
       ``np.random.default_rng(seed)``, ``kmeans_updates`` Lloyd updates (1 = pomegranate's
       ``max_kmeans_iterations=1``), hard labels, method of moments per cluster, prior weights
       = cluster fractions.
    2. EM with at most ``max_iter`` M-steps, stopping when the total (summed over N)
       log-likelihood improves by ``<= tol`` (official ``from_samples(max_iterations=10,
       stop_threshold=1e-2)``).
    3. Unless ``refine_tol`` is None: EM again from that result with tolerance ``refine_tol``
       and at most ``refine_max_iter`` M-steps. The official code calls ``fit`` a second time
       with pomegranate's defaults (``stop_threshold=0.1``, ``max_iterations=1e8``, i.e. no
       practical cap); the cap here is a safety net.

    Each EM round is an M-step (:func:`beta_m_step`) followed by an E-step
    (:func:`beta_e_step`); the returned parameters are those of the last M-step, even when that
    step lowered the log-likelihood (which stops the loop; a moment-matching M-step can do
    that, see :func:`beta_m_step`).

    Determinism: the only randomness is the seeding, so a fixed ``seed`` gives identical
    results. The official code seeds from numpy's global RNG (seeded once per run), so its
    draws differ from these; ``seed=None`` draws fresh entropy.

    Args:
        x: (N,) values in [0, 1] (normally :func:`normalise_for_beta` output), N >= 2, with at
            least two distinct values.
        max_iter: M-steps of the first phase, >= 0 (official 10; 0 returns the initialisation).
        tol: stopping threshold of the first phase, >= 0 (official 1e-2).
        refine_tol: stopping threshold of the second phase (official 0.1), or None to skip it.
        refine_max_iter: cap on the second phase's M-steps, >= 0.
        seed: seed of the k-means++ generator; None for fresh entropy.
        kmeans_updates: Lloyd centroid updates after the seeding, >= 0 (official 1).
        clamp: the density's clamp of ``x`` (:func:`beta_log_density`; 1e-6, the fork's
            ``x_eps``; 0: none).

    Returns:
        The fitted :class:`BetaMixture`.

    Raises:
        ValueError: if ``x`` is not a finite 1-D array/tensor of >= 2 values in [0, 1] with two
            distinct values, on a negative count or tolerance, on a bad ``clamp``, or on an
            ``x`` of exactly 0 or 1 when ``clamp`` is 0 (the fork's EM turns it into NaN).
    """
    values = _as_float64_vector(x, "x", min_len=2)
    if values.min() < 0.0 or values.max() > 1.0:
        raise ValueError("`x` must lie in [0, 1] (normalise the losses first, "
                         "see normalise_for_beta)")
    if values.min() == values.max():
        raise ValueError("`x` needs at least two distinct values to fit two components")
    _check_clamp(clamp)
    if clamp == 0.0 and (values.min() == 0.0 or values.max() == 1.0):
        raise ValueError("`x` holds an exact 0 or 1, whose unclamped log density is infinite "
                         "(the fork's EM then gives NaN): normalise with normalise_for_beta "
                         "or fit with a clamp > 0")
    _check_em_settings(max_iter, tol, refine_tol, refine_max_iter)
    if kmeans_updates < 0:
        raise ValueError(f"`kmeans_updates` must be >= 0, got {kmeans_updates}")

    params = _kmeans_init(values, np.random.default_rng(seed), kmeans_updates)
    params, history, n_iter = _run_em(values, params, max_iter, tol, clamp)
    n_refine = 0
    if refine_tol is not None:
        # A fresh fit: its first E-step recomputes the last log-likelihood of phase 1.
        params, refine_history, n_refine = _run_em(values, params, refine_max_iter, refine_tol,
                                                   clamp)
        history += refine_history[1:]
    alphas, betas, weights = params
    return BetaMixture(alphas=alphas, betas=betas, weights=weights, n_iter=n_iter,
                       n_iter_refine=n_refine, log_likelihood=history[-1],
                       history=tuple(history), clamp=clamp)


def beta_clean_component(mixture: BetaMixture, probe: float = BETA_PROBE) -> int:
    """Index of the clean component: the highest posterior at ``x = probe`` (notes 3.3 f).

    This is the component most responsible for the smallest (clipped) loss; it uses the
    posterior (prior weights included), not the component means. Ties go to component 0.
    """
    if not 0.0 < probe < 1.0:
        raise ValueError(f"`probe` must lie in (0, 1), got {probe}")
    return int(np.argmax(mixture.posterior(np.array([probe]))[0]))


def beta_clean_probability(
    losses: Tensor,
    max_iter: int = 10,
    tol: float = 1e-2,
    refine_tol: float | None = 0.1,
    refine_max_iter: int = 1000,
    seed: int | None = 0,
    probe: float = BETA_PROBE,
    clamp: float = DENSITY_CLAMP,
) -> Tensor:
    """L2RM's clean probability of every training pair (notes 3.2-3.3).

    ``x = normalise_for_beta(losses)``; fit :func:`fit_beta_mixture`; ``k*`` =
    :func:`beta_clean_component` (posterior at ``x = probe``); return ``w_i = r_{k*}(x_i)``.
    The official code then keeps pair i as clean iff ``w_i > 0.5`` and uses ``w`` for nothing
    else. The EM runs on the CPU in float64.

    Degenerate input: if all losses are equal there is nothing to separate (the official
    normalisation divides by zero). Every sample then gets probability **1.0** and a
    ``RuntimeWarning`` is emitted, as :func:`ncl.division.gmm.gmm_clean_probability` does.

    Args:
        losses: (N,) per-sample losses (``triplet_loss(sims, 0.2, "mean")`` in eval mode), N >= 2,
            finite.
        max_iter, tol, refine_tol, refine_max_iter, seed: see :func:`fit_beta_mixture`.
        probe: the value whose most likely component is the clean one, in (0, 1) (official 1e-3).
        clamp: the density's clamp of ``x`` (:func:`beta_log_density`; 1e-6, the fork's
            ``x_eps``; 0: none, safe here: the normalised values never reach 0 or 1).

    Returns:
        (N,) probabilities in [0, 1] on the device of ``losses``; float64 for float64 losses,
        float32 otherwise.

    Raises:
        ValueError: if ``losses`` is not a finite 1-D tensor with >= 2 entries, or on bad
            settings.
    """
    check_vector(losses, "losses", min_len=2)
    check_finite(losses, "losses")
    _check_em_settings(max_iter, tol, refine_tol, refine_max_iter)
    _check_clamp(clamp)
    if not 0.0 < probe < 1.0:
        raise ValueError(f"`probe` must lie in (0, 1), got {probe}")
    out_dtype = torch.float64 if losses.dtype == torch.float64 else torch.float32
    if bool((losses == losses[0]).all()):
        warnings.warn(
            "beta_clean_probability: all losses are equal; returning clean probability 1.0 "
            "for every sample",
            RuntimeWarning,
            stacklevel=2,
        )
        return torch.ones(losses.shape, dtype=out_dtype, device=losses.device)

    x = normalise_for_beta(losses).detach().cpu().to(torch.float64).numpy()  # (N,)
    mixture = fit_beta_mixture(x, max_iter, tol, refine_tol, refine_max_iter, seed, clamp=clamp)
    clean = beta_clean_component(mixture, probe)
    posterior = mixture.posterior(x)[:, clean]  # (N,)
    return torch.from_numpy(posterior).to(dtype=out_dtype, device=losses.device)
