"""Co-rectify: rectified soft correspondence labels (LNC Eq. 8; spec 4.2.6, 4.2.7).

The clean subset gets ``y_hat_i = w_i * y_i + (1 - w_i) * P_i`` (paper, per sample) or the
official code's broadcast ``T_ij = w_i + (1 - w_i) * P_j`` (switch
``ncr_margin_mode="official_2023"``) or its earlier ``T_i = w_i + (1 - w_i) * P_0``
(``official_2022_p0``, ``official_2021_fixed``); the noisy subset gets ``(P^A_i + P^B_i) / 2``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ncl.division._checks import check_finite, check_same_shape, check_vector
from ncl.losses.triplet import NcrMarginMode


def rectify_labels(prob: Tensor, prediction: Tensor, labels: Tensor | None = None) -> Tensor:
    """Rectified labels of the clean subset, per sample (LNC Eq. 8, first line).

    ``y_hat_i = w_i * y_i + (1 - w_i) * P_i`` with ``y_i = 1`` for every pair of the
    labelled set unless ``labels`` is given.

    Args:
        prob: (B,) clean confidences ``w_i`` of the batch, from the peer's co-divide.
        prediction: (B,) predictions ``P_i`` of the network being trained (Eq. 9).
        labels: optional (B,) original correspondence ``y_i``; defaults to ones.

    Returns:
        (B,) rectified labels (in [0, 1] when all inputs are).

    Raises:
        ValueError: on non-1-D, mismatched or non-finite inputs.
    """
    _check_pair(prob, prediction, "prob", "prediction")
    if labels is None:
        labels = torch.ones_like(prob)
    else:
        _check_pair(prob, labels, "prob", "labels")
    return prob * labels + (1 - prob) * prediction


def rectify_labels_official_2023(prob: Tensor, prediction: Tensor) -> Tensor:
    """Clean-subset labels as the released NCR code computes them (spec 4.2.7).

    The collate gives ``prob`` as a (B, 1) column and ``predict`` a (B,) vector, so the
    expression broadcasts to ``T_ij = w_i + (1 - w_i) * P_j``: row = anchor image ``i``'s
    clean probability, column = caption ``j``'s prediction. Its diagonal equals
    :func:`rectify_labels`.

    Args:
        prob: (B,) clean confidences ``w_i``.
        prediction: (B,) predictions ``P_j``.

    Returns:
        (B, B) target matrix ``T``.
    """
    _check_pair(prob, prediction, "prob", "prediction")
    w = prob.unsqueeze(1)  # (B, 1)
    return w + (1 - w) * prediction.unsqueeze(0)  # (B, B)


def rectify_labels_official_2022(prob: Tensor, prediction: Tensor) -> Tensor:
    """Clean-subset labels of the NCR code from 2021-10 to 2023-11 (spec 4.2.7).

    Until commit ``60256ba`` the code wrote ``prob * label + (1 - prob) * pl[0]``: the
    *first* prediction of the batch stands in for every pair, ``T_i = w_i + (1 - w_i) P_0``
    (a (B, 1) column in the code; its margins are indexed by the image row). From the
    release to ``31dd08e`` these targets were computed but the hinges used the fixed margin.

    Args:
        prob: (B,) clean confidences ``w_i``.
        prediction: (B,) predictions; only ``prediction[0]`` is used.

    Returns:
        (B,) targets ``T_i``.
    """
    _check_pair(prob, prediction, "prob", "prediction")
    return prob + (1 - prob) * prediction[0]


def rectify_by_mode(mode: NcrMarginMode, prob: Tensor, prediction: Tensor) -> Tensor:
    """Clean-subset targets of NCR's margin ``mode`` (spec 4.2.7): :func:`rectify_labels`
    (``per_sample``), :func:`rectify_labels_official_2023` (``official_2023``) or
    :func:`rectify_labels_official_2022` (``official_2022_p0``, and ``official_2021_fixed``,
    whose code computed these targets but used a fixed margin)."""
    if mode == "per_sample":
        return rectify_labels(prob, prediction)
    if mode == "official_2023":
        return rectify_labels_official_2023(prob, prediction)
    return rectify_labels_official_2022(prob, prediction)


def rectify_noisy_labels(prediction_a: Tensor, prediction_b: Tensor) -> Tensor:
    """Rectified labels of the noisy subset: ``(P^A_i + P^B_i) / 2`` (LNC Eq. 8, 2nd line).

    The official code reshapes the result to a (B, 1) column before building the soft
    margin; how that column is indexed by the two hinges (spec 4.2.7, last bullet) is the
    loss's concern, not this function's.

    Args:
        prediction_a: (B,) predictions of network A on the noisy batch.
        prediction_b: (B,) predictions of network B on the same batch.

    Returns:
        (B,) rectified labels.
    """
    _check_pair(prediction_a, prediction_b, "prediction_a", "prediction_b")
    return (prediction_a + prediction_b) / 2


def _check_pair(a: Tensor, b: Tensor, name_a: str, name_b: str) -> None:
    check_vector(a, name_a)
    check_vector(b, name_b)
    check_same_shape(a, b, name_a, name_b)
    check_finite(a, name_a)
    check_finite(b, name_b)
