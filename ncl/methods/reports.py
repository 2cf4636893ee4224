"""What NCR/LNC and L2RM report about the :class:`~ncl.division.co_divide.Division` an epoch
trains on, as the :class:`~ncl.callbacks.protocols.EpochDiagnostics` the observers read
(:class:`~ncl.callbacks.diagnostics.Diagnostics`, :class:`~ncl.callbacks.figures.Figures`).
Pure functions of the record; the methods decide which epochs have one.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from ncl.callbacks.protocols import EpochDiagnostics, LabelView, LossView
from ncl.division.co_divide import Division
from ncl.division.detection import mean_over_networks, prefixed
from ncl.division.stats import division_stats
from ncl.metrics.noise_detection import detection_metrics


def co_divide_report(division: Division | None, names: Sequence[str], gmm_seed: int | None,
                     true_clean: Tensor | None, targets: Tensor | None = None) -> EpochDiagnostics:
    """NCR/LNC: the co-divide or abandon draw made for the epoch (``None``: none) and LNC's
    momentum targets in a warm-up epoch.

    Args:
        division: ``(K, N)`` losses, probabilities ``w`` and clean masks, one row per network.
        names: the networks' names (``A``, ``B``).
        gmm_seed: the seed of the GMM the loss figure refits.
        true_clean: ``(N,)`` bool ground truth, or ``None``.
        targets: ``(K, N)`` momentum targets ``gamma`` to show, or ``None``.
    """
    out = EpochDiagnostics()
    if division is not None:
        out.scalars = division_stats(division, names, true_clean)
        out.noise_detection = mean_over_networks(out.scalars, names)
        kind = "co-divide" if division.keep is None else "abandon draw"
        out.losses = LossView(f"{kind}: per-sample loss (mean hinge) and GMM",
                              dict(zip(names, division.losses)), gmm_seed)
        if division.keep is None:
            out.detection = dict(zip(names, division.clean))
            out.labels = [LabelView(f"clean probability w from network {n}'s GMM (Eq. 3)", w,
                                    "clean probability w (0 = noisy, 1 = clean)")
                          for n, w in zip(names, division.prob)]
    if targets is not None:
        out.labels += [LabelView(f"momentum targets gamma of network {n} (LNC Eq. 5)", g,
                                 "momentum target gamma (0 = noisy, 1 = clean)")
                       for n, g in zip(names, targets)]
    return out


def beta_division_report(division: Division, true_clean: Tensor | None,
                         bmm_seed: int | None) -> EpochDiagnostics:
    """L2RM: the Beta-mixture division (one row) an epoch trains on: its size and, with the
    ground truth ``(N,)``, the precision/recall/F1 of the predicted-noisy pairs; the loss
    histogram (a Beta mixture is not drawn over it) and the clean posteriors."""
    clean = division.clean[0]
    scalars = {"l2rm/predicted_clean": float(clean.sum())}
    if true_clean is not None:
        m = detection_metrics(clean.bool(), true_clean.bool())
        scalars.update({f"l2rm/{k}": float(m[k]) for k in ("precision", "recall", "f1")})
    losses = LossView("per-sample loss (mean hinge) of the Beta-mixture division",
                      {"net": division.losses[0]}, bmm_seed, mixture="beta")
    labels = [LabelView("L2RM clean probability (Beta mixture)", division.prob[0],
                        "clean probability")]
    return EpochDiagnostics(scalars, {"L2RM division": clean}, losses, labels,
                            noise_detection=prefixed(scalars, "l2rm/"))
