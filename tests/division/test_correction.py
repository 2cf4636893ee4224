"""CRCL's SCC (Eq. 10-12, spec 4.4.2 steps 4-6) against loop transcriptions, both rules."""

from __future__ import annotations

import pytest
import torch

from ncl.division import (
    correct_labels,
    filter_confident_noise,
    initial_correspondence_labels,
    momentum_correction,
)

BETA, EPS_T, EF = 0.8, 0.1, 2


# ---------------------------------------------------------------- naive transcriptions


def official_step(y_last: list[float], p: list[float], piece: int, epoch: int, warm: int
                  ) -> tuple[list[float], list[float]]:
    """Spec 4.4.2 steps 4-6 for one batch, element by element: (y for the loss, move_gt[ids])."""
    y_loss, stored = [], []
    for yl, pi in zip(y_last, p):
        y = yl if epoch < warm else BETA * yl + (1 - BETA) * pi
        if y < EPS_T:
            y = 0.0
        y_loss.append(y)
        stored.append(pi if (piece == 0 and epoch == warm - 1) else y)
    return y_loss, stored


def eq11(j: int, t: int, lengths: list[int], p_hat: dict[tuple[int, int], float]) -> float:
    """Eq. 11 as printed, 1-based piece j and epoch t, y^(0, .) = 1, by plain recursion."""
    if j == 0:
        return 1.0
    if t <= EF:
        return eq11(j - 1, lengths[j - 2], lengths, p_hat) if j > 1 else 1.0
    if j == 1 and t == EF + 1:
        return p_hat[(j, t - 1)]
    return BETA * eq11(j, t - 1, lengths, p_hat) + (1 - BETA) * p_hat[(j, t - 1)]


def eq12(y: float) -> float:
    return 0.0 if y < EPS_T else y


def t(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


# ---------------------------------------------------------------- building blocks


def test_initial_labels_momentum_and_filter() -> None:
    assert torch.equal(initial_correspondence_labels(3), torch.ones(3))
    with pytest.raises(ValueError, match="num_samples"):
        initial_correspondence_labels(0)
    torch.testing.assert_close(momentum_correction(t([1.0, 0.5]), t([0.0, 1.0])), t([0.8, 0.6]))
    out = filter_confident_noise(t([0.0999, 0.1, 0.5, 0.0]))
    assert out.tolist() == [0.0, 0.1, 0.5, 0.0]  # strictly below 0.1 becomes 0
    assert filter_confident_noise(t([0.05]), threshold=0.0).tolist() == [0.05]


# ---------------------------------------------------------------- official rule


@pytest.mark.parametrize("piece", [0, 1, 2])
@pytest.mark.parametrize("epoch", [0, 1, 2, 3, 7])
def test_official_rule_matches_spec_loops(piece: int, epoch: int) -> None:
    g = torch.Generator().manual_seed(10 * piece + epoch)
    y_last = torch.rand(6, generator=g, dtype=torch.float64)
    y_last[0] = 0.0  # a label already at 0
    p = torch.rand(6, generator=g, dtype=torch.float64)
    p[1] = 0.01  # an estimate below the threshold
    got = correct_labels(y_last, p, piece, epoch, rule="official")
    want_loss, want_stored = official_step(y_last.tolist(), p.tolist(), piece, epoch, EF)
    torch.testing.assert_close(got.for_loss, t(want_loss))
    torch.testing.assert_close(got.stored, t(want_stored))


def test_official_trajectory_of_one_pair_by_hand() -> None:
    y = initial_correspondence_labels(1, torch.float64)
    seen = []
    for epoch, p in enumerate([0.9, 0.05, 0.35, 0.6]):
        out = correct_labels(y, t([p]), 0, epoch, rule="official")
        seen.append((out.for_loss.item(), out.stored.item()))
        y = out.stored
    assert seen[0] == (1.0, 1.0)  # frozen
    assert seen[1] == (1.0, 0.05)  # frozen for the loss; unthresholded p written (step 6)
    assert seen[2] == pytest.approx((0.8 * 0.05 + 0.2 * 0.35,) * 2)  # 0.11: kept
    assert seen[3] == pytest.approx((0.8 * 0.11 + 0.2 * 0.6,) * 2)


def test_official_zero_recovers_only_from_p_at_least_half() -> None:
    # 0.2 p >= 0.1 <=> p >= 0.5 (exactly at 0.5 rounding decides: 1 - 0.8 < 0.2 in floats)
    zero = t([0.0, 0.0])
    out = correct_labels(zero, t([0.49, 0.51]), 1, 5, rule="official")
    assert out.stored.tolist() == pytest.approx([0.0, 0.2 * 0.51])


def test_official_frozen_epochs_of_later_pieces_threshold_the_table() -> None:
    out = correct_labels(t([0.05, 0.7]), t([1.0, 0.0]), 1, 0, rule="official")
    assert out.for_loss.tolist() == [0.0, 0.7] and out.stored.tolist() == [0.0, 0.7]


# ---------------------------------------------------------------- paper rule


def test_paper_rule_matches_eq11_over_two_pieces() -> None:
    lengths = [4, 5]  # e_1 = 4, e_2 = 5, e_f = 2
    g = torch.Generator().manual_seed(0)
    n = 5
    p_hat = torch.rand(sum(lengths), n, generator=g, dtype=torch.float64)  # per global epoch
    p_hat[:, 0] = 0.02  # a pair that looks noisy throughout
    table = initial_correspondence_labels(n, torch.float64)
    previous = torch.zeros(n, dtype=torch.float64)  # p_hat of the previous epoch (unused at first)
    epoch = 0
    for j, length in enumerate(lengths, start=1):
        for e in range(length):
            out = correct_labels(table, previous, j - 1, e, rule="paper")
            for i in range(n):
                record = {(jj, tt): p_hat[sum(lengths[: jj - 1]) + tt - 1, i].item()
                          for jj in (1, 2) for tt in range(1, lengths[jj - 1] + 1)}
                want = eq11(j, e + 1, lengths, record)
                assert out.stored[i].item() == pytest.approx(want, rel=1e-12), (j, e, i)
                assert out.for_loss[i].item() == pytest.approx(eq12(want), rel=1e-12)
            table, previous = out.stored, p_hat[epoch]
            epoch += 1


def test_paper_rule_keeps_unthresholded_labels_in_the_table() -> None:
    out = correct_labels(t([0.05]), t([0.05]), 1, 4, rule="paper")
    assert out.stored.item() == pytest.approx(0.05) and out.for_loss.item() == 0.0
    # whereas the official rule writes the 0 back
    assert correct_labels(t([0.05]), t([0.05]), 1, 4, rule="official").stored.item() == 0.0


def test_paper_and_official_differ_at_the_reset_epoch() -> None:
    labels, p = t([1.0]), t([0.4])
    paper = correct_labels(labels, p, 0, EF, rule="paper")  # t = e_f + 1: y = p_hat
    official = correct_labels(labels, p, 0, EF, rule="official")  # momentum on the stored value
    assert paper.stored.item() == pytest.approx(0.4)
    assert official.stored.item() == pytest.approx(0.8 + 0.2 * 0.4)


# ---------------------------------------------------------------- prediction rule and misc


def test_prediction_rule_is_the_estimate() -> None:
    out = correct_labels(t([1.0, 0.0]), t([0.05, 0.7]), 0, 0, rule="prediction")
    assert out.for_loss.tolist() == [0.05, 0.7] and out.stored.tolist() == [0.05, 0.7]


def test_threshold_zero_disables_filter_and_outputs_are_detached() -> None:
    p = t([0.01, 0.02]).requires_grad_()
    out = correct_labels(t([0.01, 0.02]), p, 1, 5, rule="official", threshold=0.0)
    torch.testing.assert_close(out.for_loss, t([0.01, 0.02]))
    assert not out.for_loss.requires_grad and not out.stored.requires_grad


@pytest.mark.parametrize(
    "args,kwargs,match",
    [
        ((t([1.0]), t([0.5, 0.5]), 0, 0), {}, "same shape"),
        ((t([1.0]), t([float("nan")]), 0, 0), {}, "NaN"),
        ((t([1.2]), t([0.5]), 0, 0), {}, r"\[0, 1\]"),
        ((t([1.0]), t([0.5]), -1, 0), {}, "piece"),
        ((t([1.0]), t([0.5]), 0, 1.5), {}, "epoch_in_piece"),
        ((t([1.0]), t([0.5]), 0, 0), {"rule": "both"}, "rule"),
        ((t([1.0]), t([0.5]), 0, 0), {"momentum": 1.1}, "momentum"),
        ((t([1.0]), t([0.5]), 0, 0), {"rule": "paper", "freeze_epochs": 0}, "freeze_epochs"),
        ((torch.ones(2, 2), torch.ones(2, 2), 0, 0), {}, "1-D"),
    ],
)
def test_rejects_bad_arguments(args: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        correct_labels(*args, **kwargs)
