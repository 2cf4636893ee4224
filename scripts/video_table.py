"""The synthetic video-text table of docs/video.md: baseline vs LNC vs RCL under noise.

Each cell is ``ncl fit`` of one shipped config on the synthetic video data
(``ncl.data.video.VideoSyntheticDataModule``), then ``ncl test`` of its best checkpoint (by
validation rSum); the table prints test R@1/5/10 in both directions and the median rank (MR)
of each direction. Cells run one at a time, in fresh processes, with ``OMP_NUM_THREADS=1``
unless the environment sets it. Rows are also appended to a CSV so that a long run can be
inspected and the table re-printed (``--table-from CSV...``), e.g. over several seeds' runs.

Methods (all on :class:`ncl.models.gated.GatedVideoText`, same dims, optimiser and data):

* ``triplet_sum``: configs/baseline_triplet_sum_video_synthetic.yaml, the hinge triplet loss
  summed over in-batch negatives (the max-margin loss of Miech et al.), no noise handling;
* ``lnc``: configs/lnc_video_synthetic.yaml;
* ``rcl``: configs/rcl_video_synthetic.yaml.

Every cell uses the same noise type (``--noise-type``, default ``caption``: LNC's caption
shuffling) so that rows are comparable; RCL's own config uses clip-level permutation.

Example (the table in docs/video.md):

    OMP_NUM_THREADS=1 python scripts/video_table.py --seeds 0 --out runs/video_table/cells.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from grid_cells import append_row  # scripts/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {
    "triplet_sum": REPO / "configs" / "baseline_triplet_sum_video_synthetic.yaml",
    "lnc": REPO / "configs" / "lnc_video_synthetic.yaml",
    "rcl": REPO / "configs" / "rcl_video_synthetic.yaml",
}
COLUMNS = ("i2t_r1", "i2t_r5", "i2t_r10", "i2t_medr", "t2i_r1", "t2i_r5", "t2i_r10", "t2i_medr", "rsum")


def run_cli(args: list[str], log: Path) -> None:
    """``python -m ncl.cli ARGS`` in a fresh process; output appended to ``log``.

    Raises:
        RuntimeError: the command failed (the log's path is named).
    """
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("WANDB_MODE", "disabled")
    with open(log, "a") as handle:
        done = subprocess.run([sys.executable, "-m", "ncl.cli", *args], cwd=REPO, env=env,
                              stdout=handle, stderr=subprocess.STDOUT, check=False)
    if done.returncode:
        raise RuntimeError(f"ncl {' '.join(args[:1])} failed (exit {done.returncode}); see {log}")


def newest(root: Path, pattern: str) -> Path:
    """The most recently modified file under ``root`` matching ``pattern``."""
    found = sorted(root.rglob(pattern), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(f"no {pattern} under {root}")
    return found[-1]


def run_cell(method: str, noise: float, seed: int, noise_type: str, work: Path,
             epochs: int | None) -> dict:
    """Fit then test one (method, noise, seed) cell; returns the test metrics as a row."""
    root = work / f"{method}_{noise_type}{noise}_s{seed}"
    root.mkdir(parents=True, exist_ok=True)
    log = root / "cli.log"
    common = ["--config", str(CONFIGS[method]), f"--seed_everything={seed}",
              f"--data.init_args.noise_ratio={noise}", f"--data.init_args.noise_type={noise_type}",
              f"--data.init_args.noise_seed={seed}", f"--trainer.default_root_dir={root}",
              "--trainer.enable_progress_bar=false"]
    fit_extra = [f"--trainer.max_epochs={epochs}"] if epochs else []
    start = time.time()
    run_cli(["fit", *common, *fit_extra], log)
    fit_seconds = time.time() - start
    best = newest(root, "best-*.ckpt")
    run_cli(["test", *common, f"--ckpt_path={best}"], log)
    results = json.loads(newest(root, "test_results.json").read_text())
    metrics = list(results.values())[-1]["1k"]  # the last system: the ensemble of LNC's A+B
    return {"method": method, "noise_type": noise_type, "noise": noise, "seed": seed,
            "best_ckpt": best.name, "fit_seconds": round(fit_seconds, 1),
            **{k: metrics[k] for k in COLUMNS}, "val_rsums": json.dumps(val_rsums(root))}


def val_rsums(root: Path) -> list[float]:
    """Validation rSum after every epoch, warm-up included (the fit's ``metrics.csv``)."""
    rows: list[dict] = []
    for path in sorted(root.rglob("metrics.csv")):  # the fit's; ``ncl test`` adds its own
        with open(path) as handle:
            rows += list(csv.DictReader(handle))
    out = []
    for row in rows:
        value = row.get("val/rsum")
        if value:
            out.append(round(float(value), 1))
    return out


def table(rows: list[dict]) -> str:
    """Markdown: one line per (noise, method), metrics averaged over seeds, and each seed's rSum."""
    lines = ["| noise | method | seeds | V2T R@1 | R@5 | R@10 | MR | T2V R@1 | R@5 | R@10 | MR | rSum "
             "| rSum per seed |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(float(r["noise"]), r["method"]) for r in rows},
                  key=lambda k: (k[0], list(CONFIGS).index(k[1]) if k[1] in CONFIGS else 99))
    for noise, method in keys:
        group = [r for r in rows if float(r["noise"]) == noise and r["method"] == method]
        means = [sum(float(r[c]) for r in group) / len(group) for c in COLUMNS]
        cells = [f"{v:.1f}" for v in means]
        per_seed = " / ".join(f"{float(r['rsum']):.1f} (s{r['seed']})"
                              for r in sorted(group, key=lambda r: int(r["seed"])))
        lines.append(f"| {round(100 * noise)}% | {method} | {len(group)} | " + " | ".join(cells)
                     + f" | {per_seed} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--noise", nargs="+", type=float, default=[0.0, 0.2, 0.5])
    parser.add_argument("--noise-type", default="caption", choices=["caption", "image"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--epochs", type=int, default=None,
                        help="override trainer.max_epochs of every config (default: as shipped)")
    parser.add_argument("--out", type=Path, default=Path("runs/video_table/cells.csv"))
    parser.add_argument("--table-from", nargs="+", type=Path, default=None, metavar="CSV",
                        help="print the table from these CSVs (of earlier runs) and run nothing")
    args = parser.parse_args()
    if args.table_from:
        rows = []
        for path in args.table_from:
            with open(path) as handle:
                rows += list(csv.DictReader(handle))
        print(table(rows))
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in args.seeds:
        for noise in args.noise:
            for method in args.methods:
                row = run_cell(method, noise, seed, args.noise_type, args.out.parent / "cells",
                               args.epochs)
                rows.append(row)
                print(json.dumps(row), flush=True)
                append_row(args.out, row)
    print(table(rows))


if __name__ == "__main__":
    main()
