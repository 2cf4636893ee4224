"""What a dividing method reports about the division an epoch trains on, as the
:class:`~ncl.callbacks.protocols.EpochDiagnostics` the observers read
(:class:`~ncl.callbacks.diagnostics.Diagnostics`, :class:`~ncl.callbacks.figures.Figures`).
Pure functions of the record; the methods decide which epochs have one.

* :func:`division_report` - the one report of every dividing method: its predicted-clean
  mask(s), scalars, noise detection (``train/detection/*``) and figure panels. A division
  that is one mask gets its scalars and noise detection from it (``prefix``).
* :func:`co_divide_report` - NCR/LNC's and IN2R's co-divide (one mask per network), through it.
* :func:`beta_division_report` - L2RM's Beta-mixture division, through it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torch import Tensor

from ncl.callbacks.protocols import EpochDiagnostics, LabelView, LossView
from ncl.division.co_divide import Division
from ncl.division.detection import mask_scalars, mean_over_networks, prefixed
from ncl.division.stats import division_stats


def division_report(masks: Mapping[str, Tensor], true_clean: Tensor | None, *,
                    prefix: str | None = None, scalars: Mapping[str, float] | None = None,
                    noise_detection: Mapping[str, float] | None = None,
                    losses: LossView | None = None,
                    labels: Sequence[LabelView] = ()) -> EpochDiagnostics:
    """The diagnostics of the division an epoch trains on.

    Args:
        masks: series name -> ``(N,)`` bool *predicted clean* mask (``{"L2RM division": clean}``;
            one per network for a co-divide; empty when there is none to score). The
            detection figure draws one line per series against the ground truth.
        true_clean: ``(N,)`` bool ground truth, or ``None`` (real noise).
        prefix: for a division that is one mask: its scalars start with
            ``<prefix>predicted_clean`` and, with the ground truth,
            ``<prefix>{precision,recall,f1}`` (:func:`~ncl.division.detection.mask_scalars`),
            and these are its noise detection.
        scalars: the method's further scalars (logged as they are), after those.
        noise_detection: the method's own summary where its division is not one mask
            (co-divide: the mean over networks; ReCon's three subsets; CRCL's zeroed labels);
            by default the ``prefix`` scores (empty without a ``prefix`` or a ground truth).
        losses: the loss-histogram panel of the division made for this epoch, or ``None``.
        labels: the label-histogram panels (clean probabilities, soft labels).

    Returns:
        :class:`~ncl.callbacks.protocols.EpochDiagnostics`.
    """
    out: dict[str, float] = {}
    if prefix is not None:
        if len(masks) != 1:
            raise ValueError(f"division_report: `prefix` scores one mask, got {len(masks)}")
        out = mask_scalars(next(iter(masks.values())), true_clean, prefix)
    out.update(scalars or {})
    if noise_detection is None:
        noise_detection = prefixed(out, prefix) if prefix is not None else {}
    return EpochDiagnostics(out, dict(masks), losses, list(labels), dict(noise_detection))


def co_divide_report(division: Division | None, names: Sequence[str], gmm_seed: int | None,
                     true_clean: Tensor | None, targets: Tensor | None = None, *,
                     loss_name: str = "mean hinge") -> EpochDiagnostics:
    """NCR/LNC and IN2R: the co-divide or abandon draw made for the epoch (``None``: none) and
    LNC's momentum targets in a warm-up epoch.

    Args:
        division: ``(K, N)`` losses, probabilities ``w`` and clean masks, one row per network.
        names: the networks' names (``A``, ``B``).
        gmm_seed: the seed of the GMM the loss figure refits.
        true_clean: ``(N,)`` bool ground truth, or ``None``.
        targets: ``(K, N)`` momentum targets ``gamma`` to show, or ``None``.
        loss_name: the per-sample loss the mixture divides, in the loss figure's title.
    """
    labels = []
    if targets is not None:
        labels = [LabelView(f"momentum targets gamma of network {n} (LNC Eq. 5)", g,
                            "momentum target gamma (0 = noisy, 1 = clean)")
                  for n, g in zip(names, targets)]
    if division is None:
        return division_report({}, true_clean, labels=labels)
    scalars = division_stats(division, names, true_clean)
    kind = "co-divide" if division.keep is None else "abandon draw"
    losses = LossView(f"{kind}: per-sample loss ({loss_name}) and GMM",
                      dict(zip(names, division.losses)), gmm_seed)
    masks: dict[str, Tensor] = {}
    if division.keep is None:
        masks = dict(zip(names, division.clean))
        labels = [LabelView(f"clean probability w from network {n}'s GMM (Eq. 3)", w,
                            "clean probability w (0 = noisy, 1 = clean)")
                  for n, w in zip(names, division.prob)] + labels
    return division_report(masks, true_clean, scalars=scalars,
                           noise_detection=mean_over_networks(scalars, names), losses=losses,
                           labels=labels)


def beta_division_report(division: Division, true_clean: Tensor | None,
                         bmm_seed: int | None) -> EpochDiagnostics:
    """L2RM: the Beta-mixture division (one row) an epoch trains on: its size and, with the
    ground truth ``(N,)``, the precision/recall/F1 of the predicted-noisy pairs; the loss
    histogram (a Beta mixture is not drawn over it) and the clean posteriors."""
    losses = LossView("per-sample loss (mean hinge) of the Beta-mixture division",
                      {"net": division.losses[0]}, bmm_seed, mixture="beta")
    labels = [LabelView("L2RM clean probability (Beta mixture)", division.prob[0],
                        "clean probability")]
    return division_report({"L2RM division": division.clean[0]}, true_clean, prefix="l2rm/",
                           losses=losses, labels=labels)
