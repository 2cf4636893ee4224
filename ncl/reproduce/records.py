"""A finished cell's record (``cells/<id>.json``): test recalls, validation curve, noise detection."""

from __future__ import annotations

import json
import platform
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from ncl.division.detection import DETECTION, PREFIX, mean_over_networks, prefixed, three_way, zeroed_labels
from ncl.evaluation.report import read_results
from ncl.reproduce.cells import FitTest, newest, read_metrics
from ncl.reproduce.grid import ROWS, Cell

RECALLS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum")
#: Median ranks, recorded where the test writes them (the video tables' MR).
MEDIAN_RANKS = ("i2t_medr", "t2i_medr")
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


def detection_of_row(row: dict[str, str]) -> dict[str, float] | None:
    """The noise detection one metrics row logged in the schema every dividing method writes
    (``train/detection/<key>``, :mod:`ncl.division.detection`): precision / recall / F1 of
    the noisy pairs and the method's extras (ReCon's ``clean_noisy``, ``rough_clean_noisy``).
    ``None`` when the row has none."""
    found = {k[len(PREFIX):]: float(v) for k, v in row.items() if k.startswith(PREFIX) and v}
    return found if all(key in found for key in DETECTION) else None


def legacy_detection_of_row(row: dict[str, str], kind: str) -> dict[str, float] | None:
    """The detection of one row of a run from before issue 37, which logged only each method's
    own keys; :func:`backfill_detection` reads old runs with it. The arithmetic is the
    schema's (:mod:`ncl.division.detection`) on the logged values.

    * co-divide (NCR, LNC): ``division/<net>/{precision,recall,f1}``, averaged over networks.
    * labels (CRCL): the labels Eq. 12 zeroes, from ``labels/{all,noisy}/zero`` and
      ``labels/noisy/count`` (older runs: ``labels/noisy_*``, label below 0.5).
    * three-way (ReCon): ``D_n`` as the detected noisy set, from ``division/noisy`` and the
      ``division/{clean,local,noisy}_true_noisy`` counts, and the clean sets' purity.
    * prediction (DECL) / beta division (L2RM): ``decl/`` / ``l2rm/{precision,recall,f1}``.
    Returns ``None`` when the row has no such values.
    """
    scalars = _numbers(row)
    if kind == "co-divide":
        nets = sorted({k.split("/")[1] for k in scalars if k.startswith("division/") and k.endswith("/f1")})
        found = mean_over_networks(scalars, nets)
    elif kind == "labels":
        found = zeroed_labels(scalars)
    elif kind in ("prediction", "beta division"):
        found = prefixed(scalars, "decl/" if kind == "prediction" else "l2rm/")
    else:
        found = three_way(scalars)
    return found or None


def _numbers(row: dict[str, str]) -> dict[str, float]:
    """The row's filled numeric values (a CSV row holds every key of the run, most empty)."""
    out: dict[str, float] = {}
    for key, value in row.items():
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def detection(metrics: list[dict[str, str]], warmup: int, kind: str | None = None) -> dict[str, dict[str, float]]:
    """``{"after_warmup": ..., "end": ...}``: the first detection logged at an epoch ``>= warmup``
    (LNC's noise abandon also divides during warm-up; those are skipped) and the last one.

    ``kind`` (a :data:`DIVIDERS` value): read a run from before issue 37 with
    :func:`legacy_detection_of_row` instead of the schema."""
    def read(row: dict[str, str]) -> dict[str, float] | None:
        return detection_of_row(row) if kind is None else legacy_detection_of_row(row, kind)

    found = [(int(r["epoch"]), d) for r in metrics if r.get("epoch") and (d := read(r))]
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
        after = ROWS[cell.method].detection_after
        record["detection"] = detection(done.metrics, _hparam(done.best.parent.parent, after) or 0)
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
    """Recompute the detection of records written by an older version of the reader (ReCon
    before the purity fields, CRCL before the zeroed-label rule) from the run's ``metrics.csv``
    when it is still under ``out/runs`` (the records on disk are not rewritten). Such runs
    predate the ``train/detection/*`` schema: they are read by their methods' own keys
    (:func:`legacy_detection_of_row`)."""
    for r in records:
        kind = DIVIDERS.get(r["method"])
        if kind not in ("three-way", "labels") or r.get("detection_version") == DETECTION_VERSION:
            continue
        try:  # the fit's folder (``ncl test`` logs into a version folder of its own)
            fit_folder = newest(out / "runs" / r["id"], r["best_ckpt"]).parent.parent
            metrics = read_metrics(fit_folder)
        except (FileNotFoundError, OSError):
            continue
        after = ROWS[r["method"]].detection_after
        warmup = _hparam(fit_folder, after) or 0
        r["detection"] = detection(metrics, warmup) or detection(metrics, warmup, kind)
