"""How reliably does the quickstart learn? ``ncl fit --config configs/quickstart.yaml`` over a
grid of training seeds x thread counts x synthetic-dataset seeds.

Each cell runs the real CLI in a subprocess (``WANDB_MODE=disabled``, ``OMP_NUM_THREADS`` set
to the cell's thread count, run folder under a temporary directory), parses the per-epoch
``epoch N validation [net]: ... rSum X`` lines from its stdout, and records the wall time and
``os.getloadavg()`` at the start and the end of the run (the machine may be shared, so a wall
time means little without the load beside it). It prints a Markdown table (one row per cell,
the per-epoch validation rSum curve), the min and median of the final rSum, and writes JSON.

The first cell of a dataset seed also generates that dataset (into ``--cache-dir``); the
``generated`` column says which runs include the generation in their wall time.

Example (the table in docs/quickstart.md):

    python scripts/quickstart_seeds.py --seeds 0 1 2 3 4 --threads 1 2 --data-seeds 0 1 2 \
        --out /tmp/quickstart_seeds.json

Extra overrides go after ``--extra`` as ``--extra=--model.optimizer.init_args.lr=1e-3``
(repeatable), e.g. to compare candidate settings before writing them into the config.
``--from-json FILE`` prints the table of an earlier ``--out`` file again.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "quickstart.yaml"
LINE = re.compile(r"^epoch (\d+) validation \[net\]: .* rSum (-?[\d.]+|nan)\s*$", re.MULTILINE)


def ncl_command() -> list[str]:
    """The ``ncl`` console script of this interpreter's environment (or ``python -m ncl.cli``)."""
    beside = Path(sys.executable).parent / "ncl"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("ncl")
    return [found] if found else [sys.executable, "-m", "ncl.cli"]


def parse_curve(stdout: str) -> list[float]:
    """Validation rSum per epoch, in epoch order (the last print of an epoch wins)."""
    by_epoch: dict[int, float] = {}
    for epoch, rsum in LINE.findall(stdout):
        by_epoch[int(epoch)] = float(rsum)
    return [by_epoch[e] for e in sorted(by_epoch)]


def dataset_dirs(cache_dir: Path) -> set[str]:
    return {p.name for p in cache_dir.iterdir()} if cache_dir.is_dir() else set()


def run_cell(config: Path, seed: int, threads: int, data_seed: int, cache_dir: Path, work: Path,
             extra: list[str], timeout: float, extra_env: dict[str, str]) -> dict:
    run_root = work / f"d{data_seed}_s{seed}_t{threads}"
    cmd = [*ncl_command(), "fit", "--config", str(config), f"--seed_everything={seed}",
           f"--data.synthetic_seed={data_seed}", f"--data.cache_dir={cache_dir}",
           f"--trainer.default_root_dir={run_root}", "--trainer.enable_progress_bar=false", *extra]
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONWARNINGS": "ignore",
           "OMP_NUM_THREADS": str(threads), **extra_env}
    before = dataset_dirs(cache_dir)
    load_start = os.getloadavg()
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        returncode = "timeout"
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    wall = time.perf_counter() - start
    load_end = os.getloadavg()
    curve = parse_curve(stdout)
    cell = {"data_seed": data_seed, "seed": seed, "threads": threads, "returncode": returncode,
            "curve": curve, "final": curve[-1] if curve else None,
            "best": max(curve) if curve else None, "wall_s": round(wall, 1),
            "load_start": [round(x, 2) for x in load_start],
            "load_end": [round(x, 2) for x in load_end],
            "generated": bool(dataset_dirs(cache_dir) - before), "extra": extra,
            "env": extra_env}
    if returncode != 0:
        cell["stderr_tail"] = stderr[-2000:]
    shutil.rmtree(run_root, ignore_errors=True)  # checkpoints are not needed
    return cell


def markdown(cells: list[dict]) -> str:
    rows = ["| data seed | seed | threads | validation rSum per epoch | final | wall (s) | "
            "load 1-min start / end | dataset generated |",
            "|---|---|---|---|---|---|---|---|"]
    for c in cells:
        curve = ", ".join(f"{x:.1f}" for x in c["curve"]) or f"failed ({c['returncode']})"
        final = f"{c['final']:.1f}" if c["final"] is not None else "-"
        threads = " ".join([str(c["threads"]), *(f"{k}={v}" for k, v in c.get("env", {}).items())])
        rows.append(f"| {c['data_seed']} | {c['seed']} | {threads} | {curve} | {final} | "
                    f"{c['wall_s']:.0f} | {c['load_start'][0]:.2f} / {c['load_end'][0]:.2f} | "
                    f"{'yes' if c['generated'] else 'no'} |")
    return "\n".join(rows)


def summary(cells: list[dict]) -> str:
    finals = [c["final"] for c in cells if c["final"] is not None]
    failed = len(cells) - len(finals)
    if not finals:
        return f"no run finished ({failed} failed)"
    walls = [c["wall_s"] for c in cells]
    return (f"final validation rSum over {len(finals)} runs: min {min(finals):.1f}, median "
            f"{statistics.median(finals):.1f}, max {max(finals):.1f}"
            f"{f'; {failed} failed' if failed else ''}; wall time min {min(walls):.0f} s, "
            f"median {statistics.median(walls):.0f} s, max {max(walls):.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=QUICKSTART)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                        help="values of --seed_everything")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                        help="values of OMP_NUM_THREADS")
    parser.add_argument("--data-seeds", type=int, nargs="+", default=[0],
                        help="values of --data.synthetic_seed (a fresh dataset each)")
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/qs_cache"),
                        help="where the generated datasets are cached (not ~/.cache/ncl)")
    parser.add_argument("--extra", action="append", default=[],
                        help="one extra CLI override, e.g. --extra=--trainer.max_epochs=8")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="extra environment variable of the runs, e.g. OMP_WAIT_POLICY=PASSIVE")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    parser.add_argument("--out", type=Path, default=None, help="JSON file for the results")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="print the table and summary of an earlier --out file; run nothing")
    args = parser.parse_args()

    if args.from_json:
        cells = json.loads(args.from_json.read_text())["cells"]
        print(markdown(cells))
        print()
        print(summary(cells))
        return
    extra_env = dict(item.split("=", 1) for item in args.env)
    cells = []
    with tempfile.TemporaryDirectory(prefix="quickstart_seeds_") as tmp:
        work = Path(tmp)
        for data_seed in args.data_seeds:
            for seed in args.seeds:
                for threads in args.threads:
                    cell = run_cell(args.config.resolve(), seed, threads, data_seed,
                                    args.cache_dir.resolve(), work, args.extra, args.timeout,
                                    extra_env)
                    cells.append(cell)
                    print(f"data seed {data_seed} seed {seed} threads {threads}: final "
                          f"{cell['final']} curve {cell['curve']} wall {cell['wall_s']} s load "
                          f"{cell['load_start'][0]:.2f} -> {cell['load_end'][0]:.2f}"
                          + (f" FAILED rc {cell['returncode']}" if cell["returncode"] != 0 else ""),
                          flush=True)
                    if args.out:  # written after every cell, so a long grid can be watched
                        args.out.write_text(json.dumps({"config": str(args.config),
                                                        "extra": args.extra, "env": extra_env,
                                                        "cells": cells}, indent=1))
    print()
    print(markdown(cells))
    print()
    print(summary(cells))


if __name__ == "__main__":
    main()
