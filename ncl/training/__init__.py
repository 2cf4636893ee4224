"""Machinery that stateful methods share, as plain Python (no Lightning here).

* :class:`PieceSchedule` - CRCL's self-refining pieces (Algorithm 1, spec 4.4.3): global epoch
  -> (piece, epoch in piece), total epochs, piece boundaries.
"""

from ncl.training.pieces import (
    OFFICIAL_SCHEDULES,
    OFFICIAL_SCHEDULES_TRAIN_SH,
    OFFICIAL_WARM_EPOCH,
    PieceLocation,
    PieceSchedule,
)

__all__ = [
    "OFFICIAL_SCHEDULES",
    "OFFICIAL_SCHEDULES_TRAIN_SH",
    "OFFICIAL_WARM_EPOCH",
    "PieceLocation",
    "PieceSchedule",
]
