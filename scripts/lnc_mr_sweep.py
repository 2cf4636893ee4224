"""Sweep of LNC's momentum-regularisation constants (beta, lambda) on the synthetic benchmark.

LNC's regulariser (Eq. 4-6) acts only in the warm-up, and the paper gives no value for beta
(Eq. 5) or lambda (Eq. 6), so ncl's choices (beta 0.5, lambda 1, mean over the batch, no
gradient through P's normaliser) are measured where they act: each cell trains the warm-up
only and then makes the first co-divide, and reports

* the noise-detection precision / recall / F1 of that division (the pairs called *noisy*,
  per network A and B, against the benchmark's ground truth; LNC Table 7), and
* the validation rSum (A+B ensemble) after every warm-up epoch.

Cells: beta x lambda with RNA on (the LNC configs), MR off with RNA on (the RNA-only
ablation, ``configs/lnc_rna_sgr_f30k.yaml``) and NCR's plain warm-up (MR and RNA off), per
seed. Everything else is the benchmark of ``scripts/robustness_grid.py`` (quickstart data,
1,000 images x 5 captions, NCR's caption shuffling, batch 64, Adam 2e-3, the small SAF head)
with the LNC configs' prediction form (``linear``, Eq. 9), which the regulariser's P uses too.
Each cell runs in its own process, one thread (``OMP_NUM_THREADS=1``), one cell at a time.

Example (the table in docs/methods/ncr_lnc.md, "Momentum-regularisation sweep"):

    OMP_NUM_THREADS=1 python scripts/lnc_mr_sweep.py --seeds 0 1 --noise 0.5 \
        --out runs/lnc_mr_sweep.csv
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # grid_cells, also when imported
from grid_cells import QUICKSTART, cell_env, keep_row  # noqa: E402

#: The benchmark's settings on top of the quickstart (scripts/robustness_grid.py, docs/results.md).
BENCH = ["--data.batch_size=64", "--model=ncl.methods.ncr.NCR",
         "--model.backbone.init_args.module_name=SAF", "--data.noise_type=caption",
         "--model.prediction_form=linear", "--model.select_warmup=false",
         "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


def cells(betas: list[float], lambdas: list[float]) -> list[dict[str, Any]]:
    """The sweep's cells: NCR's warm-up, RNA only, then every (beta, lambda) with RNA."""
    out: list[dict[str, Any]] = [{"name": "NCR warm-up (MR off, RNA off)", "mr": False, "rna": False},
                                 {"name": "RNA only (MR off)", "mr": False, "rna": True}]
    out += [{"name": f"MR beta {b} lambda {lam} + RNA", "mr": True, "rna": True, "beta": b,
             "lambda": lam} for b in betas for lam in lambdas]
    return out


def cell_args(cell: dict[str, Any], seed: int, noise: float, warmup: int, root: Path) -> list[str]:
    """CLI overrides of one cell (the quickstart config plus the benchmark's and the cell's)."""
    args = ["--config", str(QUICKSTART), *BENCH, f"--seed_everything={seed}",
            f"--data.noise_ratio={noise}", f"--data.noise_seed={seed}",
            f"--model.warmup_epochs={warmup}", f"--trainer.max_epochs={warmup}",
            f"--trainer.default_root_dir={root}",
            f"--model.momentum_regularization={str(cell['mr']).lower()}",
            f"--model.noise_abandon={str(cell['rna']).lower()}"]
    if cell["mr"]:
        args += [f"--model.mr_momentum={cell['beta']}", f"--model.mr_weight={cell['lambda']}"]
    return args


def run_cell_here(args: list[str], warmup: int) -> dict[str, Any]:
    """Fit the warm-up in this process, then make the first co-divide and score it.

    Returns:
        ``{"val_rsums": [per warm-up epoch], "A": {precision, recall, f1}, "B": {...}}``.
    """
    import lightning as L
    import numpy as np
    import torch

    from ncl.callbacks.division import divide_if_due
    from ncl.division.stats import division_stats
    from ncl.cli import NclCLI
    from ncl.methods.base import RetrievalMethod

    torch.set_num_threads(1)
    rsums: list[float] = []

    class _Rsums(L.Callback):
        """The A+B validation rSum of every epoch (warm-up included: ``val/rsum`` is logged
        every epoch; only ``val/rsum_selected`` leaves the warm-up out)."""

        def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            value = trainer.callback_metrics.get("val/rsum")
            if value is not None and not trainer.sanity_checking:
                rsums.append(round(float(value), 1))

    cli = NclCLI(RetrievalMethod, L.LightningDataModule, subclass_mode_model=True,
                 subclass_mode_data=True, args=args, run=False, auto_configure_optimizers=False,
                 save_config_kwargs={"overwrite": True})
    cli.trainer.callbacks.append(_Rsums())
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    model = cli.model
    divide_if_due(cli.trainer, model, warmup)  # the first co-divide, from the warmed-up networks
    truth = torch.as_tensor(np.asarray(cli.datamodule.clean_mask), dtype=torch.bool)  # (N,)
    stats = division_stats(model.division, model.network_names, truth)
    out: dict[str, Any] = {"val_rsums": rsums}
    for name in model.network_names:
        out[name] = {k: round(stats[f"division/{name}/{k}"], 3) for k in ("precision", "recall", "f1")}
    return out


def run_cell(cell: dict[str, Any], seed: int, noise: float, warmup: int, work: Path) -> dict[str, Any]:
    """One cell in a fresh single-threaded process; its result as a flat row."""
    root = work / f"{cell['name'].replace(' ', '_').replace('(', '').replace(')', '')}_s{seed}"
    env = cell_env(threads=1)
    start = time.time()
    args = json.dumps(cell_args(cell, seed, noise, warmup, root))
    done = subprocess.run([sys.executable, __file__, "--cell", args, "--warmup", str(warmup)],
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"cell {cell['name']} seed {seed} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    row = {"cell": cell["name"], "seed": seed, "noise": noise, "warmup": warmup,
           "seconds": round(time.time() - start, 1), "val_rsums": result["val_rsums"],
           "val_rsum_last": result["val_rsums"][-1]}
    for name in ("A", "B"):
        for key, value in result[name].items():
            row[f"{name}_{key}"] = value
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: per cell, mean [min, max] over seeds of F1 (A, B), P/R and the final rSum."""
    def cell_text(values: list[float], digits: int) -> str:
        mean = statistics.mean(values)
        return f"{mean:.{digits}f}" if len(values) == 1 else \
            f"{mean:.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]"

    lines = ["| warm-up | F1 A | F1 B | precision A / B | recall A / B | val rSum after warm-up |",
             "|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["cell"] for r in rows):
        group = [r for r in rows if r["cell"] == name]
        get = lambda key: [float(r[key]) for r in group]  # noqa: E731 - local shorthand
        lines.append(" | ".join([
            f"| {name}", cell_text(get("A_f1"), 2), cell_text(get("B_f1"), 2),
            f"{statistics.mean(get('A_precision')):.2f} / {statistics.mean(get('B_precision')):.2f}",
            f"{statistics.mean(get('A_recall')):.2f} / {statistics.mean(get('B_recall')):.2f}",
            cell_text(get("val_rsum_last"), 1)]) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--noise", type=float, default=0.5)
    parser.add_argument("--warmup", type=int, default=5, help="warm-up epochs (the benchmark's 5)")
    parser.add_argument("--betas", nargs="+", type=float, default=[0.5, 0.9])
    parser.add_argument("--lambdas", nargs="+", type=float, default=[0.5, 1.0, 2.0])
    parser.add_argument("--out", type=Path, default=Path("runs/lnc_mr_sweep.csv"))
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # internal: run one cell here
    args = parser.parse_args()
    if args.cell is not None:
        print(json.dumps(run_cell_here(json.loads(args.cell), args.warmup)), flush=True)
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="lnc_mr_sweep_") as work:
        for seed in args.seeds:
            for cell in cells(args.betas, args.lambdas):
                keep_row(rows, run_cell(cell, seed, args.noise, args.warmup, Path(work)), args.out)
    print(table(rows))


if __name__ == "__main__":
    main()
