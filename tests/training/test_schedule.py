"""The step schedule and the "is there such an epoch" rule (ncl.training.schedule)."""

from __future__ import annotations

import pytest

from ncl.training.schedule import has_epoch, step_decay


def test_step_decay_counts_from_start() -> None:
    assert [step_decay(e, 30) for e in (0, 29, 30, 59, 60)] == pytest.approx([1, 1, 0.1, 0.1, 0.01])
    assert [step_decay(e, 10, start=5) for e in (0, 5, 14, 15, 25)] == pytest.approx(
        [1, 1, 1, 0.1, 0.01])  # epochs before start run at lr0 and are not counted


def test_has_epoch() -> None:
    assert has_epoch(3, 2) and not has_epoch(3, 3)
    assert has_epoch(None, 10**6) and has_epoch(-1, 10**6)  # no end
