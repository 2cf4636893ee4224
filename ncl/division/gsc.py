"""GSC's end-of-epoch split and target update (official ``RINCE.split_batch``): pure.

With the per-sample structure scores ``s`` and diagonal probabilities ``p`` stored by the
epoch's training steps (:mod:`ncl.losses.gsc`)::

    s'      = (s - min s) / (max s - min s)                    (over every training pair)
    w       = posterior of the higher-mean component of a two-component GMM on s'
              (max_iter 10, tol 1e-2, reg_covar 5e-4: ncl.division.gmm)
    topo    <- beta * w + (1 - beta) * topo
    pred    <- beta * p + (1 - beta) * pred
    y       =  min(pred, topo)                                  (beta 0.7; all three start at 1)
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ncl.division._checks import check_finite, check_vector
from ncl.division.gmm import gmm_clean_probability, minmax_normalize


class GscTargets(NamedTuple):
    """The three per-sample tables after a split, ``(N,)`` each, and the posterior ``w``."""

    topo_targets: Tensor
    pred_targets: Tensor
    targets: Tensor
    posterior: Tensor


def structure_posterior(scores: Tensor, seed: int | None = 0) -> Tensor:
    """``(N,)`` posterior of the higher-mean component of the official GMM on the min-max
    normalised ``scores`` (high structure consistency = clean).

    The GMM is :func:`~ncl.division.gmm.gmm_clean_probability` (the low-mean posterior ``q``);
    with two components the high-mean one is ``1 - q``. Scores that are all equal have no
    spread to divide (the official code divides 0 by 0 and the GMM fails on the NaN): every
    pair then gets 1 (clean).
    """
    check_vector(scores, "scores", min_len=2)
    check_finite(scores, "scores")
    if bool((minmax_normalize(scores) == 0).all()):
        return torch.ones_like(scores, dtype=torch.float64)
    return 1.0 - gmm_clean_probability(scores.to(torch.float64), seed=seed)


def update_targets(scores: Tensor, preds: Tensor, topo_targets: Tensor, pred_targets: Tensor,
                   beta: float = 0.7, seed: int | None = 0) -> GscTargets:
    """One ``split_batch`` (module docstring), in float64.

    Args:
        scores: ``(N,)`` structure scores of the epoch.
        preds: ``(N,)`` diagonal probabilities of the epoch.
        topo_targets, pred_targets: ``(N,)`` the previous tables.
        beta: weight of the new values (0.7).
        seed: the GMM's ``random_state`` (the official ``None`` draws from numpy's stream).
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"`beta` must lie in [0, 1], got {beta}")
    posterior = structure_posterior(scores, seed)
    topo = beta * posterior + (1 - beta) * topo_targets.to(torch.float64)
    pred = beta * preds.to(torch.float64) + (1 - beta) * pred_targets.to(torch.float64)
    return GscTargets(topo, pred, torch.minimum(pred, topo), posterior)
