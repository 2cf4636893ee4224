"""Noise-detection quality of a clean/noisy division (LNC, IJCV 2024, Table 7).

LNC reports the recall, precision and F1 of the *noisy* pairs its division finds, so the
positive class here is NOISY. The ground-truth clean mask is a diagnostic only: it must never
reach a method's loss (design notes, "Data conventions").

The confusion counts come from torchmetrics' ``binary_stat_scores`` (positives = noisy). Its
``binary_precision`` / ``binary_recall`` / ``binary_f1_score`` have our definitions (with
``zero_division=0``, sklearn's), but divide in float32; the ratios are taken here from the
exact counts in Python floats, so the reported numbers (``ncl predict``'s metrics file, the
logs) keep every digit they had.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics.functional.classification import binary_stat_scores


def _check_masks(pred_clean: Tensor, true_clean: Tensor) -> None:
    """Raise ValueError unless both masks are non-empty bool tensors of the same shape."""
    for name, mask in (("pred_clean", pred_clean), ("true_clean", true_clean)):
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            kind = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
            raise ValueError(f"{name} must be a bool tensor, got {kind}")
    if pred_clean.shape != true_clean.shape:
        raise ValueError(
            f"pred_clean and true_clean must have the same shape, got "
            f"{tuple(pred_clean.shape)} and {tuple(true_clean.shape)}"
        )
    if pred_clean.numel() == 0:
        raise ValueError("pred_clean and true_clean must not be empty")


def _ratio(numerator: int, denominator: int) -> float:
    """``numerator / denominator``, defined as 0.0 when the denominator is 0 (as sklearn's
    ``zero_division=0``)."""
    return numerator / denominator if denominator > 0 else 0.0


def detection_metrics(pred_clean: Tensor, true_clean: Tensor) -> dict[str, float | int]:
    """Precision, recall and F1 of noise detection, with accuracy and confusion counts.

    Positives are NOISY samples (``~clean``), as in LNC Table 7:
    ``precision = TP / (TP + FP)``, ``recall = TP / (TP + FN)``,
    ``f1 = 2 TP / (2 TP + FP + FN)`` (the harmonic mean of the two), and
    ``accuracy = (TP + TN) / N``. A ratio whose denominator is 0 (e.g. no sample is noisy)
    is defined as 0.0 instead of dividing by zero. Values are fractions in [0, 1], like
    sklearn; multiply by 100 for the paper's percentages.

    Args:
        pred_clean: Predicted clean mask from a division, bool, any shape (e.g. (N,)).
        true_clean: Ground-truth clean mask, bool, same shape.

    Returns:
        ``{"precision", "recall", "f1", "accuracy"}`` as floats and
        ``{"tp", "fp", "fn", "tn", "n"}`` as ints, all counted on the noisy class.

    Raises:
        ValueError: If a mask is not bool, the shapes differ, or the masks are empty.

    Example:
        >>> import torch
        >>> pred = torch.tensor([True, False, False])
        >>> m = detection_metrics(pred, true_clean=torch.tensor([True, False, True]))
        >>> m["precision"], m["recall"], m["tp"], m["fp"]
        (0.5, 1.0, 1, 1)
    """
    _check_masks(pred_clean, true_clean)
    pred_noisy = ~pred_clean.reshape(-1)  # (N,)
    true_noisy = ~true_clean.reshape(-1).to(pred_noisy.device)  # (N,)
    tp, fp, tn, fn, _ = (int(c) for c in binary_stat_scores(pred_noisy.long(), true_noisy.long()))
    n = tp + fp + fn + tn
    return {
        "precision": _ratio(tp, tp + fp),
        "recall": _ratio(tp, tp + fn),
        "f1": _ratio(2 * tp, 2 * tp + fp + fn),
        "accuracy": _ratio(tp + tn, n),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
        "n": n,
    }
