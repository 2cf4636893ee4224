"""CREAM's (TIP 2024) division and targets, and SPS's (IJCAI 2025) per-network split, as pure
functions and data.

CREAM divides by the agreement of two networks' GMMs (official ``split_samples``): a pair is
**clean** when both call it clean, **noisy** when both call it noisy and **hard** when they
disagree (:func:`agreement_split`); each network's call is ``prob > threshold`` with the
official 1 % rule (:func:`official_clean_mask`). Its targets (no gradient, eval mode):

* clean: ``w_peer + (1 - w_peer) p_own`` (:func:`clean_targets`);
* hard: ``m + (1 - m) p_own`` with ``m`` the mean of both networks' probabilities
  (:func:`hard_targets`);
* noisy ("mining"): the mean of both networks' predictions (:func:`mined_targets`).

SPS splits each network's probabilities on their own (:func:`sps_split`): strictly clean
``prob > strict`` (0.6), clean the rest of the official ``prob > threshold`` mask (0.5, 1 %
rule), noisy the others.

Subset codes: :data:`CLEAN` (0), :data:`HARD` (1), :data:`NOISY` (2); SPS uses
:data:`STRICT` (3) for its strictly clean pairs and :data:`CLEAN` for the rest of its clean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ncl.division._checks import check_finite, check_same_shape, check_unit_interval, check_vector
from ncl.division.co_divide import Division

CLEAN, HARD, NOISY, STRICT = 0, 1, 2, 3
SUBSET_NAMES = {CLEAN: "clean", HARD: "hard", NOISY: "noisy", STRICT: "strict"}


def official_clean_mask(prob: Tensor, threshold: float = 0.5) -> Tensor:
    """``prob > threshold`` (N,) bool, with the official 1 % rule: when every probability
    exceeds the threshold it becomes ``sort(prob)[N // 100]`` (so about 1 % is not clean).

    Unlike :func:`ncl.division.split_by_probability` an empty clean mask stays empty, as in
    the official ``split_prob``.
    """
    check_vector(prob, "prob")
    check_finite(prob, "prob")
    check_unit_interval(threshold, "threshold")
    if bool(prob.min() > threshold):
        threshold = float(torch.sort(prob).values[prob.numel() // 100])
    return prob > threshold


def agreement_split(prob: Tensor, threshold: float = 0.5) -> Tensor:
    """CREAM's three-way split (N,) int8 of two networks' ``(2, N)`` clean probabilities:
    :data:`CLEAN` where both masks (:func:`official_clean_mask`) are clean, :data:`NOISY`
    where neither is, :data:`HARD` where they disagree."""
    if prob.dim() != 2 or prob.shape[0] != 2:
        raise ValueError(f"prob must be (2, N), one row per network, got {tuple(prob.shape)}")
    a, b = (official_clean_mask(row, threshold) for row in prob)
    subset = torch.full(a.shape, HARD, dtype=torch.int8)
    subset[a & b] = CLEAN
    subset[~a & ~b] = NOISY
    return subset


def sps_split(prob: Tensor, threshold: float = 0.5, strict: float = 0.6) -> Tensor:
    """SPS's split of one network's ``(N,)`` clean probabilities (N,) int8: :data:`STRICT`
    where ``prob > strict``, :data:`CLEAN` where the official mask (``prob > threshold``, 1 %
    rule) holds otherwise, :data:`NOISY` elsewhere."""
    check_unit_interval(strict, "strict")
    clean = official_clean_mask(prob, threshold)
    subset = torch.full(prob.shape, NOISY, dtype=torch.int8)
    subset[clean] = CLEAN
    subset[prob > strict] = STRICT
    return subset


def clean_targets(peer_prob: Tensor, own_prediction: Tensor) -> Tensor:
    """``w_peer + (1 - w_peer) p_own`` (B,): the clean batch's targets (annotated label 1)."""
    check_same_shape(peer_prob, own_prediction, "peer_prob", "own_prediction")
    w = peer_prob.to(own_prediction.dtype)
    return w + (1 - w) * own_prediction


def hard_targets(prob_a: Tensor, prob_b: Tensor, own_prediction: Tensor) -> Tensor:
    """``m + (1 - m) p_own`` with ``m = (w_A + w_B) / 2`` (B,): the hard batch's targets."""
    check_same_shape(prob_a, prob_b, "prob_a", "prob_b")
    m = ((prob_a + prob_b) / 2).to(own_prediction.dtype)
    return m + (1 - m) * own_prediction


def mined_targets(own_prediction: Tensor, peer_prediction: Tensor) -> Tensor:
    """``(p_own + p_peer) / 2`` (B,): the noisy batch's mined targets."""
    check_same_shape(own_prediction, peer_prediction, "own_prediction", "peer_prediction")
    return (own_prediction + peer_prediction) / 2


@dataclass(kw_only=True)
class SubsetDivision(Division):
    """The shared :class:`~ncl.division.co_divide.Division` record (``losses``, ``prob``,
    ``clean`` ``(2, N)``: each network's own GMM and official mask) with the subsets the
    epoch trains on.

    Attributes:
        subset: CREAM: ``(N,)`` int8 codes, one split for both networks; SPS: ``(2, N)``, row
            ``k`` the split of network ``k``'s probabilities (network ``1 - k`` trains on it).
    """

    subset: Tensor

    def state(self) -> dict[str, Any]:
        return {**super().state(), "subset": self.subset}

    def sizes(self, row: int | None = None) -> dict[str, int]:
        """CREAM: ``{"clean", "hard", "noisy"}`` sizes; SPS (``row``): ``{"strict", "clean",
        "noisy"}`` of ``subset[row]``."""
        codes = self.subset if row is None else self.subset[row]
        names = (CLEAN, HARD, NOISY) if row is None else (STRICT, CLEAN, NOISY)
        return {SUBSET_NAMES[code]: int((codes == code).sum()) for code in names}
