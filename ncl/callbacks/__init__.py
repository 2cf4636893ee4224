"""Lightning callbacks that methods attach themselves (``configure_callbacks``). Each does its
work in the hook whose name says when; the state they produce lives on the method.

* :class:`CoDivide` - ``on_train_epoch_end``: NCR/LNC's co-divide for the next epoch
  (per-sample losses, GMM, split; LNC's Randomly Noise Abandon), stored as ``module.division``.
* :class:`MomentumTargets` - ``on_train_batch_end``: LNC's momentum-target update (Eq. 5) of
  the step's samples, in ``module.momentum_targets``.
* :class:`DivisionDiagnostics` - ``on_train_epoch_start``: division sizes, noise-detection
  P/R/F1 and the loss-histogram figure of the epoch's division.
* :class:`SelfRefiningPieces` - ``on_train_epoch_start``: CRCL's re-initialisation at every
  self-refining piece boundary (``module.start_piece``).
* :class:`LabelCorrection` - ``on_train_batch_end`` (CRCL's official per-step SCC update) and
  ``on_train_epoch_end`` (the paper's per-epoch update) of ``module.labels``.
* :class:`LabelDiagnostics` - ``on_train_epoch_end``: CRCL's piece, label flips and label
  distribution (by true clean/noisy when known).
* :class:`Figures` - not attached by any method: add it to ``trainer.callbacks`` for PNG
  figures in ``<run dir>/figures/`` (loss histograms with the GMM, label histograms, noise
  detection and validation rSum curves), also logged to W&B; plotting in :mod:`ncl.figures`.

The computations are plain functions in :mod:`ncl.training` (division, per-sample passes,
batch plans, collectives, per-sample state).
"""

from ncl.callbacks.co_divide import CoDivide
from ncl.callbacks.diagnostics import DivisionDiagnostics, division_stats, plot_division
from ncl.callbacks.figures import Figures
from ncl.callbacks.momentum import MomentumTargets
from ncl.callbacks.labels import LabelCorrection, LabelDiagnostics, label_stats
from ncl.callbacks.pieces import SelfRefiningPieces

__all__ = ["CoDivide", "DivisionDiagnostics", "MomentumTargets", "division_stats", "plot_division"]
__all__ += ["Figures", "LabelCorrection", "LabelDiagnostics", "SelfRefiningPieces", "label_stats"]
