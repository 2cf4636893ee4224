"""Per-epoch validation rSum of every method on the ``tiny`` synthetic preset, for refactors.

A refactor of ncl keeps every number (issue 23). This script trains one small, seed-fixed run
per case the method classes declare (``spec.regression``, :mod:`ncl.methods.declaration`: RCL,
Triplet with warm-up, InfoNCE, InfoNCE clean-only, NCR, LNC, CRCL with the official and the
paper label rule, ReCon, DECL, L2RM, RCL on VSE-infinity, LNC on the gated video model) through
the real ``ncl fit`` from the shipped configs, at one thread and in deterministic mode,
and writes ``{case: {epoch: rSum, "weights": SHA-256 of the final weights}}`` with every digit. Record the values on the commit before a
refactor, then compare after it::

    python scripts/layout_regression.py --out /tmp/reg --write docs/regression/layout_rsum.json
    python scripts/layout_regression.py --out /tmp/reg2 --compare docs/regression/layout_rsum.json

``--compare`` exits 1 and names every case and epoch that differs (to the last bit). The rSum
of a warm-up epoch counts as well (it was logged under ``val_warmup/rsum`` before issue 23).
The values hold for one machine kind (CPU model, torch build): summation order differs
between CPUs, so compare on the machine that recorded them.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's ncl, whatever is installed

from ncl.methods.declaration import regression_cases  # noqa: E402

#: case -> (config, extra arguments); four epochs each unless the arguments say otherwise: what
#: each method class declares (``spec.regression``, :mod:`ncl.methods.declaration`).
CASES: dict[str, tuple[str, list[str]]] = {
    name: (case.config, list(case.args)) for name, case in regression_cases().items()}


def command(case: str, out: Path) -> list[str]:
    """The ``ncl fit`` command line of ``case``, writing under ``out/case``."""
    config, extra = CASES[case]
    root = out / case
    return [sys.executable, "-m", "ncl.cli", "fit", "--config", str(REPO / "configs" / config),
            *extra, "--trainer.max_epochs=4", "--trainer.accelerator=cpu", "--trainer.devices=1",
            "--trainer.deterministic=true", "--trainer.enable_progress_bar=false",
            "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
            f"--trainer.logger.save_dir={root}", f"--trainer.default_root_dir={root}",
            f"--data.cache_dir={out / 'cache' / case}", "--data.num_workers=0"]


def rsum_per_epoch(root: Path) -> dict[str, str]:
    """``{epoch: rSum}`` from the run's metrics.csv (``val/rsum`` or ``val_warmup/rsum``),
    kept as the logged text so that every digit is compared."""
    [metrics] = sorted(root.rglob("metrics.csv"))
    out: dict[str, str] = {}
    with open(metrics) as handle:
        for row in csv.DictReader(handle):
            value = row.get("val/rsum") or row.get("val_warmup/rsum")
            if value:
                if row["epoch"] in out:
                    raise RuntimeError(f"{metrics}: epoch {row['epoch']} logged twice")
                out[row["epoch"]] = value
    return out


def weights_digest(root: Path) -> str:
    """SHA-256 over the final weights of ``last.ckpt`` (every tensor in key order, as bytes):
    rSum on 30 tiny validation images is coarse, the weights after four epochs are not."""
    import hashlib

    import torch

    [last] = sorted(root.rglob("last.ckpt"))
    state = torch.load(last, map_location="cpu", weights_only=False)["state_dict"]
    digest = hashlib.sha256()
    for key in sorted(state):
        digest.update(state[key].detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def run_case(case: str, out: Path) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "WANDB_MODE": "disabled",
           "PYTHONPATH": str(REPO), "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    log = out / f"{case}.log"
    out.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as handle:
        rc = subprocess.run(command(case, out), env=env, stdout=handle, stderr=subprocess.STDOUT,
                            cwd=REPO).returncode
    if rc != 0:
        tail = log.read_text().splitlines()[-15:]
        raise RuntimeError(f"case {case} failed (exit {rc}); {log}:\n" + "\n".join(tail))
    return {**rsum_per_epoch(out / case), "weights": weights_digest(out / case)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="scratch folder for the runs")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (each one thread)")
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, help="write the values as JSON here")
    group.add_argument("--compare", type=Path, help="compare with the JSON written earlier")
    args = parser.parse_args(argv)
    with ThreadPoolExecutor(args.jobs) as pool:
        values = dict(zip(args.cases, pool.map(lambda c: run_case(c, args.out), args.cases)))
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(json.dumps(values, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(values)} cases to {args.write}")
        return 0
    reference = json.loads(args.compare.read_text())
    bad = [f"{case}: epoch {e}: {reference.get(case, {}).get(e)} -> {v}"
           for case, by_epoch in values.items() for e, v in by_epoch.items()
           if reference.get(case, {}).get(e) != v]
    bad += [f"{case}: epochs {sorted(reference[case])} -> {sorted(values[case])}"
            for case in values if case in reference and sorted(reference[case]) != sorted(values[case])]
    for case, by_epoch in values.items():
        print(f"{case:16s} " + "  ".join(f"{e}:{v}" for e, v in sorted(by_epoch.items())))
    print("identical" if not bad else "DIFFERENT:\n" + "\n".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
