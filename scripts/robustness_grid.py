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
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # grid_cells, also when imported
from grid_cells import (BENCH, DIVISION_KEYS, METHODS, QUICKSTART, WARMUP, cell_env,  # noqa: E402
                        fit_then_test, keep_row, method_noise_table)


def run_cell(method: str, noise: float, seed: int, epochs: int, noise_type: str, work: Path,
             extra: list[str]) -> dict:
    tag = "_".join(a.lstrip("-").split(".")[-1] for a in extra)
    run_root = work / f"{method}_n{noise}_s{seed}_e{epochs}{'_' + tag if tag else ''}"
    common = ["--config", str(QUICKSTART), *BENCH, *METHODS[method], *extra, f"--seed_everything={seed}",
              f"--data.noise_ratio={noise}", f"--data.noise_type={noise_type}",
              f"--data.noise_seed={seed}", f"--trainer.default_root_dir={run_root}",
              "--trainer.enable_progress_bar=false"]
    done = fit_then_test(common, [f"--trainer.max_epochs={epochs}"], run_root, cell_env())
    fit_seconds = done.fit_seconds
    logged = done.metrics
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
    best, results = done.best, done.results
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
    """Test rSum per method (rows) and noise ratio (columns): the value, or mean +- std (n)."""
    def cell_text(group: list[dict]) -> str:
        vals = [r["test_rsum"] for r in group]
        if len(vals) == 1:
            return f"{vals[0]:.1f}"
        return f"{statistics.mean(vals):.1f} +- {statistics.stdev(vals):.1f} (n={len(vals)})"

    return method_noise_table(rows, lambda r: r["method"], cell_text,
                              noise_label=lambda n: f"{int(100 * n)}% noise", missing="")


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
                keep_row(rows, run_cell(method, noise, seed, args.epochs, args.noise_type, work, args.extra),
                         args.out)
    print(table(rows))


if __name__ == "__main__":
    main()
