"""Model selection: which validation epochs may become the best checkpoint (spec 4.2.3, 5.5).

Every validation while fitting logs ``val/rsum`` and ``val/rsum_selected``: the rSum when the
method's ``selectable(epoch)`` holds, else :data:`UNSELECTED_RSUM` (below any rSum). A best
checkpoint monitoring ``val/rsum_selected`` (every shipped config) thus never picks an
excluded epoch (a warm-up epoch, or with CRCL's ``selection: last_piece`` an epoch outside the
last piece), and the key exists every epoch, as Lightning's ModelCheckpoint requires.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from ncl.errors import NclWarning

#: The key every config's best checkpoint monitors.
SELECTED_KEY = "val/rsum_selected"
#: ``val/rsum_selected`` of an epoch that may not become the best checkpoint: below any rSum.
UNSELECTED_RSUM = -1.0


def selected_rsum(rsum: float, selectable: bool) -> float:
    """What ``val/rsum_selected`` holds for an epoch of rSum ``rsum``."""
    return rsum if selectable else UNSELECTED_RSUM


def excluded_epochs(max_epochs: int | None, selectable: Callable[[int], bool]) -> list[int]:
    """The epochs of a run of ``max_epochs`` that may not become the best checkpoint."""
    if max_epochs is None or max_epochs < 0:
        return []
    return [e for e in range(max_epochs) if not selectable(e)]


def check_selection_monitor(trainer: Any, selectable: Callable[[int], bool]) -> None:
    """Warn when a best checkpoint monitors another validation key (``val/rsum``: logged
    every epoch, warm-up included) although some epochs may not be selected."""
    monitors = sorted({m for cb in trainer.checkpoint_callbacks
                       if (m := getattr(cb, "monitor", None)) and m.startswith("val") and m != SELECTED_KEY})
    excluded = excluded_epochs(trainer.max_epochs, selectable) if monitors else []
    if excluded:
        shown = ", ".join(str(e) for e in excluded[:5]) + (", ..." if len(excluded) > 5 else "")
        warnings.warn(f"a ModelCheckpoint monitors {', '.join(monitors)}, which every validation "
                      f"logs, but epochs {shown} may not be selected (warm-up or "
                      f"model.selection): monitor {SELECTED_KEY} instead, as the shipped configs do",
                      NclWarning, stacklevel=2)
