"""A progress bar for ncl's long passes that is silent wherever nobody is watching.

The evaluation similarity blocks and the per-sample passes over the training set take
minutes on COCO, outside Lightning's own loops (so Lightning's progress bar does not move
while they run). :func:`track` shows a `rich <https://rich.readthedocs.io>`_ bar for them on
rank 0 when stderr is a terminal, and does nothing at all otherwise (tests, CI, log files,
ranks other than 0), so it never changes what a pass computes or what a log file holds.

When Lightning's ``RichProgressBar`` is already drawing (a live display on rich's global
console), the bar is nested inside that display instead of fighting it for the terminal
(rich >= 14.1 supports nested live displays).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

import torch.distributed as dist

T = TypeVar("T")


def process_rank() -> int:
    """This process's global rank: the default group's, else ``RANK``/``LOCAL_RANK``, else 0.

    The environment variables cover the moments before a launcher's process group exists
    (torchrun and Lightning set them for every process they start).
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    for name in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def progress_enabled() -> bool:
    """Whether :func:`track` draws by default: rank 0 and stderr is a terminal."""
    isatty = getattr(sys.stderr, "isatty", None)
    return process_rank() == 0 and bool(isatty and isatty())


def track(iterable: Iterable[T], description: str, total: int | None = None,
          enabled: bool | None = None) -> Iterator[T]:
    """Yield the items of ``iterable`` unchanged, with a progress bar when ``enabled``.

    Args:
        iterable: the loop to show (consumed lazily, item by item).
        description: the bar's label, e.g. ``"validation similarity (A)"``.
        total: the number of items; ``len(iterable)`` when omitted and available.
        enabled: draw the bar; ``None`` (default) draws it on rank 0 when stderr is a
            terminal (:func:`progress_enabled`).

    Yields:
        The items of ``iterable``, in order.
    """
    if enabled is None:
        enabled = progress_enabled()
    if not enabled:
        yield from iterable
        return
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    progress = _make_progress()
    with progress:
        task = progress.add_task(description, total=total)
        for item in iterable:
            yield item
            progress.advance(task)


def _make_progress():  # -> rich.progress.Progress (rich imported only when a bar is drawn)
    """A transient rich ``Progress``: nested in Lightning's live display if one is active,
    on stderr otherwise."""
    from rich import get_console
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    shared = get_console()
    live_active = bool(getattr(shared, "_live_stack", None) or getattr(shared, "_live", None))
    console = shared if live_active else Console(stderr=True)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True)
