"""Aggregation over seeds, as every measured table prints it: ``mean ± std [min, max]``.

One implementation for the grid's ``results.md`` (:mod:`ncl.reproduce.tables`) and the
generated tables of ``docs/results.md`` (:mod:`ncl.numbers.measured_pages`): the sample
standard deviation (``n - 1``), one decimal.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Stat:
    """A value over seeds: ``n`` runs, their mean, sample std (``None`` for one run or when
    not recorded) and range (``None`` when not recorded).

    ``n`` is ``None`` where only the aggregate was kept and its count was not printed."""

    n: int | None
    mean: float
    std: float | None
    low: float | None
    high: float | None


def stat_of(values: Iterable[float]) -> Stat | None:
    """The :class:`Stat` of the per-seed ``values``; ``None`` for none."""
    found = [float(v) for v in values]
    if not found:
        return None
    std = statistics.stdev(found) if len(found) > 1 else None
    return Stat(len(found), statistics.mean(found), std, min(found), max(found))


def format_stat(stat: Stat | None, with_range: bool = False, digits: int = 1) -> str:
    """``mean ± std`` (``mean`` alone for one run, ``-`` for none); ``with_range`` adds
    `` [min, max]`` when there is more than one run and the range is known."""
    if stat is None:
        return "-"
    if stat.std is None:
        return f"{stat.mean:.{digits}f}"
    text = f"{stat.mean:.{digits}f} ± {stat.std:.{digits}f}"
    if with_range and stat.low is not None and stat.high is not None:
        text += f" [{stat.low:.{digits}f}, {stat.high:.{digits}f}]"
    return text


def mean_std(values: list[float], digits: int = 1) -> str:
    """``mean ± std`` over seeds (sample std), ``mean`` for one value, ``-`` for none."""
    return format_stat(stat_of(values), digits=digits)
