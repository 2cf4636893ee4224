"""CRCL's SR piece schedule (Algorithm 1, spec 4.4.3) against an explicit epoch list."""

from __future__ import annotations

import pytest

from ncl.methods.crcl import OFFICIAL_PIECES
from ncl.training import (
    OFFICIAL_SCHEDULES,
    OFFICIAL_SCHEDULES_TRAIN_SH,
    OFFICIAL_WARM_EPOCH,
    PieceLocation,
    PieceSchedule,
)


def expand(lengths: tuple[int, ...]) -> list[tuple[int, int]]:
    """Every global epoch's (piece, epoch_in_piece), written out one by one."""
    return [(piece, e) for piece, n in enumerate(lengths) for e in range(n)]


def test_official_train_sh_schedule_is_53_epochs() -> None:
    # the official --schedules do not count the --warm_epoch frozen epochs of every piece
    assert OFFICIAL_PIECES == tuple(k + OFFICIAL_WARM_EPOCH for k in OFFICIAL_SCHEDULES_TRAIN_SH)
    s = PieceSchedule(OFFICIAL_PIECES)
    assert s.lengths == (7, 7, 7, 32)
    assert s.total_epochs == 53 and s.num_pieces == 4
    assert s.starts == (0, 7, 14, 21)
    assert OFFICIAL_SCHEDULES == (6, 6, 6, 25) and OFFICIAL_WARM_EPOCH == 2  # opts.py defaults


@pytest.mark.parametrize("lengths", [(1,), (3,), (2, 5), (7, 7, 7, 32), (1, 1, 4)])
def test_locate_and_boundaries_match_expansion(lengths: tuple[int, ...]) -> None:
    s = PieceSchedule(lengths)
    table = expand(lengths)
    assert s.total_epochs == len(table)
    for epoch, (piece, within) in enumerate(table):
        assert s.locate(epoch) == PieceLocation(piece, within)
    assert [e for e, (_, within) in enumerate(table) if within == 0] == list(s.starts)


def test_boundaries_of_the_official_schedule() -> None:
    s = PieceSchedule((7, 7, 7, 32))
    assert s.locate(20) == (2, 6) and s.locate(21) == (3, 0) and s.locate(52) == (3, 31)


def test_list_input_is_frozen_to_a_tuple() -> None:
    s = PieceSchedule([2, 3])  # type: ignore[arg-type]
    assert s.lengths == (2, 3) and hash(s) == hash(PieceSchedule((2, 3)))


@pytest.mark.parametrize("epoch", [-1, 5, 1.5])
def test_locate_rejects_out_of_range(epoch: float) -> None:
    with pytest.raises(ValueError, match="epoch"):
        PieceSchedule((2, 3)).locate(epoch)  # type: ignore[arg-type]


@pytest.mark.parametrize("lengths", [(), (0,), (3, -1), (2.5,)])
def test_rejects_bad_lengths(lengths: tuple) -> None:
    with pytest.raises(ValueError, match="piece"):
        PieceSchedule(lengths)
