"""Lightning callbacks. Each *does* its work in the hook whose name says when, through a
small typed protocol the method implements (:mod:`ncl.callbacks.protocols`), never by probing
the method; the state it produces lives on the method (checkpointed with its training state).

Work (attached by the methods that need them, named in their ``method_callbacks``):

* :class:`GMMDivision` - a per-sample pass over the training set, a two-component mixture per
  network, the division handed to the method (:class:`~ncl.callbacks.protocols.GMMDivisible`):
  NCR/LNC's co-divide and abandon draw, ReCon's first stage, L2RM's Beta mixture. At the end of
  an epoch for the next one (so the epoch's checkpoint holds it), at an epoch's start as a
  fallback: the per-epoch pass of :mod:`ncl.callbacks.epoch_pass`.
* :class:`MomentumRefinement` - per-sample soft values moved by a rule
  (:class:`~ncl.callbacks.protocols.Refinable`): after every step from the step's output (LNC's
  momentum targets, CRCL's official SCC), or once per epoch from a per-sample pass (CRCL's paper
  rule, DECL's prediction), the same per-epoch pass as the division's.
* :class:`SelfRefining` - self-refining pieces (CRCL Algorithm 1) for any method: seeded
  re-initialisation of the networks and optimiser state at every piece boundary, the step
  schedule restarted, per-sample state carried over (``--trainer.callbacks+=`` on RCL).

Observers (generic, :class:`~ncl.callbacks.protocols.Diagnosable`):

* :class:`Diagnostics` - logs the scalars of the method's ``epoch_diagnostics`` (division
  sizes, noise-detection P/R/F1, label distributions); attached by the base when the method's
  ``diagnostics`` option is on.
* :class:`Figures` - PNG figures in ``<run dir>/figures/`` (loss histograms with the GMM, label
  histograms, detection and validation rSum curves), also logged to W&B; added to every fit by
  the CLI; plotting in :mod:`ncl.evaluation.plots`.
* :mod:`ncl.callbacks.tracking` - what a W&B run records besides the metrics.
"""

from ncl.callbacks.diagnostics import Diagnostics
from ncl.callbacks.division import GMMDivision
from ncl.callbacks.figures import Figures
from ncl.callbacks.refinement import MomentumRefinement
from ncl.callbacks.self_refining import SelfRefining

__all__ = ["Diagnostics", "Figures", "GMMDivision", "MomentumRefinement", "SelfRefining"]
