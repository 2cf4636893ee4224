"""Robustness grid on the synthetic benchmark: methods x noise ratios x seeds, through the CLI.

Each cell runs ``ncl fit`` (the quickstart's model and data, with the method, noise and seed
overridden) and then ``ncl test`` on the best checkpoint (by validation rSum), and records
the best validation rSum and the test rSum. Results are appended to a CSV as they come, and
a Markdown table (mean +- std over seeds) is printed at the end.

Example (the table in docs/results.md):

    python scripts/robustness_grid.py --methods rcl triplet triplet_sum clean_sum \
        --noise 0.0 0.2 0.6 0.8 --seeds 0 --epochs 14 --out runs/grid.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "quickstart.yaml"

WARMUP = 5  # warm-up epochs of SGR* and NCR/LNC
# The benchmark's own settings on top of the quickstart config, fixed here so that the
# quickstart can be tuned for a first run without moving the benchmark (the quickstart now
# uses batch 16; every table in docs/results.md was measured with batch 64).
BENCH = ["--data.batch_size=64"]
# relation_temperature 0.3: at the code default 1.0 the intra-modal check never fires on this
# benchmark (D_l empty every epoch), at 0.1 D_c is empty every epoch (docs/methods/recon.md,
# "Measured": the probe at 40 % caption noise).
RECON = ["--model=ncl.methods.recon.ReCon", f"--model.warmup_epochs={WARMUP}", "--model.tau=0.1",
         "--model.relation_temperature=0.3", "--data.augment=ncl.data.augment.CaptionRegionAugment"]
# ReCon's division diagnostics (ThreeWayDiagnostics: the division in effect for an epoch):
# subset sizes of D_c, D_l, D_n and the truly noisy pairs in each.
DIVISION_KEYS = [f"division/{name}{suffix}" for name in ("clean", "local", "noisy")
                 for suffix in ("", "_true_noisy")]
# Method name -> CLI overrides on top of the quickstart config (same backbone, optimiser,
# data; only the loss changes).
METHODS: dict[str, list[str]] = {
    "rcl": [],
    "triplet": ["--model=ncl.methods.baselines.Triplet", "--model.negatives=hardest"],
    "triplet_sum": ["--model=ncl.methods.baselines.Triplet", "--model.negatives=sum"],
    # "SGR*": summed negatives for the first 5 epochs, hardest negatives afterwards.
    "triplet_warmup": ["--model=ncl.methods.baselines.Triplet", "--model.negatives=hardest",
                       f"--model.warmup_epochs={WARMUP}"],
    "infonce": ["--model=ncl.methods.baselines.InfoNCE"],
    # NCR / LNC co-teaching (two networks; the test row is their A+B ensemble), 5 warm-up epochs.
    "ncr": ["--model=ncl.methods.ncr.NCR", f"--model.warmup_epochs={WARMUP}"],
    "lnc": ["--model=ncl.methods.ncr.NCR", f"--model.warmup_epochs={WARMUP}",
            "--model.momentum_regularization=true", "--model.noise_abandon=true"],
    # CRCL: 14 epochs as three self-refining pieces (labels frozen for the first 3 epochs of
    # each), with its official training augmentation; docs/methods/crcl.md.
    "crcl": ["--model=ncl.methods.crcl.CRCL", "--model.pieces=[5, 5, 4]", "--model.freeze_epochs=3",
             "--data.augment=ncl.data.augment.CaptionRegionAugment"],
    # ReCon (docs/methods/recon.md): eta = 5 triplet warm-up epochs (Eq. 12, summed negatives),
    # then the three-way division every epoch; its own L_CM temperature (tau 0.1, paper Sect.
    # 4.2; the quickstart's tau 0.05 is RCL's and would otherwise carry over) and the published
    # training augmentation, as in configs/recon_saf_synthetic.yaml; everything else (data,
    # backbone dimensions, Adam lr 2e-3, lr_update 30, batch 64, clip 2.0) is the quickstart's.
    "recon": RECON,
    # Ablation without the intra-modal check: y^IM lies in [0, 1), so omega2 = 1 puts every
    # rough-clean pair into D_c and D_l stays empty (L_IM is still trained on D_c).
    "recon_no_im": [*RECON, "--model.omega2=1.0"],
    "clean": ["--model=ncl.methods.baselines.Triplet", "--model.negatives=hardest",
              "--model.clean_only=true"],
    "clean_sum": ["--model=ncl.methods.baselines.Triplet", "--model.negatives=sum",
                  "--model.clean_only=true"],
}


def run_cell(method: str, noise: float, seed: int, epochs: int, noise_type: str, work: Path,
             extra: list[str]) -> dict:
    tag = "_".join(a.lstrip("-").split(".")[-1] for a in extra)
    run_root = work / f"{method}_n{noise}_s{seed}_e{epochs}{'_' + tag if tag else ''}"
    common = ["--config", str(QUICKSTART), *BENCH, *METHODS[method], *extra, f"--seed_everything={seed}",
              f"--data.noise_ratio={noise}", f"--data.noise_type={noise_type}",
              f"--data.noise_seed={seed}", f"--trainer.default_root_dir={run_root}",
              "--trainer.enable_progress_bar=false"]
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONWARNINGS": "ignore"}
    start = time.time()
    subprocess.run([sys.executable, "-m", "ncl.cli", "fit", *common, f"--trainer.max_epochs={epochs}"],
                   check=True, env=env, capture_output=True, text=True)
    fit_seconds = time.time() - start
    metrics = max(run_root.rglob("metrics.csv"), key=lambda p: p.stat().st_mtime)  # this run's
    with open(metrics) as handle:
        logged = list(csv.DictReader(handle))
    rsums = [float(r["val/rsum"]) for r in logged if r.get("val/rsum")]
    # Co-teaching: noise-detection F1 of each network's first division (right after warm-up).
    # (LNC's noise abandon also divides during warm-up; those epochs are skipped.)
    first_division = next((r for r in logged if r.get("division/A/f1") and int(r["epoch"]) >= WARMUP), {})
    # ReCon: the three-way division per epoch ([epoch, |D_c|, noisy in D_c, |D_l|, noisy in D_l,
    # |D_n|, noisy in D_n]) and the last epoch's as separate columns (empty for other methods).
    divisions = {}
    for r in logged:
        if r.get("division/clean"):
            divisions[int(r["epoch"])] = [int(float(r[k])) if r.get(k) else None for k in DIVISION_KEYS]
    per_epoch = [[epoch, *values] for epoch, values in sorted(divisions.items())]
    last_division = dict(zip(DIVISION_KEYS, per_epoch[-1][1:])) if per_epoch else {}
    best = max(run_root.rglob("best-*.ckpt"), key=lambda p: p.stat().st_mtime)
    subprocess.run([sys.executable, "-m", "ncl.cli", "test", *common, f"--ckpt_path={best}"],
                   check=True, env=env, capture_output=True, text=True)
    results = json.loads(max(run_root.rglob("test_results.json"), key=lambda p: p.stat().st_mtime).read_text())
    test_rsum = list(results.values())[-1]["1k"]["rsum"]  # the last system is the ensemble
    return {"method": method + (f" [{' '.join(extra)}]" if extra else ""), "noise": noise, "seed": seed, "epochs": epochs,
            "best_val_rsum": max(rsums), "last_val_rsum": rsums[-1], "test_rsum": test_rsum,
            "fit_seconds": round(fit_seconds, 1), "val_rsums": [round(v, 1) for v in rsums],
            "f1_after_warmup": [round(float(first_division[f"division/{n}/f1"]), 3)
                                for n in "AB" if first_division.get(f"division/{n}/f1")],
            "best_ckpt": best.name,
            **{"last_" + k.replace("/", "_"): last_division.get(k, "") for k in DIVISION_KEYS},
            "divisions": per_epoch}


def table(rows: list[dict]) -> str:
    methods = list(dict.fromkeys(r["method"] for r in rows))
    noises = sorted({r["noise"] for r in rows})
    lines = ["| method | " + " | ".join(f"{int(100 * n)}% noise" for n in noises) + " |",
             "|---|" + "---|" * len(noises)]
    for m in methods:
        cells = []
        for n in noises:
            vals = [r["test_rsum"] for r in rows if r["method"] == m and r["noise"] == n]
            if not vals:
                cells.append("")
            elif len(vals) == 1:
                cells.append(f"{vals[0]:.1f}")
            else:
                cells.append(f"{statistics.mean(vals):.1f} +- {statistics.stdev(vals):.1f} (n={len(vals)})")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", default=["rcl", "triplet", "triplet_sum", "clean"],
                        choices=sorted(METHODS))
    parser.add_argument("--noise", nargs="+", type=float, default=[0.0, 0.2, 0.6, 0.8])
    parser.add_argument("--noise-type", default="image", choices=["image", "caption"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--out", type=Path, default=Path("runs/robustness_grid.csv"))
    parser.add_argument("--extra", action="append", default=[],
                        help="a further CLI override for every cell, repeatable, e.g. "
                             "--extra=--model.optimizer.init_args.lr=2e-4 --extra=--model.warmup_epochs=10")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work = args.out.parent / "grid_runs"
    rows: list[dict] = []
    for seed in args.seeds:
        for noise in args.noise:
            for method in args.methods:
                row = run_cell(method, noise, seed, args.epochs, args.noise_type, work, args.extra)
                rows.append(row)
                print(json.dumps(row), flush=True)
                new = not args.out.exists()
                with open(args.out, "a", newline="") as handle:
                    writer = csv.DictWriter(handle, fieldnames=list(row))
                    if new:
                        writer.writeheader()
                    writer.writerow(row)
    print(table(rows))


if __name__ == "__main__":
    main()
