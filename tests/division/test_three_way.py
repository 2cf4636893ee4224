"""ReCon's three-way division (Eq. 6-11) against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.division import (
    ThreeWayConfig,
    ThreeWayDivision,
    divide_three_way,
    final_labels,
    initial_pseudo_labels,
    intra_modal_discrepancy,
    penalty_factor,
    three_way_split,
    update_pseudo_labels,
)
from ncl.losses import SUBSET_CLEAN as C
from ncl.losses import SUBSET_LOCAL as LOC
from ncl.losses import SUBSET_NOISY as N


def test_discrepancy_eq7_by_hand() -> None:
    loss = torch.tensor([0.0, math.e - 1, math.e ** 2 - 1, -1e-7], dtype=torch.float64)
    assert intra_modal_discrepancy(loss).tolist() == pytest.approx([0.0, 0.5, 2 / 3, 0.0])


def test_penalty_eq9_by_hand() -> None:
    y = torch.tensor([0.0, 0.5, 0.9], dtype=torch.float64)
    assert penalty_factor(y, 0.1).tolist() == pytest.approx([1.0, math.exp(5), math.exp(9)])
    assert penalty_factor(y, 0.5).tolist() == pytest.approx([1.0, math.e, math.exp(1.8)])
    with pytest.raises(ValueError, match="alpha"):
        penalty_factor(y, 0.0)


def test_split_thresholds_and_their_sides() -> None:
    prob = torch.tensor([0.9, 0.9, 0.5, 0.2, 0.51, 0.9])
    disc = torch.tensor([0.1, 0.5, 0.1, 0.9, 0.49, 0.7])
    # y^CM > omega1 is rough clean (0.5 itself is noisy); y^IM >= omega2 is local (0.5 itself)
    assert three_way_split(prob, disc).tolist() == [C, LOC, N, N, C, LOC]
    assert three_way_split(prob, disc, omega1=0.95).tolist() == [N] * 6
    assert three_way_split(prob, disc, omega2=1.0).tolist() == [C, C, N, N, C, C]


def test_initial_pseudo_labels() -> None:
    p, w = torch.tensor([0.2, 0.7]), torch.tensor([0.9, 0.1])
    assert initial_pseudo_labels(p, w, "prediction").tolist() == pytest.approx([0.2, 0.7])
    assert initial_pseudo_labels(p, w, "one").tolist() == [1.0, 1.0]
    assert initial_pseudo_labels(p, w, "clean_probability").tolist() == pytest.approx([0.9, 0.1])
    with pytest.raises(ValueError, match="init"):
        initial_pseudo_labels(p, w, "zero")  # type: ignore[arg-type]


def test_pseudo_label_momentum_eq10_by_hand() -> None:
    previous = torch.tensor([1.0, 1.0, 0.5])
    prediction = torch.tensor([0.0, 0.5, 1.0])
    subset = torch.tensor([N, C, N])
    noisy_only = update_pseudo_labels(previous, prediction, subset, beta=0.6)
    assert noisy_only.tolist() == pytest.approx([0.6, 1.0, 0.7])  # D_c keeps its label
    everyone = update_pseudo_labels(previous, prediction, subset, beta=0.6, scope="all")
    assert everyone.tolist() == pytest.approx([0.6, 0.8, 0.7])


def test_final_labels_eq11() -> None:
    subset = torch.tensor([C, LOC, N])
    labels = final_labels(subset, torch.tensor([0.1, 0.2, 0.3]))
    assert labels.tolist() == pytest.approx([1.0, 1.0, 0.3])


def test_two_divisions_in_a_row() -> None:
    config = ThreeWayConfig(beta=0.6, pseudo_init="prediction")
    cm = torch.tensor([0.1, 0.2, 3.0, 4.0])
    im = torch.tensor([0.0, 5.0, 0.0, 0.0])  # pair 1: y^IM = log 6 / (1 + log 6) > 0.5
    prob = torch.tensor([0.9, 0.8, 0.1, 0.3])
    p1 = torch.tensor([0.9, 0.8, 0.2, 0.4])
    first, pseudo = divide_three_way(7, cm, im, p1, prob, None, config)
    assert first.epoch == 7 and first.subset.tolist() == [C, LOC, N, N]
    assert first.sizes() == {"clean": 1, "local": 1, "noisy": 2}
    # first division, init "prediction": y~ = 0.6 p + 0.4 p = p on D_n, p elsewhere
    assert pseudo.tolist() == pytest.approx([0.9, 0.8, 0.2, 0.4])
    assert first.labels.tolist() == pytest.approx([1.0, 1.0, 0.2, 0.4])
    y_im = math.log(6) / (1 + math.log(6))
    assert first.discrepancy[1].item() == pytest.approx(y_im, rel=1e-6)
    assert first.penalty[1].item() == pytest.approx(math.exp(y_im / 0.1), rel=1e-5)
    p2 = torch.tensor([0.5, 0.5, 0.0, 1.0])
    second, pseudo2 = divide_three_way(8, cm, im, p2, prob, pseudo, config)
    assert pseudo2.tolist() == pytest.approx([0.9, 0.8, 0.6 * 0.2, 0.6 * 0.4 + 0.4])
    assert second.labels.tolist() == pytest.approx([1.0, 1.0, 0.12, 0.64])
    # the shared Division record (one row) and ReCon's own; an older checkpoint's keys load
    assert set(second.state()) == {"epoch", "losses", "prob", "clean", "keep", "im_loss",
                                   "prediction", "discrepancy", "subset", "penalty", "labels"}
    old = {k: v for k, v in second.state().items() if k not in ("losses", "prob", "clean", "keep")}
    old.update(cm_loss=second.cm_loss, clean_prob=second.clean_prob)
    restored = ThreeWayDivision.from_state(old)
    assert torch.equal(restored.losses, second.losses) and torch.equal(restored.clean, second.clean)
    assert torch.equal(restored.prob, second.prob) and restored.epoch == 8


@pytest.mark.parametrize("bad", [{"omega1": 1.5}, {"beta": -0.1}, {"alpha": 0.0},
                                 {"pseudo_init": "zero"}, {"pseudo_scope": "clean"}])
def test_config_refuses_bad_values(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        ThreeWayConfig(**bad)
