"""The one division report (``ncl.methods.reports.division_report``): scalars, noise detection
and figure panels of a predicted-clean mask, checked against counts done by hand; the co-divide
and Beta-mixture reports through it keep their keys."""

from __future__ import annotations

import pytest
import torch

from ncl.callbacks.protocols import LabelView, LossView
from ncl.division.co_divide import Division
from ncl.methods.reports import beta_division_report, co_divide_report, division_report

# predicted noisy {1, 2, 3}, truly noisy {1, 2}: TP 2, FP 1, FN 0
CLEAN = torch.tensor([True, False, False, False, True])
TRUTH = torch.tensor([True, False, False, True, True])
P, R = 2 / 3, 1.0
F1 = 2 * P * R / (P + R)


def test_one_mask_gives_its_count_scores_and_noise_detection() -> None:
    prob = torch.tensor([0.9, 0.1, 0.2, 0.4, 0.8])
    view = LabelView("my clean probability", prob, "clean probability")
    losses = LossView("my loss and GMM", {"net": torch.rand(5)})
    report = division_report({"mine": CLEAN}, TRUTH, prefix="mine/", losses=losses, labels=[view],
                             scalars={"mine/extra": 7.0})
    assert report.scalars == pytest.approx({"mine/predicted_clean": 2.0, "mine/precision": P,
                                            "mine/recall": R, "mine/f1": F1, "mine/extra": 7.0})
    assert report.noise_detection == pytest.approx({"precision": P, "recall": R, "f1": F1})
    assert set(report.detection) == {"mine"} and torch.equal(report.detection["mine"], CLEAN)
    assert report.losses is losses and report.labels == [view]


def test_without_ground_truth_only_the_count() -> None:
    report = division_report({"mine": CLEAN}, None, prefix="mine/")
    assert report.scalars == {"mine/predicted_clean": 2.0} and report.noise_detection == {}


def test_a_summary_of_its_own_and_no_prefix() -> None:
    report = division_report({"a": CLEAN, "b": TRUTH}, TRUTH, scalars={"x/y": 1.0},
                             noise_detection={"precision": 0.25})
    assert report.scalars == {"x/y": 1.0} and report.noise_detection == {"precision": 0.25}
    assert set(report.detection) == {"a", "b"}
    with pytest.raises(ValueError, match="one mask"):
        division_report({"a": CLEAN, "b": TRUTH}, TRUTH, prefix="x/")


def test_co_divide_report_keys_and_mean_over_networks() -> None:
    clean = torch.stack([CLEAN, TRUTH])  # network B predicts the truth: P = R = F1 = 1
    division = Division(0, torch.rand(2, 5), torch.rand(2, 5), clean)
    report = co_divide_report(division, ("A", "B"), 0, TRUTH)
    assert report.scalars["division/A/clean"] == 2.0 and report.scalars["division/B/noisy"] == 2.0
    assert report.noise_detection == pytest.approx({"precision": (P + 1) / 2, "recall": 1.0,
                                                    "f1": (F1 + 1) / 2})
    assert set(report.detection) == {"A", "B"} and len(report.labels) == 2
    assert report.losses is not None and "(mean hinge)" in report.losses.title
    titled = co_divide_report(division, ("A", "B"), 0, TRUTH, loss_name="l^CM")
    assert "(l^CM)" in titled.losses.title
    none = co_divide_report(None, ("A", "B"), 0, TRUTH, torch.rand(2, 5))
    assert none.scalars == {} and none.noise_detection == {} and len(none.labels) == 2


def test_beta_division_report_keys() -> None:
    division = Division(3, torch.rand(1, 5), torch.rand(1, 5), CLEAN.unsqueeze(0))
    report = beta_division_report(division, TRUTH, 0)
    assert report.scalars == pytest.approx({"l2rm/predicted_clean": 2.0, "l2rm/precision": P,
                                            "l2rm/recall": R, "l2rm/f1": F1})
    assert report.noise_detection == pytest.approx({"precision": P, "recall": R, "f1": F1})
    assert set(report.detection) == {"L2RM division"} and report.losses.mixture == "beta"
