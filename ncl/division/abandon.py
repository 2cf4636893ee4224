"""LNC Randomly Noise Abandon, RNA (LNC Eq. 7 and Algorithm 1 lines 6-9).

After each warm-up epoch both networks' clean confidences are computed on the full data
D; the doubly-noisy set ``D_d = {j : w_j^A < 0.5 and w_j^B < 0.5}`` (Eq. 7, strict ``<``)
is formed and a random half of it is removed: ``D_W = D - RandomSelection(D_d, |D_d|/2)``.
D_W is rebuilt from D each warm-up epoch (not cumulative) and is only used for warm-up.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ncl.division._checks import (
    check_bool,
    check_finite,
    check_same_shape,
    check_unit_interval,
    check_vector,
)


def doubly_noisy_mask(prob_a: Tensor, prob_b: Tensor, threshold: float = 0.5) -> Tensor:
    """Pairs that both networks consider noisy: ``w^A < t and w^B < t`` (LNC Eq. 7).

    Args:
        prob_a: (N,) clean confidences from network A.
        prob_b: (N,) clean confidences from network B.
        threshold: t in [0, 1] (paper 0.5).

    Returns:
        (N,) bool, True where both are strictly below ``threshold``.
    """
    check_vector(prob_a, "prob_a")
    check_vector(prob_b, "prob_b")
    check_same_shape(prob_a, prob_b, "prob_a", "prob_b")
    check_finite(prob_a, "prob_a")
    check_finite(prob_b, "prob_b")
    check_unit_interval(threshold, "threshold")
    return (prob_a < threshold) & (prob_b < threshold)


def noise_abandon_mask(
    noisy_a: Tensor,
    noisy_b: Tensor,
    drop_fraction: float = 0.5,
    *,
    generator: torch.Generator,
) -> Tensor:
    """Keep-mask of the warm-up set after Randomly Noise Abandon (LNC Eq. 7, Alg. 1 l. 9).

    Among the ``n`` pairs flagged noisy by BOTH masks, exactly
    ``floor(drop_fraction * n)`` are chosen uniformly at random (without replacement) and
    dropped; every other pair is kept. Floor: the paper's ``|D_d| / 2`` is not an integer
    for odd ``n`` and rounding down never drops more than the stated fraction.

    Args:
        noisy_a: (N,) bool, noisy according to network A (e.g. ``w^A < 0.5``).
        noisy_b: (N,) bool, noisy according to network B.
        drop_fraction: fraction of the doubly-noisy pairs to drop, in [0, 1] (paper 0.5).
        generator: torch RNG for the selection (required, keyword-only, so the draw is
            reproducible and never touches the global RNG; seed it identically on every
            DDP rank so all ranks drop the same pairs).

    Returns:
        (N,) bool keep-mask, True = the pair stays in the warm-up set D_W.
    """
    check_vector(noisy_a, "noisy_a")
    check_vector(noisy_b, "noisy_b")
    check_bool(noisy_a, "noisy_a")
    check_bool(noisy_b, "noisy_b")
    check_same_shape(noisy_a, noisy_b, "noisy_a", "noisy_b")
    check_unit_interval(drop_fraction, "drop_fraction")
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"`generator` must be a torch.Generator, got {type(generator).__name__}")

    candidates = torch.nonzero(noisy_a & noisy_b, as_tuple=False).flatten()  # (n,)
    # The tiny epsilon keeps e.g. 0.29 * 100 = 28.999999999999996 from flooring to 28.
    num_drop = min(candidates.numel(), math.floor(drop_fraction * candidates.numel() + 1e-9))
    keep = torch.ones_like(noisy_a)
    if num_drop == 0:
        return keep
    order = torch.randperm(candidates.numel(), generator=generator, device=generator.device)
    keep[candidates[order[:num_drop].to(candidates.device)]] = False
    return keep
