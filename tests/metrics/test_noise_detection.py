"""Noise-detection metrics against sklearn (positives = noisy)."""

from __future__ import annotations

import pytest
import torch
from sklearn import metrics as skm

from ncl.metrics import detection_metrics


def sklearn_reference(pred_clean: torch.Tensor, true_clean: torch.Tensor) -> dict[str, float]:
    y_pred = (~pred_clean).numpy().astype(int)  # 1 = noisy
    y_true = (~true_clean).numpy().astype(int)
    tn, fp, fn, tp = skm.confusion_matrix(y_true, y_pred, labels=[0, 1]).ravel()
    return {
        "precision": skm.precision_score(y_true, y_pred, zero_division=0),
        "recall": skm.recall_score(y_true, y_pred, zero_division=0),
        "f1": skm.f1_score(y_true, y_pred, zero_division=0),
        "accuracy": skm.accuracy_score(y_true, y_pred),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "tn": tn,
    }


def check(pred_clean: torch.Tensor, true_clean: torch.Tensor) -> dict[str, float | int]:
    got = detection_metrics(pred_clean, true_clean)
    for key, value in sklearn_reference(pred_clean, true_clean).items():
        assert got[key] == pytest.approx(float(value)), key
    assert got["n"] == pred_clean.numel()
    return got


@pytest.mark.parametrize("seed", range(5))
def test_matches_sklearn_random(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    true_clean = torch.rand(200, generator=gen) > 0.4
    flip = torch.rand(200, generator=gen) < 0.2
    check(true_clean ^ flip, true_clean)


def test_positive_class_is_noisy() -> None:
    pred_clean = torch.tensor([True, False, False, True])
    true_clean = torch.tensor([True, False, True, False])
    got = check(pred_clean, true_clean)
    # Noisy predicted: samples 1, 2; truly noisy: 1, 3.
    assert (got["tp"], got["fp"], got["fn"], got["tn"]) == (1, 1, 1, 1)


@pytest.mark.parametrize(
    ("pred", "true"),
    [
        ([True, True, True], [True, True, True]),  # no noise at all
        ([True, True, True], [False, True, False]),  # nothing flagged
        ([False, False, False], [True, True, True]),  # everything flagged, nothing noisy
        ([False, False], [False, False]),  # all noisy, all found
    ],
)
def test_absent_class_gives_zero_not_nan(pred: list[bool], true: list[bool]) -> None:
    got = check(torch.tensor(pred), torch.tensor(true))
    assert all(v == v for v in got.values())  # no NaN


def test_two_dimensional_masks_are_flattened() -> None:
    true_clean = torch.tensor([[True, False], [False, True]])
    pred_clean = torch.tensor([[True, True], [False, True]])
    got = detection_metrics(pred_clean, true_clean)
    assert (got["tp"], got["fn"], got["precision"], got["recall"]) == (1, 1, 1.0, 0.5)


def test_bad_input_raises() -> None:
    with pytest.raises(ValueError, match="pred_clean must be a bool tensor"):
        detection_metrics(torch.tensor([1, 0]), torch.tensor([True, False]))
    with pytest.raises(ValueError, match="same shape"):
        detection_metrics(torch.tensor([True]), torch.tensor([True, False]))
    with pytest.raises(ValueError, match="empty"):
        detection_metrics(torch.tensor([], dtype=torch.bool), torch.tensor([], dtype=torch.bool))
