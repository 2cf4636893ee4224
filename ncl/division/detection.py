"""The one noise-detection schema every dividing method reports (issue 37): pure functions.

Each dividing method logs its own diagnostics (NCR/LNC ``division/<net>/*``, CRCL
``labels/*``, ReCon ``division/*``, DECL ``decl/*``, L2RM ``l2rm/*``); it also sums them up
here as its noise detection against the ground truth (positives: the noisy pairs):
``precision``, ``recall``, ``f1`` and, for ReCon, the purity of its clean sets
(``clean_noisy``, ``rough_clean_noisy``). The method returns that summary in
:attr:`~ncl.callbacks.protocols.EpochDiagnostics.noise_detection`; the
:class:`~ncl.callbacks.diagnostics.Diagnostics` observer logs it as
``train/detection/<key>`` (:data:`PREFIX`), and the grid's records
(:mod:`ncl.reproduce.records`) read nothing else.

The summaries are computed from the scalars *as the logger keeps them* (float32,
:func:`as_logged`), in the arithmetic the grid's reader used on those logged values before
issue 37, and logged in float64: a run gives the grid the same numbers to the last digit as
the per-method keys did.

A method whose division is one predicted-clean mask needs none of the per-method readers: it
reports with :func:`ncl.methods.reports.division_report`, which computes
:func:`mask_scalars` (``<prefix>predicted_clean``, ``<prefix>{precision,recall,f1}``) and reads
them back with :func:`prefixed`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

import numpy as np
from torch import Tensor

from ncl.metrics.noise_detection import detection_metrics

#: The schema's core keys.
DETECTION = ("precision", "recall", "f1")
#: Where :class:`~ncl.callbacks.diagnostics.Diagnostics` logs the summary.
PREFIX = "train/detection/"


def as_logged(value: float) -> float:
    """``value`` as a logged scalar reads back (Lightning logs a Python float as float32)."""
    return float(np.float32(value))


def precision_recall_f1(tp: float, predicted: float, positives: float) -> dict[str, float]:
    """Precision, recall and F1 of a detector that flags ``predicted`` items, ``tp`` of them
    among the ``positives`` correctly (0.0 where a denominator is 0)."""
    p = tp / predicted if predicted else 0.0
    r = tp / positives if positives else 0.0
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}


def detection_scalars(clean: Tensor, true_clean: Tensor | None, prefix: str) -> dict[str, float]:
    """``<prefix>{precision,recall,f1}`` of the ``(N,)`` predicted-clean mask ``clean`` against
    the ``(N,)`` ground truth (positives: the noisy pairs,
    :func:`~ncl.metrics.noise_detection.detection_metrics`); empty without a ground truth."""
    if true_clean is None:
        return {}
    m = detection_metrics(clean.bool(), true_clean.bool())
    return {f"{prefix}{key}": float(m[key]) for key in DETECTION}


def mask_scalars(clean: Tensor, true_clean: Tensor | None, prefix: str) -> dict[str, float]:
    """One predicted-clean mask's scalars: ``<prefix>predicted_clean`` (how many pairs it keeps)
    and, with the ground truth, :func:`detection_scalars`."""
    return {f"{prefix}predicted_clean": float(clean.sum()),
            **detection_scalars(clean, true_clean, prefix)}


def prefixed(scalars: Mapping[str, float], prefix: str) -> dict[str, float]:
    """``{precision, recall, f1}`` of the scalars ``<prefix>precision`` etc. (DECL's
    ``decl/``, L2RM's ``l2rm/``); empty when they are absent (no ground truth)."""
    if f"{prefix}f1" not in scalars:
        return {}
    return {key: as_logged(scalars[f"{prefix}{key}"]) for key in DETECTION}


def mean_over_networks(scalars: Mapping[str, float], names: Sequence[str]) -> dict[str, float]:
    """NCR/LNC's co-divide: the mean over networks of ``division/<net>/{precision,recall,f1}``
    (:func:`~ncl.division.stats.division_stats`); empty without them."""
    nets = [n for n in names if f"division/{n}/f1" in scalars]
    if not nets:
        return {}
    return {key: statistics.mean(as_logged(scalars[f"division/{n}/{key}"]) for n in nets)
            for key in DETECTION}


def zeroed_labels(scalars: Mapping[str, float]) -> dict[str, float]:
    """CRCL: the labels Eq. 12 zeroes as the detected noise, from ``labels/{all,noisy}/zero``
    and ``labels/noisy/count`` (:func:`~ncl.division.stats.label_stats`).

    Its soft labels of clean pairs stay well below 0.5 on the synthetic benchmark (mean
    0.07-0.41 at 20 % noise), so "label below 0.5" would call almost every pair noisy. Where
    no pair is truly noisy (``labels/noisy/zero`` absent) it falls back to that rule's
    ``labels/noisy_{precision,recall,f1}``, as the grid's reader always did.
    """
    needed = ("labels/all/zero", "labels/noisy/zero", "labels/noisy/count")
    if all(key in scalars for key in needed):
        tp, predicted, positives = (as_logged(scalars[key]) for key in
                                    ("labels/noisy/zero", "labels/all/zero", "labels/noisy/count"))
        return precision_recall_f1(tp, predicted, positives)
    return prefixed(scalars, "labels/noisy_")


def three_way(scalars: Mapping[str, float]) -> dict[str, float]:
    """ReCon: ``D_n`` as the detected noise, from ``division/noisy`` and the
    ``division/{clean,local,noisy}_true_noisy`` counts (:func:`~ncl.division.stats.three_way_stats`),
    with the fractions of truly noisy pairs in ``D_c`` (``clean_noisy``) and in ``D_c + D_l``
    (``rough_clean_noisy``).

    ReCon's claim (Sect. 3.3): the intra-modal check moves noisy pairs out of the rough-clean
    set ``D_c + D_l`` into ``D_l``, so ``D_c`` is purer than ``D_c + D_l``.
    """
    if "division/noisy_true_noisy" not in scalars:
        return {}
    counts = {k: as_logged(scalars[f"division/{k}_true_noisy"]) for k in ("clean", "local", "noisy")}
    found = precision_recall_f1(counts["noisy"], as_logged(scalars["division/noisy"]),
                                sum(counts.values()))
    clean = as_logged(scalars.get("division/clean", 0.0))
    local = as_logged(scalars.get("division/local", 0.0))
    found["clean_noisy"] = counts["clean"] / clean if clean else 0.0
    found["rough_clean_noisy"] = (counts["clean"] + counts["local"]) / (clean + local) if clean + local else 0.0
    return found
