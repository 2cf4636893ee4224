"""Reproduction grid: methods x backbone x noise kind x noise ratio x seeds, resumable, with tables.

Every cell is ``ncl fit`` then ``ncl test`` of its best checkpoint (by validation rSum) through
the real CLI, in fresh processes (:mod:`grid_cells`). Outputs under ``--out``:

* ``cells/<cell id>.json`` - one file per *finished* cell, written atomically after its test:
  test R@1/5/10 both ways and rSum, the validation curve, noise-detection precision / recall /
  F1, wall times. A run skips every cell whose file exists, so a grid that was killed is
  continued by running the same command again. A killed cell has no file; its rerun resumes
  the fit from the cell's ``last.ckpt`` (``--ckpt_path last``), or starts it again when no
  epoch had finished.
* ``runs/<cell id>/`` (the cell's run folder) and ``logs/<cell id>.log`` (CLI output).
* ``results.md`` - R@1/5/10 both ways and rSum, mean ± std over seeds, one table per noise
  kind (rows = method, column groups = noise ratio), and the noise-detection table
  (precision / recall / F1 after warm-up and at the end, LNC Table 7) for the methods that
  divide the data; ``cells.csv`` - every finished cell as a flat row; ``rsum_vs_noise.png`` -
  test rSum against noise ratio per method with ± std error bars, one panel per noise kind.

Noise kinds: ``caption`` is NCR's caption shuffling, ``image`` RCL's image-level permutation.
Ratio 0 is the same data for both kinds, so it is one cell (kind ``clean``) that stands in
both tables.

Presets (``--preset``; ``--methods``/``--backbones``/``--noise``/``--noise-types``/``--seeds``/
``--epochs`` narrow or change them):

* ``tiny`` - CI smoke test: NCR and RCL (SAF), both kinds, 0 / 50 %, one seed, 2 epochs on
  the ``tiny`` synthetic data (60 images).
* ``synthetic-small`` - every implemented method on the quickstart data (1,000 images x 5
  captions), both kinds, 0/20/50/80 %, seeds 0-2, 8 epochs of batch 16 (313 steps an epoch),
  3 warm-up epochs; about 4 hours (7.7 h of CPU, measured) on an idle 2-core CPU with ``--jobs 2`` (docs/results.md,
  "The reproduction tool", has the measurements the warm-up and the estimate come from).
* ``paper`` - the official datasets with the method configs in ``configs/`` (e.g.
  ``configs/ncr_sgr_f30k.yaml``; ``--dataset f30k|coco``), their own schedules; needs the
  official features under ``--data-root``. Check the command lines with ``--dry-run``.

Examples:

    python scripts/reproduce.py --preset synthetic-small --jobs 2 --out runs/reproduce
    python scripts/reproduce.py --preset paper --dataset f30k --devices 0,1 --data-root data \\
        --out runs/reproduce_f30k
    python scripts/reproduce.py --preset paper --dry-run --out /tmp/grid
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import queue
import shlex
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # grid_cells, also when imported
from grid_cells import (BENCH, METHODS, QUICKSTART, REPO, CellError, cell_env,  # noqa: E402
                        FitTest, cli_command, fit_then_test, newest, read_metrics)

sys.path.insert(0, str(REPO))
from ncl.io import atomic_write, atomic_write_text  # noqa: E402

NOISE_KINDS = ("caption", "image")
CLEAN = "clean"  # the noise kind of ratio-0 cells, shared by both tables
BACKBONES = ("SGR", "SAF")
RECALLS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum")
DETECTION = ("precision", "recall", "f1")

#: Row labels as in the papers: ``{}`` is the backbone (SGR* = summed warm-up, then hardest).
LABELS: dict[str, str] = {
    "triplet": "{} (hardest triplet)", "triplet_warmup": "{}* (warm-up, then hardest)",
    "triplet_sum": "{} summed triplet", "infonce": "{} InfoNCE", "ncr": "NCR-{}", "lnc": "LNC-{}",
    "rcl": "RCL-{}", "crcl": "CRCL-{}", "recon": "ReCon-{}", "recon_no_im": "ReCon-{} w/o intra-modal check",
    "clean": "{}-C (clean only)", "clean_sum": "{}-C summed (clean only)",
}
#: Methods that divide the data, and where their noise detection is logged.
#: Version of the detection record (2: CRCL's zeroed labels, ReCon's clean-set purity).
DETECTION_VERSION = 2
DIVIDERS = {"ncr": "co-divide", "lnc": "co-divide", "crcl": "labels", "recon": "three-way",
            "recon_no_im": "three-way"}

# --- synthetic-small: measured choices (docs/results.md, "The reproduction tool") -----------------
#: Batch 16: 313 steps an epoch at about the cost of batch 64's 79 (SGR scores B x B pairs).
SMALL_BATCH = 16
#: Summed (SGR*) / mean-hinge (NCR, LNC) / triplet (ReCon) warm-up epochs: 939 steps. Measured
#: (SGR, seed 0): the summed triplet reached validation rSum 431 / 526 after 2 / 3 epochs at 0 %;
#: SGR* switched at 440 (caption 20 %) and 372 (image 20 %) and survived, at 263 (caption 50 %)
#: and collapsed, as the issue-15 measurement predicts for switches below about 400-455.
SMALL_WARMUP = 3
SMALL_EPOCHS = 8
#: CRCL: one piece of 8 epochs, labels frozen for the first 3 (the same 939 steps as every other
#: method's warm-up). The first grid (seed 0) ran two pieces of 4 epochs with 2 frozen: the
#: labels were written from a model at validation rSum 118 (4,320 of 5,000 clean labels zeroed
#: at 0 %) and the second piece, restarted from scratch, ended near where the first had got to
#: (clean: 457 at epoch 3, 445 at epoch 7); docs/results.md, "Multi-seed reproduction".
SMALL_CRCL = ["--model.pieces=[8]", "--model.freeze_epochs=3"]
#: LNC as configs/lnc_*.yaml read its paper: P of Eq. 9 (linear) and Alg. 1's w >= 0.5.
SMALL_LNC = ["--model.prediction_form=linear", "--model.clean_rule=greater_equal"]
#: Tiny: the ``tiny`` synthetic preset (6 regions x 16 dims) and a backbone to match.
TINY_DATA = ["--data.preset=tiny", "--data.n_train=60", "--data.batch_size=16",
             "--model.backbone.init_args.img_dim=16", "--model.backbone.init_args.num_regions=6",
             "--model.backbone.init_args.word_dim=8", "--model.backbone.init_args.embed_size=16",
             "--model.backbone.init_args.sim_dim=8"]

#: Paper preset: method -> config stem (``{bb}`` backbone, ``{ds}`` dataset) in configs/.
PAPER_CONFIGS: dict[str, str] = {
    "triplet": "baseline_triplet_{bb}_{ds}", "triplet_warmup": "baseline_triplet_warmup_{bb}_{ds}",
    "triplet_sum": "baseline_triplet_sum_{bb}_{ds}", "infonce": "baseline_infonce_{bb}_{ds}",
    "ncr": "ncr_{bb}_{ds}", "lnc": "lnc_{bb}_{ds}", "rcl": "rcl_{bb}_{ds}", "crcl": "crcl_{bb}_{ds}",
    "recon": "recon_{bb}_{ds}",
}
CONFIGS = REPO / "configs"


@dataclass(frozen=True)
class Cell:
    """One grid cell: a method on a backbone at one noise kind, ratio and seed."""

    method: str
    backbone: str
    noise_type: str  # "caption", "image", or CLEAN at ratio 0
    noise: float
    seed: int

    @property
    def id(self) -> str:
        """File-name-safe identity, e.g. ``ncr-SGR-caption-0.2-s0``."""
        return f"{self.method}-{self.backbone}-{self.noise_type}-{self.noise:g}-s{self.seed}"

    @property
    def label(self) -> str:
        return LABELS.get(self.method, self.method + "-{}").format(self.backbone)


@dataclass(frozen=True)
class Preset:
    """A grid and how its cells are configured.

    Attributes:
        rows: ``(method, backbone)`` pairs, the tables' rows in order.
        epochs: ``--trainer.max_epochs`` (``None``: the config's own).
        overrides: CLI overrides of every cell (synthetic presets only).
        method_overrides: extra overrides per method (after :data:`METHODS`).
    """

    name: str
    rows: tuple[tuple[str, str], ...]
    noise_types: tuple[str, ...]
    noises: tuple[float, ...]
    seeds: tuple[int, ...]
    epochs: int | None
    overrides: tuple[str, ...] = ()
    method_overrides: dict[str, tuple[str, ...]] = field(default_factory=dict)
    paper: bool = False


def _warmup(epochs: int) -> dict[str, tuple[str, ...]]:
    """Per-method overrides that set the warm-up of the methods that have one."""
    w = (f"--model.warmup_epochs={epochs}",)
    return {m: w for m in ("triplet_warmup", "ncr", "lnc", "recon", "recon_no_im")}


_ALL_SYNTHETIC = (("triplet", "SGR"), ("triplet", "SAF"), ("triplet_warmup", "SGR"),
                  ("triplet_warmup", "SAF"), ("triplet_sum", "SGR"), ("infonce", "SGR"),
                  ("ncr", "SGR"), ("lnc", "SGR"), ("rcl", "SGR"), ("crcl", "SGR"), ("recon", "SAF"))

PRESETS: dict[str, Preset] = {
    "tiny": Preset("tiny", rows=(("ncr", "SAF"), ("rcl", "SAF")), noise_types=NOISE_KINDS,
                   noises=(0.0, 0.5), seeds=(0,), epochs=2, overrides=tuple(TINY_DATA),
                   method_overrides=_warmup(1)),
    "synthetic-small": Preset(
        "synthetic-small", rows=_ALL_SYNTHETIC, noise_types=NOISE_KINDS, noises=(0.0, 0.2, 0.5, 0.8),
        seeds=(0, 1, 2), epochs=SMALL_EPOCHS, overrides=(f"--data.batch_size={SMALL_BATCH}",),
        method_overrides={**_warmup(SMALL_WARMUP), "crcl": tuple(SMALL_CRCL),
                          "lnc": (*_warmup(SMALL_WARMUP)["lnc"], *SMALL_LNC)}),
    "paper": Preset(
        "paper", rows=(("triplet", "sgr"), ("triplet", "saf"), ("triplet_warmup", "sgr"),
                       ("triplet_sum", "sgr"), ("infonce", "sgr"), ("ncr", "sgr"), ("lnc", "sgr"),
                       ("rcl", "sgr"), ("rcl", "saf"), ("crcl", "sgr"), ("crcl", "saf"),
                       ("recon", "sgr"), ("recon", "saf")),
        noise_types=NOISE_KINDS, noises=(0.0, 0.2, 0.5, 0.8), seeds=(0, 1, 2), epochs=None, paper=True),
}


def grid(rows: Sequence[tuple[str, str]], noise_types: Sequence[str], noises: Sequence[float],
         seeds: Sequence[int]) -> list[Cell]:
    """The cells in run order (seed-major, so a partial grid has whole seeds); ratio 0 once."""
    cells: list[Cell] = []
    for seed in seeds:
        for noise in noises:
            kinds = [CLEAN] if noise == 0 else list(noise_types)
            for kind in kinds:
                cells.extend(Cell(m, b, kind, float(noise), seed) for m, b in rows)
    return list(dict.fromkeys(cells))


def paper_config(method: str, backbone: str, dataset: str, noise_type: str) -> tuple[Path, list[str]]:
    """The method issue's config for a paper cell, and the noise overrides it needs.

    The ``_imagenoise`` variant is used for image-level noise where one exists. A config whose
    noise file is for the other noise kind gets ``--data.noise_file=null`` (noise drawn from
    ``noise_seed``), so that a file of one kind is never read as the other.

    Raises:
        FileNotFoundError: no config for this method, backbone and dataset.
    """
    if method not in PAPER_CONFIGS:
        raise FileNotFoundError(f"--methods {method}: no paper config pattern (known: {sorted(PAPER_CONFIGS)})")
    stem = PAPER_CONFIGS[method].format(bb=backbone.lower(), ds=dataset)
    path = CONFIGS / f"{stem}.yaml"
    if noise_type == "image" and (CONFIGS / f"{stem}_imagenoise.yaml").exists():
        path = CONFIGS / f"{stem}_imagenoise.yaml"
    if not path.exists():
        raise FileNotFoundError(f"no config {path.relative_to(REPO)} for {method} with {backbone} on {dataset}")
    data = (yaml.safe_load(path.read_text()).get("data") or {}).get("init_args") or {}
    extra = []
    if data.get("noise_file") and data.get("noise_type") != noise_type and noise_type != CLEAN:
        extra.append("--data.noise_file=null")
    return path, extra


def cell_args(cell: Cell, preset: Preset, run_root: Path, dataset: str, data_root: str | None,
              gpu: bool) -> tuple[list[str], list[str]]:
    """``(common, fit_only)`` CLI overrides of one cell (both sub-commands / the fit)."""
    kind = "none" if cell.noise_type == CLEAN else cell.noise_type
    noise = [f"--data.noise_type={kind}", f"--data.noise_ratio={cell.noise:g}", f"--data.noise_seed={cell.seed}"]
    if preset.paper:
        config, extra = paper_config(cell.method, cell.backbone, dataset, cell.noise_type)
        common = ["--config", str(config), *extra,
                  # the CSV logger, so that the detection diagnostics can be read back
                  "--trainer.logger=ncl.loggers.NclCSVLogger", f"--trainer.logger.init_args.save_dir={run_root}"]
        if data_root is not None:
            common.append(f"--data.data_root={data_root}")
    else:
        common = ["--config", str(QUICKSTART), *BENCH, *METHODS[cell.method],
                  f"--model.backbone.init_args.module_name={cell.backbone}", *preset.overrides,
                  *preset.method_overrides.get(cell.method, ()), "--trainer.enable_model_summary=false"]
    common += [*noise, f"--seed_everything={cell.seed}", f"--trainer.default_root_dir={run_root}",
               "--trainer.enable_progress_bar=false"]
    if gpu:
        common += ["--trainer.accelerator=gpu", "--trainer.devices=1"]
    fit_only = [f"--trainer.max_epochs={preset.epochs}"] if preset.epochs is not None else []
    return common, fit_only


# --- reading a finished run back ------------------------------------------------------------

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
    system, by_protocol = list(done.results.items())[-1]  # the last system: the ensemble if any
    protocol = "1k" if "1k" in by_protocol else next(iter(by_protocol))
    test = {k: float(by_protocol[protocol][k]) for k in RECALLS}
    rsums = [float(r["val/rsum"]) for r in done.metrics if r.get("val/rsum")]
    record: dict[str, Any] = {**asdict(cell), "id": cell.id, "label": cell.label, "system": system,
                              "protocol": protocol, "test": test, "best_val_rsum": max(rsums, default=None),
                              "val_rsums": [round(v, 1) for v in rsums], "best_ckpt": done.best.name,
                              "fit_seconds": done.fit_seconds, "test_seconds": done.test_seconds,
                              "cpu_seconds": done.cpu_seconds,
                              "wall_seconds": round(time.time() - started, 1), "resumed": done.resumed,
                              "slot": slot, "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "host": platform.node()}
    if cell.method in DIVIDERS:
        kind = DIVIDERS[cell.method]
        name = "freeze_epochs" if kind == "labels" else "warmup_epochs"
        record["detection"] = detection(done.metrics, kind, _hparam(done.best.parent.parent, name) or 0)
        record["detection_version"] = DETECTION_VERSION
    return record


# --- running ----------------------------------------------------------------------------------

@dataclass
class Runner:
    """Runs cells into ``out``; ``slots`` are GPU ids (``gpu``) or CPU slot names."""

    preset: Preset
    out: Path
    threads: int
    gpu: bool
    dataset: str = "f30k"
    data_root: str | None = None

    def paths(self, cell: Cell) -> tuple[Path, Path, Path]:
        return (self.out / "cells" / f"{cell.id}.json", self.out / "runs" / cell.id,
                self.out / "logs" / f"{cell.id}.log")

    def commands(self, cell: Cell) -> list[list[str]]:
        """The cell's fit and test command lines (test: the best checkpoint of the run)."""
        _, run_root, _ = self.paths(cell)
        common, fit_only = cell_args(cell, self.preset, run_root, self.dataset, self.data_root, self.gpu)
        return [cli_command("fit", [*common, *fit_only, "--ckpt_path=last", "--fresh_if_missing=true"]),
                cli_command("test", [*common, "--ckpt_path=best"])]

    def run(self, cell: Cell, slot: str) -> dict[str, Any]:
        """Fit (resuming a killed attempt) and test one cell; write its record atomically."""
        result, run_root, log = self.paths(cell)
        if not any(run_root.rglob("last.ckpt")):
            shutil.rmtree(run_root, ignore_errors=True)  # a killed attempt before its first epoch
        run_root.mkdir(parents=True, exist_ok=True)
        log.parent.mkdir(parents=True, exist_ok=True)
        common, fit_only = cell_args(cell, self.preset, run_root, self.dataset, self.data_root, self.gpu)
        env = cell_env(threads=self.threads, cuda_devices=slot if self.gpu else None)
        started = time.time()
        done = fit_then_test(common, fit_only, run_root, env, resume=True, log=log)
        record = summarise(cell, done, slot, started)
        result.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(result, json.dumps(record, indent=1) + "\n")
        return record


def run_all(runner: Runner, cells: list[Cell], slots: list[str]) -> list[str]:
    """Run ``cells`` over ``slots`` (one cell per slot at a time); the ids of the failed ones."""
    free: queue.Queue[str] = queue.Queue()
    for s in slots:
        free.put(s)
    failed: list[str] = []

    def one(cell: Cell) -> None:
        slot = free.get()
        try:
            record = runner.run(cell, slot)
            print(f"done {cell.id}: test rSum {record['test']['rsum']:.1f}, {record['wall_seconds']:.0f} s"
                  f"{' (resumed)' if record['resumed'] else ''}", flush=True)
        except Exception as err:  # noqa: BLE001 - one broken cell must not stop the others
            failed.append(cell.id)
            kind = "" if isinstance(err, CellError) else f"{type(err).__name__}: "
            print(f"FAILED {cell.id} (log: {runner.paths(cell)[2]}): {kind}{str(err)[-600:]}", flush=True)
        finally:
            free.put(slot)

    with ThreadPoolExecutor(max_workers=len(slots)) as pool:
        list(pool.map(one, cells))
    return failed


# --- tables and plot --------------------------------------------------------------------------

def load_records(out: Path, cells: list[Cell]) -> list[dict[str, Any]]:
    """The records of the finished cells among ``cells``."""
    records = []
    for cell in cells:
        path = out / "cells" / f"{cell.id}.json"
        if path.exists():
            records.append(json.loads(path.read_text()))
    return records


def mean_std(values: list[float], digits: int = 1) -> str:
    """``mean ± std`` over seeds (sample std), ``mean`` for one value, ``-`` for none."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def _in_kind(record: dict[str, Any], kind: str) -> bool:
    """Ratio-0 cells stand in every kind's table."""
    return record["noise_type"] in (kind, CLEAN)


def recall_table(records: list[dict[str, Any]], kind: str, labels: list[str], noises: list[float]) -> str:
    """Rows = method, column groups = noise ratio with image-to-text and text-to-image R@1/5/10
    and rSum, each ``mean ± std`` over seeds (n = the number of seeds)."""
    head = ["method"]
    for n in noises:
        head += [f"{round(100 * n)} %: i2t R@1", "R@5", "R@10", "t2i R@1", "R@5", "R@10", "rSum", "n"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label in labels:
        cells = [label]
        for n in noises:
            group = [r for r in records if r["label"] == label and r["noise"] == n and _in_kind(r, kind)]
            cells += [mean_std([r["test"][k] for r in group]) for k in RECALLS] + [str(len(group))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rsum_summary(records: list[dict[str, Any]], kinds: list[str], labels: list[str],
                 noises: list[float]) -> str:
    """Rows = method, columns = (kind, ratio): test rSum ``mean ± std [min, max]`` over seeds.

    The compact view of the recall tables (ratio 0 once, shared by the kinds)."""
    columns = [(CLEAN, 0.0)] if 0.0 in noises else []
    columns += [(kind, n) for kind in kinds for n in noises if n > 0]
    head = ["method"] + ["clean" if k == CLEAN else f"{k} {round(100 * n)} %" for k, n in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label in labels:
        row = [label]
        for kind, n in columns:
            values = [r["test"]["rsum"] for r in records
                      if r["label"] == label and r["noise"] == n and r["noise_type"] == kind]
            text = mean_std(values)
            if len(values) > 1:
                text += f" [{min(values):.1f}, {max(values):.1f}]"
            row.append(text)
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def detection_table(records: list[dict[str, Any]], kind: str, labels: list[str], noises: list[float]) -> str:
    """LNC Table 7 layout: rows = (method, stage), column groups = noise ratio with precision,
    recall and F1 of the detected noisy pairs, ``mean ± std`` over seeds."""
    noises = [n for n in noises if n > 0]
    head = ["method", "stage"] + [f"{round(100 * n)} %: {m}" if i == 0 else m
                                  for n in noises for i, m in enumerate(("P", "R", "F1"))]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label in labels:
        group = [r for r in records if r["label"] == label and r.get("detection") is not None
                 and r["noise_type"] == kind]
        if not group:
            continue
        for stage, name in (("after_warmup", "after warm-up"), ("end", "end")):
            cells = [label, name]
            for n in noises:
                found = [r["detection"][stage] for r in group if r["noise"] == n and stage in r["detection"]]
                cells += [mean_std([100 * d[m] for d in found]) for m in DETECTION]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def purity_table(records: list[dict[str, Any]], kinds: list[str], labels: list[str],
                 noises: list[float]) -> str:
    """ReCon's intra-modal check: truly noisy pairs (%) in the rough-clean set ``D_c + D_l``
    (what the inter-modal GMM keeps) and in ``D_c`` (what survives the check), after warm-up
    and at the end, ``mean ± std`` over seeds; rows = (method, kind, ratio)."""
    head = ["method", "noise", "after warm-up: D_c + D_l", "D_c", "end: D_c + D_l", "D_c"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label in labels:
        for kind in kinds:
            for n in (n for n in noises if n > 0):
                group = [r["detection"] for r in records if r["label"] == label and r["noise"] == n
                         and r["noise_type"] == kind and "clean_noisy" in (r.get("detection") or {}).get("end", {})]
                if not group:
                    continue
                row = [label, f"{kind} {round(100 * n)} %"]
                for stage in ("after_warmup", "end"):
                    row += [mean_std([100 * d[stage][m] for d in group if stage in d])
                            for m in ("rough_clean_noisy", "clean_noisy")]
                lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


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


NOTES = """Notes:

- Test split, protocol `{protocol}`; the row of a two-network method (NCR, LNC) is the A+B
  ensemble. Each cell is the best checkpoint by validation rSum; `n` = seeds finished.
- Ratio 0 is one clean cell per method and seed, shown in both tables.
- Warm-ups differ: NCR and LNC warm up with the mean hinge over negatives, ncl's SGR* / SAF*
  baseline with summed negatives, ReCon with the summed triplet (its Eq. 12); all then switch to
  hardest negatives. Whether SGR survives that switch depends on how far the warm-up got
  (docs/results.md, "SGR and hardest negatives").
- Detection (positives = truly mismatched pairs): NCR / LNC, the pairs a network's GMM calls
  noisy, averaged over networks A and B; CRCL, the pairs whose label Eq. 12 zeroes (y < 0.1);
  ReCon, its noisy set D_n. "After warm-up": the first division at an epoch >= the warm-up
  (CRCL: >= its frozen epochs); "end": the last epoch's.
- A division that calls every pair noisy scores P = the noise ratio r, R = 100 and
  F1 = 2r / (1 + r): 33.3, 66.7 and 88.9 at 20, 50 and 80 %. Detection values near these
  (R about 100) mean the division collapsed, not that it detects well.
"""


def _tab20(i: int) -> tuple[float, float, float, float]:
    """The ``i``-th colour of matplotlib's 20-colour qualitative map (more than 10 methods)."""
    from matplotlib import colormaps

    return colormaps["tab20"](i % 20)


def plot(records: list[dict[str, Any]], kinds: list[str], labels: list[str], path: Path) -> None:
    """Test rSum against noise ratio per method, mean ± std error bars, one panel per kind."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0 * len(kinds), 4.6))
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, len(kinds), 1)]
    axes += [fig.add_subplot(1, len(kinds), i + 1, sharey=axes[0]) for i in range(1, len(kinds))]
    colours = [f"C{i % 10}" if len(labels) <= 10 else _tab20(i) for i in range(len(labels))]
    markers = "osv^DPX*h<>p"
    ratios = sorted({r["noise"] for r in records})
    for ax, kind in zip(axes, kinds):
        for i, label in enumerate(labels):
            by_noise: dict[float, list[float]] = {}
            for r in records:
                if r["label"] == label and _in_kind(r, kind):
                    by_noise.setdefault(r["noise"], []).append(r["test"]["rsum"])
            if not by_noise:
                continue
            xs = sorted(by_noise)
            means = [statistics.mean(by_noise[x]) for x in xs]
            stds = [statistics.stdev(by_noise[x]) if len(by_noise[x]) > 1 else 0.0 for x in xs]
            # a small horizontal offset per method so that error bars at one ratio do not overlap
            shift = (i - (len(labels) - 1) / 2) * 0.004
            ax.errorbar([100 * (x + shift) for x in xs], means, yerr=stds, marker=markers[i % len(markers)],
                        color=colours[i], capsize=3, label=label)
        name = "caption shuffling (NCR)" if kind == "caption" else "image-level permutation (RCL)"
        ax.set_title(f"noise: {name}")
        ax.set_xlabel("noise ratio (%)")
        ax.set_ylabel("test rSum (mean ± std over seeds)")
        ax.set_xticks([100 * x for x in ratios])
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    for ax in axes[1:]:
        more = ax.get_legend_handles_labels()
        for h, n in zip(*more):
            if n not in names:
                handles.append(h)
                names.append(n)
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    atomic_write(path, lambda handle: handle.write(buffer.getvalue()))


def write_outputs(out: Path, records: list[dict[str, Any]], cells: list[Cell], kinds: list[str],
                  command: str) -> None:
    """``results.md``, ``cells.csv`` and ``rsum_vs_noise.png`` from the finished records."""
    backfill_detection(out, records)
    labels = list(dict.fromkeys(c.label for c in cells))
    noises = sorted({c.noise for c in cells})
    protocol = records[0]["protocol"] if records else "1k"
    parts = [f"# Reproduction grid\n\nCommand: `{command}`  \nWritten: "
             f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} on {platform.node()} "
             f"({os.cpu_count()} CPUs); {len(records)} of {len(cells)} cells finished.\n"]
    parts.append("## Test rSum, mean ± std [min, max] over seeds\n\n"
                 f"{rsum_summary(records, kinds, labels, noises)}\n")
    for kind in kinds:
        name = "caption shuffling (NCR)" if kind == "caption" else "image-level permutation (RCL)"
        parts.append(f"## Retrieval, {name}\n\n{recall_table(records, kind, labels, noises)}\n")
    for kind in kinds:
        table = detection_table(records, kind, labels, noises)
        if table.count("\n") > 1:
            parts.append(f"## Noise detection (%), {kind} noise\n\n{table}\n")
    purity = purity_table(records, kinds, labels, noises)
    if purity.count("\n") > 1:
        parts.append("## ReCon's intra-modal check: truly noisy pairs (%) in the clean set\n\n"
                     f"{purity}\n")
    parts.append(NOTES.format(protocol=protocol))
    seconds = [r["wall_seconds"] for r in records]
    cpu = [r.get("cpu_seconds", 0.0) for r in records]
    if seconds:
        parts.append(f"Per cell (fit + test): wall time median {statistics.median(seconds):.0f} s, "
                     f"CPU time median {statistics.median(cpu):.0f} s; in all {sum(seconds) / 3600:.2f} h "
                     f"wall, {sum(cpu) / 3600:.2f} h CPU (cells.csv has each cell's).\n")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "results.md", "\n".join(parts))
    flat = io.StringIO()
    keys = ["id", "label", "method", "backbone", "noise_type", "noise", "seed", *RECALLS, "best_val_rsum",
            "fit_seconds", "test_seconds", "wall_seconds", "cpu_seconds", "resumed", "finished"]
    writer = csv.DictWriter(flat, fieldnames=keys, extrasaction="ignore")
    writer.writeheader()
    for r in records:
        writer.writerow({**r, **r["test"]})
    atomic_write_text(out / "cells.csv", flat.getvalue())
    if records:
        plot(records, kinds, labels, out / "rsum_vs_noise.png")


# --- command line -----------------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="synthetic-small")
    parser.add_argument("--out", type=Path, required=True, help="output folder (cells, runs, tables)")
    parser.add_argument("--methods", nargs="+", help="only these methods (of the preset's rows, or any "
                        f"of {sorted(METHODS)} with --backbones)")
    parser.add_argument("--backbones", nargs="+", help="with --methods: every method on each of these")
    parser.add_argument("--noise-types", nargs="+", choices=NOISE_KINDS)
    parser.add_argument("--noise", nargs="+", type=float, help="noise ratios (default 0 0.2 0.5 0.8)")
    parser.add_argument("--seeds", nargs="+", type=int)
    parser.add_argument("--epochs", type=int, help="override the preset's max_epochs")
    parser.add_argument("--jobs", type=int, default=1, help="cells at a time on the CPU")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS per cell (default: CPUs // jobs)")
    parser.add_argument("--devices", help="GPU ids, e.g. 0,1: one cell per GPU at a time (CUDA_VISIBLE_DEVICES; replaces --jobs)")
    parser.add_argument("--dataset", default="f30k", choices=["f30k", "coco"], help="paper preset only")
    parser.add_argument("--data-root", help="paper preset: folder of the official features")
    parser.add_argument("--dry-run", action="store_true", help="print the cells' command lines, run nothing")
    parser.add_argument("--tables-only", action="store_true", help="write the tables from finished cells")
    return parser.parse_args(argv)


def select(args: argparse.Namespace) -> tuple[Preset, list[Cell]]:
    """The preset with the command line's changes, and its cells.

    Raises:
        SystemExit: an option names something the preset cannot run.
    """
    preset = PRESETS[args.preset]
    rows = list(preset.rows)
    if args.methods:
        unknown = sorted(set(args.methods) - set(METHODS) - set(PAPER_CONFIGS))
        if unknown:
            raise SystemExit(f"--methods: unknown {unknown}; known: {sorted(METHODS)}")
        if args.backbones:
            rows = [(m, b) for m in args.methods for b in args.backbones]
        else:
            rows = [r for r in rows if r[0] in args.methods]
            if not rows:
                raise SystemExit(f"--methods {args.methods}: not in preset {preset.name}; add --backbones")
    elif args.backbones:
        rows = [r for r in rows if r[1].lower() in {b.lower() for b in args.backbones}]
    if not preset.paper:
        bad = sorted({b for _, b in rows} - set(BACKBONES))
        if bad:
            raise SystemExit(f"--backbones {bad}: the synthetic presets run {list(BACKBONES)}")
    if args.epochs is not None and args.epochs < 1:
        raise SystemExit(f"--epochs {args.epochs}: must be at least 1")
    if args.noise and any(not 0 <= n < 1 for n in args.noise):
        raise SystemExit(f"--noise {args.noise}: ratios must lie in [0, 1)")
    preset = replace(preset, rows=tuple(rows),
                     epochs=args.epochs if args.epochs is not None else preset.epochs)
    cells = grid(rows, args.noise_types or preset.noise_types, args.noise or preset.noises,
                 args.seeds if args.seeds is not None else preset.seeds)
    return preset, cells


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    preset, cells = select(args)
    if args.jobs < 1:
        raise SystemExit(f"--jobs {args.jobs}: must be at least 1")
    slots = args.devices.split(",") if args.devices else [f"cpu{i}" for i in range(args.jobs)]
    threads = args.threads or max(1, (os.cpu_count() or 1) // len(slots))
    runner = Runner(preset, args.out, threads, gpu=bool(args.devices), dataset=args.dataset,
                    data_root=args.data_root)
    todo = [c for c in cells if not runner.paths(c)[0].exists()]
    print(f"{len(cells)} cells, {len(cells) - len(todo)} finished before, {len(todo)} to run "
          f"({len(slots)} at a time, OMP_NUM_THREADS={threads})", flush=True)
    if args.dry_run:
        for cell in todo:
            try:
                for command in runner.commands(cell):
                    print(shlex.join(command))
            except FileNotFoundError as err:
                print(f"# {cell.id}: {err}")
        return 0
    failed = [] if args.tables_only else run_all(runner, todo, slots)
    kinds = list(args.noise_types or preset.noise_types)
    command = "python scripts/reproduce.py " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    write_outputs(args.out, load_records(args.out, cells), cells, kinds, command)
    print(f"tables: {args.out / 'results.md'}", flush=True)
    if failed:
        print(f"{len(failed)} cells failed: {failed}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
