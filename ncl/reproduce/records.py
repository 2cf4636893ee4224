"""A finished cell's record (``cells/<id>.json``): test recalls, validation curve, noise detection."""

from __future__ import annotations

import json
import platform
import statistics
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from ncl.evaluation.report import read_results
from ncl.reproduce.cells import FitTest, newest, read_metrics
from ncl.reproduce.grid import ROWS, Cell

RECALLS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum")
#: Median ranks, recorded where the test writes them (the video tables' MR).
MEDIAN_RANKS = ("i2t_medr", "t2i_medr")
DETECTION = ("precision", "recall", "f1")
#: Version of the detection record (2: CRCL's zeroed labels, ReCon's clean-set purity).
DETECTION_VERSION = 2
#: Methods that divide the data, and how (their rows' ``divides``, :mod:`ncl.methods.declaration`).
DIVIDERS = {name: row.divides for name, row in ROWS.items() if row.divides}


def _hparam(run_folder: Path, name: str) -> int | None:
    """``model.init_args.<name>`` of the fit's saved ``config.yaml`` (``None`` if absent)."""
    path = run_folder / "config.yaml"
    if not path.exists():
        return None
    saved = yaml.safe_load(path.read_text())
    value = ((saved.get("model") or {}).get("init_args") or {}).get(name)
    return None if value is None else int(value)


def _prf(tp: float, predicted: float, positives: float) -> dict[str, float]:
    """Precision, recall and F1 of a detector that flags ``predicted`` items, ``tp`` correctly."""
    p = tp / predicted if predicted else 0.0
    r = tp / positives if positives else 0.0
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}


def detection_of_row(row: dict[str, str], kind: str) -> dict[str, float] | None:
    """Noise-detection precision / recall / F1 (positives: the noisy pairs) of one metrics row.

    * co-divide (NCR, LNC): ``division/<net>/{precision,recall,f1}``, averaged over networks.
    * labels (CRCL): the labels Eq. 12 zeroes, from ``labels/{all,noisy}/zero`` and
      ``labels/noisy/count`` (older runs: ``labels/noisy_*``, label below 0.5).
    * three-way (ReCon): ``D_n`` as the detected noisy set, from ``division/noisy`` and the
      ``division/{clean,local,noisy}_true_noisy`` counts.
    * prediction (DECL): the pairs whose matched caption is not the top evidence,
      ``decl/{precision,recall,f1}``.
    Returns ``None`` when the row has no such values.
    """
    if kind == "co-divide":
        nets = sorted({k.split("/")[1] for k in row if k.startswith("division/") and k.endswith("/f1") and row[k]})
        if not nets:
            return None
        return {m: statistics.mean(float(row[f"division/{n}/{m}"]) for n in nets) for m in DETECTION}
    if kind == "labels":
        if row.get("labels/all/zero") and row.get("labels/noisy/zero") and row.get("labels/noisy/count"):
            # CRCL's own notion of noise: the labels Eq. 12 zeroes (y < threshold 0.1). Its soft
            # labels of clean pairs stay well below 0.5 here (mean 0.07-0.41 at 20 % noise),
            # so "label below 0.5" would call almost every pair noisy.
            return _prf(float(row["labels/noisy/zero"]), float(row["labels/all/zero"]),
                        float(row["labels/noisy/count"]))
        if not row.get("labels/noisy_f1"):
            return None
        return {m: float(row[f"labels/noisy_{m}"]) for m in DETECTION}
    if kind in ("prediction", "beta division"):  # DECL's prediction, L2RM's Beta mixture
        prefix = "decl" if kind == "prediction" else "l2rm"
        if not row.get(f"{prefix}/f1"):
            return None
        return {m: float(row[f"{prefix}/{m}"]) for m in DETECTION}
    if not row.get("division/noisy_true_noisy"):
        return None
    counts = {k: float(row[f"division/{k}_true_noisy"]) for k in ("clean", "local", "noisy")}
    found = _prf(counts["noisy"], float(row["division/noisy"]), sum(counts.values()))
    # ReCon's claim (Sect. 3.3): the intra-modal check moves noisy pairs out of the rough-clean
    # set D_c + D_l into D_l, so D_c is purer than D_c + D_l (fractions of truly noisy pairs).
    clean, local = float(row.get("division/clean") or 0), float(row.get("division/local") or 0)
    found["clean_noisy"] = counts["clean"] / clean if clean else 0.0
    found["rough_clean_noisy"] = (counts["clean"] + counts["local"]) / (clean + local) if clean + local else 0.0
    return found


def detection(metrics: list[dict[str, str]], kind: str, warmup: int) -> dict[str, dict[str, float]]:
    """``{"after_warmup": ..., "end": ...}``: the first detection logged at an epoch ``>= warmup``
    (LNC's noise abandon also divides during warm-up; those are skipped) and the last one."""
    found = [(int(r["epoch"]), d) for r in metrics if r.get("epoch") and (d := detection_of_row(r, kind))]
    found = [(e, d) for e, d in found if e >= warmup]
    if not found:
        return {}
    return {"after_warmup": {"epoch": found[0][0], **found[0][1]}, "end": {"epoch": found[-1][0], **found[-1][1]}}


def summarise(cell: Cell, done: FitTest, slot: str, started: float) -> dict[str, Any]:
    """The finished cell's record (what ``cells/<id>.json`` holds)."""
    systems, noise = read_results(done.results)
    system, by_protocol = list(systems.items())[-1]  # the last system: the ensemble if any
    protocol = "1k" if "1k" in by_protocol else next(iter(by_protocol))
    scores = by_protocol[protocol]
    test = {k: float(scores[k]) for k in (*RECALLS, *MEDIAN_RANKS) if k in scores}
    rsums = [float(r["val/rsum"]) for r in done.metrics if r.get("val/rsum")]
    record: dict[str, Any] = {**asdict(cell), "id": cell.id, "label": cell.label, "system": system,
                              "protocol": protocol, "test": test, "best_val_rsum": max(rsums, default=None),
                              "val_rsums": [round(v, 1) for v in rsums], "best_ckpt": done.best.name,
                              "fit_seconds": done.fit_seconds, "test_seconds": done.test_seconds,
                              "cpu_seconds": done.cpu_seconds,
                              "wall_seconds": round(time.time() - started, 1), "resumed": done.resumed,
                              "slot": slot, "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "host": platform.node()}
    # Which published pairing the cell trained on (issue 27): two cells on the same noise match.
    record.update({k: noise[k] for k in ("noise_pairing", "noise_pairing_digest") if k in noise})
    if cell.method in DIVIDERS:
        kind = DIVIDERS[cell.method]
        name = "freeze_epochs" if kind == "labels" else "warmup_epochs"
        record["detection"] = detection(done.metrics, kind, _hparam(done.best.parent.parent, name) or 0)
        record["detection_version"] = DETECTION_VERSION
    return record


def load_records(out: Path, cells: list[Cell]) -> list[dict[str, Any]]:
    """The records of the finished cells among ``cells``."""
    records = []
    for cell in cells:
        path = out / "cells" / f"{cell.id}.json"
        if path.exists():
            records.append(json.loads(path.read_text()))
    return records


def backfill_detection(out: Path, records: list[dict[str, Any]]) -> None:
    """Recompute the detection of records written by an older version of :func:`detection_of_row`
    (ReCon before the purity fields, CRCL before the zeroed-label rule) from the run's
    ``metrics.csv`` when it is still under ``out/runs`` (the records on disk are not rewritten)."""
    for r in records:
        kind = DIVIDERS.get(r["method"])
        if kind not in ("three-way", "labels") or r.get("detection_version") == DETECTION_VERSION:
            continue
        try:  # the fit's folder (``ncl test`` logs into a version folder of its own)
            fit_folder = newest(out / "runs" / r["id"], r["best_ckpt"]).parent.parent
            metrics = read_metrics(fit_folder)
        except (FileNotFoundError, OSError):
            continue
        name = "freeze_epochs" if kind == "labels" else "warmup_epochs"
        r["detection"] = detection(metrics, kind, _hparam(fit_folder, name) or 0)
