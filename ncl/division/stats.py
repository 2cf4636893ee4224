"""Scalar diagnostics of a division and of per-sample labels: pure functions, no Lightning.

The methods report them through :meth:`~ncl.callbacks.protocols.Diagnosable.epoch_diagnostics`
and the :class:`~ncl.callbacks.diagnostics.Diagnostics` observer logs them. The ground truth
(``true_clean``, the DataModule's ``clean_mask`` of synthetic or injected noise) is read here
only, never in a loss; with real noise (CC152K) it is ``None`` and the scores against it are
left out.

* :func:`division_stats` - NCR/LNC's co-divide: sizes per network, the abandon draw, and
  precision/recall/F1 of the detected noisy pairs (LNC Table 7, Fig. 6).
* :func:`three_way_stats` - ReCon's ``D_c``/``D_l``/``D_n`` sizes, truly noisy pairs in each,
  pseudo-label and penalty means.
* :func:`label_stats` - soft labels (CRCL's ``y_hat``): distribution, flips since the previous
  epoch, the same split by true clean/noisy, and "label below 0.5" as a noise detector (the
  numbers behind CRCL's Fig. 1 b, c, e, f).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ncl.losses.recon import SUBSET_CLEAN, SUBSET_LOCAL, SUBSET_NOISY
from ncl.metrics.noise_detection import detection_metrics

if TYPE_CHECKING:
    from ncl.division.three_way import ThreeWayDivision
    from ncl.division.co_divide import Division

_SUBSETS = (("clean", SUBSET_CLEAN), ("local", SUBSET_LOCAL), ("noisy", SUBSET_NOISY))
#: Bins of the logged label histograms over [0, 1] (the last bin includes 1).
HISTOGRAM_BINS = 10
#: A label at or above this counts as "clean" for flips and detection scores.
CLEAN_AT = 0.5


def division_stats(division: Division, names: Sequence[str],
                   true_clean: Tensor | None = None) -> dict[str, float]:
    """Scalar diagnostics of one division.

    Args:
        division: the division (``clean`` is ``(K, N)``).
        names: the networks' names (``("A", "B")``), one per row of ``clean``.
        true_clean: ``(N,)`` bool ground truth, or ``None``.

    Returns:
        ``division/<name>/{clean,noisy}`` counts, ``division/abandoned`` when the division
        has a keep mask, and with the ground truth ``division/<name>/{precision,recall,f1,
        clean_recall}`` (fractions; positives are the noisy pairs, LNC Table 7).
    """
    if len(names) != division.clean.shape[0]:
        raise ValueError(f"names has {len(names)} entries for {division.clean.shape[0]} networks")
    out: dict[str, float] = {}
    for name, clean in zip(names, division.clean):
        out[f"division/{name}/clean"] = float(clean.sum())
        out[f"division/{name}/noisy"] = float((~clean).sum())
        if true_clean is not None:
            m = detection_metrics(clean, true_clean)
            out[f"division/{name}/precision"] = m["precision"]
            out[f"division/{name}/recall"] = m["recall"]
            out[f"division/{name}/f1"] = m["f1"]
            out[f"division/{name}/clean_recall"] = m["tn"] / max(m["tn"] + m["fp"], 1)
    if division.keep is not None:
        out["division/abandoned"] = float((~division.keep).sum())
    return out


def three_way_stats(division: ThreeWayDivision,
                    true_clean: Tensor | None = None) -> dict[str, float]:
    """Scalar diagnostics of one division.

    Args:
        division: the division (``subset`` is ``(N,)``).
        true_clean: ``(N,)`` bool ground truth, or ``None``.

    Returns:
        ``division/{clean,local,noisy}`` (subset sizes), ``division/made_for_epoch``,
        ``division/pseudo_label_mean`` (mean ``y_hat`` over ``D_n``, when it is not empty),
        ``division/penalty_mean`` (mean ``lambda`` over ``D_l``, when not empty) and, with the
        ground truth, ``division/{clean,local,noisy}_true_noisy`` (truly noisy pairs in each).
    """
    subset = division.subset
    out: dict[str, float] = {"division/made_for_epoch": float(division.epoch)}
    for name, code in _SUBSETS:
        members = subset == code
        out[f"division/{name}"] = float(members.sum())
        if true_clean is not None:
            out[f"division/{name}_true_noisy"] = float((members & ~true_clean).sum())
    noisy, local = subset == SUBSET_NOISY, subset == SUBSET_LOCAL
    if bool(noisy.any()):
        out["division/pseudo_label_mean"] = float(division.labels[noisy].mean())
    if bool(local.any()):
        out["division/penalty_mean"] = float(division.penalty[local].mean())
    return out


def _quantiles(x: Tensor) -> tuple[float, float, float]:
    q = torch.quantile(x.double(), torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64))
    return float(q[0]), float(q[1]), float(q[2])


def _distribution(prefix: str, y: Tensor) -> dict[str, float]:
    """Mean, 10/50/90 % quantiles, zeros and histogram counts of labels ``y`` (n,)."""
    if y.numel() == 0:
        return {f"{prefix}/count": 0.0}
    q10, q50, q90 = _quantiles(y)
    out = {f"{prefix}/count": float(y.numel()), f"{prefix}/mean": float(y.mean()),
           f"{prefix}/q10": q10, f"{prefix}/q50": q50, f"{prefix}/q90": q90,
           f"{prefix}/zero": float((y == 0).sum())}
    counts = torch.histc(y.double(), bins=HISTOGRAM_BINS, min=0.0, max=1.0)
    for k, count in enumerate(counts.tolist()):
        out[f"{prefix}/hist{k:02d}"] = float(count)
    return out


def label_stats(labels: Tensor, true_clean: Tensor | None = None,
                previous: Tensor | None = None) -> dict[str, float]:
    """Scalar diagnostics of the corrected labels ``y_hat`` of the whole training set.

    Args:
        labels: ``(N,)`` corrected labels in [0, 1].
        true_clean: ``(N,)`` bool ground truth, or ``None``.
        previous: ``(N,)`` the labels at the previous report, or ``None``.

    Returns:
        ``labels/all/*`` (mean, quantiles, zeros, histogram counts over ``HISTOGRAM_BINS`` bins of
        [0, 1]); with ``previous``: ``labels/flips`` (pairs whose side of ``CLEAN_AT`` changed),
        ``labels/flips_to_noisy``, ``labels/flips_to_clean``, ``labels/mean_abs_change``; with
        the ground truth: ``labels/clean/*`` and ``labels/noisy/*`` (the same statistics per
        true subset) and ``labels/noisy_precision``, ``labels/noisy_recall``, ``labels/noisy_f1``
        of "label below ``CLEAN_AT``" as a noise detector (fractions).
    """
    y = labels.detach().float().cpu()
    out = _distribution("labels/all", y)
    clean_now = y >= CLEAN_AT
    if previous is not None and previous.shape == y.shape:
        before = previous.detach().float().cpu()
        clean_before = before >= CLEAN_AT
        out["labels/flips"] = float((clean_now != clean_before).sum())
        out["labels/flips_to_noisy"] = float((clean_before & ~clean_now).sum())
        out["labels/flips_to_clean"] = float((~clean_before & clean_now).sum())
        out["labels/mean_abs_change"] = float((y - before).abs().mean())
    if true_clean is not None:
        truth = true_clean.bool().cpu()
        out.update(_distribution("labels/clean", y[truth]))
        out.update(_distribution("labels/noisy", y[~truth]))
        m = detection_metrics(clean_now, truth)
        out["labels/noisy_precision"] = float(m["precision"])
        out["labels/noisy_recall"] = float(m["recall"])
        out["labels/noisy_f1"] = float(m["f1"])
    return out
