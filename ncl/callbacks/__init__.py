"""Lightning callbacks that methods attach themselves (``configure_callbacks``).

* :class:`CoDivide` - NCR/LNC per-epoch co-divide (per-sample losses, GMM, split) and LNC's
  Randomly Noise Abandon; holds the division in its checkpoint state.
* :class:`MomentumTargets` - LNC's per-sample momentum targets (Eq. 5), checkpointed.
* :class:`DivisionDiagnostics` - division sizes, noise-detection P/R/F1, loss-histogram figure.

Helpers: :mod:`ncl.training.plans` (per-epoch co-teaching batch plans) and
:mod:`ncl.training.distributed` (gather by sample index, broadcast, gradient average).
"""

from ncl.callbacks.co_divide import CoDivide, Division
from ncl.callbacks.diagnostics import DivisionDiagnostics, division_stats, plot_division
from ncl.callbacks.momentum import MomentumTargets

__all__ = ["CoDivide", "Division", "DivisionDiagnostics", "MomentumTargets", "division_stats",
           "plot_division"]
