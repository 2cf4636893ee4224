"""Machinery that stateful methods share, as plain Python (no Lightning here).

* :class:`PerSampleState` (:mod:`ncl.training.state`) - a per-sample table read by index,
  written after an all-gather, identical on every rank, checkpointed.
* :mod:`ncl.training.passes` - any per-sample quantity over the whole training set in eval
  mode (:class:`~ncl.training.passes.PassSpec`, :func:`~ncl.training.passes.run_pass`), batches
  formed globally and dealt whole to ranks (:func:`~ncl.training.passes.deal_batches`),
  gathered by index.
* :mod:`ncl.training.plans` - per-epoch batch plans of co-teaching (NCR/LNC), seeded by epoch.
* :mod:`ncl.training.distributed` - gather by sample index, broadcast, gradient average.
* :class:`PieceSchedule` - self-refining pieces (CRCL Algorithm 1, spec 4.4.3): global epoch
  -> (piece, epoch in piece), total epochs, piece boundaries.
* :mod:`ncl.training.schedule` - the step decay every method's learning rate follows, and
  whether a run has a given epoch.
"""

from ncl.training.passes import per_sample_pass
from ncl.training.pieces import (
    OFFICIAL_SCHEDULES,
    OFFICIAL_SCHEDULES_TRAIN_SH,
    OFFICIAL_WARM_EPOCH,
    PieceLocation,
    PieceSchedule,
)
from ncl.training.state import PerSampleState

__all__ = [
    "OFFICIAL_SCHEDULES",
    "OFFICIAL_SCHEDULES_TRAIN_SH",
    "OFFICIAL_WARM_EPOCH",
    "PieceLocation",
    "PieceSchedule",
    "PerSampleState",
    "per_sample_pass",
]
