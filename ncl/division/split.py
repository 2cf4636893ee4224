"""Co-divide, step 2: clean probability -> clean/noisy split (LNC Alg. 1; spec 4.2.3, 4.2.5)."""

from __future__ import annotations

import warnings
from typing import Literal

import torch
from torch import Tensor

from ncl.division._checks import check_bool, check_finite, check_unit_interval, check_vector

CleanRule = Literal["greater", "greater_equal"]
OnEmptyClean = Literal["keep_all", "raise"]


def split_by_probability(
    prob: Tensor,
    threshold: float = 0.5,
    clean_rule: CleanRule = "greater",
    on_empty_clean: OnEmptyClean = "keep_all",
) -> Tensor:
    """Predicted-clean mask from clean probabilities, with the official 1 % fallback.

    Rule (spec 4.2.3 step 3): sample ``i`` is clean when ``prob[i] > threshold``
    (``clean_rule="greater"``, official code) or ``prob[i] >= threshold``
    (``"greater_equal"``, LNC Algorithm 1 lines 14-15). The two differ only for
    probabilities exactly equal to the threshold.

    Fallback (official): if even ``prob.min() > threshold``, nothing would be noisy, so the
    threshold becomes ``sort(prob)[N // 100]`` and the rule becomes strict ``>``; this
    forces roughly 1 % (at least ``N // 100 + 1`` samples, more with ties) into the noisy
    set. The fallback is always strict because with ``>=`` it would mark nothing noisy for
    N < 100.

    Empty clean set (not handled by the official code, spec 7.2; it silently trains on an
    empty labelled loader). It happens when every probability is <= the threshold, or in
    the fallback when more than 99 % of probabilities tie at the maximum (GMM posteriors
    saturating at exactly 1.0 on clean data). Choice:

    * ``"keep_all"`` (default): return all-True with a ``RuntimeWarning``. The split then
      carries no information, so the epoch degrades gracefully to training on every pair
      (still weighted by its clean probability in the co-rectified label) instead of
      crashing a long run or skipping an epoch.
    * ``"raise"``: raise ``ValueError``.

    Args:
        prob: (N,) clean probabilities, finite, N >= 1.
        threshold: p_threshold in [0, 1] (official 0.5).
        clean_rule: ``"greater"`` (official) or ``"greater_equal"`` (LNC Alg. 1).
        on_empty_clean: ``"keep_all"`` or ``"raise"``, see above.

    Returns:
        (N,) bool tensor, True = predicted clean (the labelled set).

    Raises:
        ValueError: on malformed input, unknown options, or an empty clean set with
            ``on_empty_clean="raise"``.
    """
    check_vector(prob, "prob")
    check_finite(prob, "prob")
    check_unit_interval(threshold, "threshold")
    if clean_rule not in ("greater", "greater_equal"):
        raise ValueError(f"`clean_rule` must be 'greater' or 'greater_equal', got {clean_rule!r}")
    if on_empty_clean not in ("keep_all", "raise"):
        raise ValueError(f"`on_empty_clean` must be 'keep_all' or 'raise', got {on_empty_clean!r}")

    if bool(prob.min() > threshold):
        fallback = torch.sort(prob).values[prob.numel() // 100]
        clean = prob > fallback
    elif clean_rule == "greater":
        clean = prob > threshold
    else:
        clean = prob >= threshold

    if not bool(clean.any()):
        if on_empty_clean == "raise":
            raise ValueError(
                f"split_by_probability: no sample is predicted clean (threshold {threshold}, "
                f"max prob {float(prob.max()):.4g})"
            )
        warnings.warn(
            "split_by_probability: empty clean set; treating every sample as clean",
            RuntimeWarning,
            stacklevel=2,
        )
        clean = torch.ones_like(clean)
    return clean


def partition_indices(clean: Tensor) -> tuple[Tensor, Tensor]:
    """Dataset indices of the labelled and unlabelled sets, increasing (spec 4.2.5).

    Args:
        clean: (N,) bool mask from :func:`split_by_probability`.

    Returns:
        ``(clean_idx, noisy_idx)``: int64 tensors of shapes (N_c,) and (N - N_c,).
    """
    check_vector(clean, "clean")
    check_bool(clean, "clean")
    clean_idx = torch.nonzero(clean, as_tuple=False).flatten()
    noisy_idx = torch.nonzero(~clean, as_tuple=False).flatten()
    return clean_idx, noisy_idx
