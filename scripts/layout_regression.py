"""Per-epoch validation rSum of every method on the ``tiny`` synthetic preset, for refactors.

A refactor of ncl keeps every number (issue 23). This script trains one small, seed-fixed run
per case the method classes declare (``spec.regression``, :mod:`ncl.methods.declaration`)
through the real ``ncl fit`` from the shipped configs, at one thread and in deterministic
mode, and keeps each case's values with every digit in a record of its own,
``docs/regression/<case>.json``: ``{epoch: rSum, ..., "weights": SHA-256 of the final
weights}``. Recording a case writes that case's file and no other::

    python scripts/layout_regression.py --record                  # every case without a record
    python scripts/layout_regression.py --cases gsc --record      # (re-)record one case
    python scripts/layout_regression.py --compare                 # every case with its record
    python scripts/layout_regression.py --cases rcl ncr --compare --jobs 1 --out /tmp/reg

``--compare`` exits 1 and names every case and epoch that differs (to the last bit), or whose
record is missing. The values hold for one machine kind (CPU model, torch build): summation
order differs between CPUs, so compare on the machine that recorded them. To compare on
another machine, record the commit before a refactor there into a scratch folder and compare
against it (``--against`` also reads the one-file format of earlier versions of this script,
``{case: {epoch: rSum, "weights": ...}}``)::

    python scripts/layout_regression.py --record --cases rcl ncr --into /tmp/reg_before
    python scripts/layout_regression.py --compare --cases rcl ncr --against /tmp/reg_before

The rSum of a warm-up epoch counts as well (it was logged under ``val_warmup/rsum`` before
issue 23).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's ncl, whatever is installed

from ncl.methods.declaration import regression_cases  # noqa: E402

#: case -> (config, extra arguments); four epochs each unless the arguments say otherwise: what
#: each method class declares (``spec.regression``, :mod:`ncl.methods.declaration`).
CASES: dict[str, tuple[str, list[str]]] = {
    name: (case.config, list(case.args)) for name, case in regression_cases().items()}
#: The committed records, one ``<case>.json`` per case.
RECORDS = REPO / "docs" / "regression"

#: One case's values: ``{epoch: rSum as logged, ..., "weights": SHA-256}``; a record also
#: names the machine it was made on (``"machine"``), which is not compared.
Values = dict[str, str]
#: The key of a record that says where it was made (CPU model, torch build).
MACHINE = "machine"


def this_machine() -> str:
    """``"<CPU model>, torch <version>"``: the values hold for one such pair."""
    import platform

    import torch

    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]
        model = names[0] if names else model
    return f"{model}, torch {torch.__version__}"


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


def run_case(case: str, out: Path) -> Values:
    """Train ``case`` under ``out`` and return its values."""
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


# --- records -------------------------------------------------------------------------------------
def record_path(case: str, folder: Path = RECORDS) -> Path:
    """Where ``case``'s record lives in ``folder``: ``<folder>/<case>.json``."""
    return folder / f"{case}.json"


def write_record(case: str, values: Values, folder: Path = RECORDS) -> Path:
    """Write ``case``'s values to its own file in ``folder`` (no other file is touched)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = record_path(case, folder)
    path.write_text(json.dumps({**values, MACHINE: this_machine()}, indent=1, sort_keys=True) + "\n")
    return path


def unrecorded(cases: list[str], folder: Path = RECORDS) -> list[str]:
    """The ``cases`` without a record in ``folder``."""
    return [c for c in cases if not record_path(c, folder).is_file()]


def read_reference(source: Path, cases: list[str]) -> dict[str, Values]:
    """The recorded values of ``cases`` (those that have one): from a folder of per-case
    records, or from one JSON file of every case (``{case: values}``, the format this script
    wrote before per-case records)."""
    if source.is_dir():
        return {c: json.loads(record_path(c, source).read_text())
                for c in cases if record_path(c, source).is_file()}
    every = json.loads(source.read_text())
    return {c: every[c] for c in cases if c in every}


def differences(values: dict[str, Values], reference: dict[str, Values]) -> list[str]:
    """One line per case whose record is missing, per key (epoch or ``weights``) whose text
    differs, and per case whose epochs differ; empty when every digit agrees."""
    bad: list[str] = []
    for case, now in values.items():
        if case not in reference:
            bad.append(f"{case}: no record")
            continue
        before = {k: v for k, v in reference[case].items() if k != MACHINE}
        bad += [f"{case}: epoch {k}: {before.get(k)} -> {v}" for k, v in now.items() if before.get(k) != v]
        if sorted(before) != sorted(now):
            bad.append(f"{case}: epochs {sorted(before)} -> {sorted(now)}")
    return bad


# --- command line --------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(
        prog="python scripts/layout_regression.py", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", action="store_true",
                      help="write each case's values to its own record (docs/regression/<case>.json)")
    mode.add_argument("--compare", action="store_true",
                      help="compare each case with its record; exit 1 if any differs or is missing")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), metavar="CASE",
                        help="the cases to run (default: with --record those without a record, with "
                             f"--compare every case); known: {' '.join(CASES)}")
    parser.add_argument("--into", type=Path, metavar="DIR",
                        help="--record: the folder of the records (default: docs/regression)")
    parser.add_argument("--against", type=Path, metavar="FILE_OR_DIR",
                        help="--compare: a folder of <case>.json records (default: docs/regression) "
                             "or one JSON file of every case, e.g. recorded on this machine")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="folder for the runs, kept (default: a temporary folder, removed)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (each one thread)")
    args = parser.parse_args(argv)
    if args.against is not None and not args.compare:
        parser.error("--against: only with --compare")
    if args.into is not None and not args.record:
        parser.error("--into: only with --record")
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: must be at least 1")
    return args


def run_cases(cases: list[str], out: Path | None, jobs: int) -> dict[str, Values]:
    """Every case's values, ``jobs`` runs at a time, in ``out`` (default: a temporary folder)."""
    with tempfile.TemporaryDirectory(prefix="layout_regression-") as scratch:
        folder = out if out is not None else Path(scratch)
        with ThreadPoolExecutor(jobs) as pool:
            return dict(zip(cases, pool.map(lambda c: run_case(c, folder), cases)))


def main(argv: list[str] | None = None) -> int:
    """Record or compare (see the module's docstring); the exit status."""
    args = parse_args(argv)
    if args.record:
        folder = args.into or RECORDS
        cases = args.cases or unrecorded(list(CASES), folder)
        if not cases:
            print(f"every case has a record in {folder}; name one with --cases to record it again")
            return 0
        values = run_cases(cases, args.out, args.jobs)
        for case in cases:
            print(f"wrote {write_record(case, values[case], folder)}")
        return 0
    cases = args.cases or list(CASES)
    values = run_cases(cases, args.out, args.jobs)
    reference = read_reference(args.against or RECORDS, cases)
    bad = differences(values, reference)
    here = this_machine()
    for case in sorted(c for c in reference if reference[c].get(MACHINE, here) != here):
        print(f"note: {case}'s record was made on {reference[case][MACHINE]}, this is {here}: "
              "summation order differs between CPUs, so digits may differ")
    for case, by_epoch in values.items():
        print(f"{case:16s} " + "  ".join(f"{e}:{v}" for e, v in sorted(by_epoch.items())))
    print("identical" if not bad else "DIFFERENT:\n" + "\n".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
