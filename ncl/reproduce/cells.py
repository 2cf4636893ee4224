"""One grid cell through the real CLI: ``ncl fit``, then ``ncl test`` of its best checkpoint.

What is here:

* :data:`METHODS` - method name -> CLI overrides on top of ``configs/quickstart.yaml`` (the
  synthetic benchmark of ``docs/results.md``), as the method classes declare them
  (:mod:`ncl.methods.declaration`), with :data:`BENCH` and :data:`WARMUP`.
* :func:`configs_dir` - where the repository's ``configs/`` folder is (configs are not part of
  the installed package: run from a checkout, or name the folder).
* :func:`cell_env`, :func:`run_cli`, :func:`fit_then_test` - run ``ncl fit`` (resuming a killed
  fit from its ``last.ckpt``) and ``ncl test`` of the best checkpoint in fresh processes.
* :func:`read_metrics`, :func:`newest` - reading a run back.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ncl
from ncl.methods.declaration import BENCHMARK_WARMUP
from ncl.methods.declaration import rows as declared_rows

#: The folder that holds the ``ncl`` package being run (the checkout, or ``site-packages``).
PACKAGE_ROOT = Path(ncl.__file__).resolve().parents[1]

#: Warm-up epochs of SGR*, NCR/LNC, ReCon, DECL and L2RM in the 14-epoch benchmark of docs/results.md.
WARMUP = BENCHMARK_WARMUP
# The benchmark's own settings on top of the quickstart config, fixed here so that the
# quickstart can be tuned for a first run without moving the benchmark (the quickstart now
# uses batch 16; every older table in docs/results.md was measured with batch 64).
BENCH = ["--data.batch_size=64"]
#: Method row -> CLI overrides on top of the quickstart config (same backbone, optimiser, data;
#: only the loss changes): what each method class declares (:class:`ncl.methods.declaration.Row`,
#: its ``overrides``), in the rows' declared order.
METHODS: dict[str, list[str]] = {name: list(row.overrides) for name, row in declared_rows().items()}


class CellError(RuntimeError):
    """A CLI call of a cell failed; the message holds the command and the end of its stderr."""


def configs_dir(explicit: Path | None = None) -> Path:
    """The repository's ``configs/`` folder (absolute).

    ``explicit`` (``--configs``) if given, else ``./configs`` of the working directory, else the
    one beside the running ``ncl`` package (a checkout or an editable install).

    Raises:
        SystemExit: no such folder holds ``quickstart.yaml``.
    """
    candidates = [explicit] if explicit is not None else [Path.cwd() / "configs", PACKAGE_ROOT / "configs"]
    for folder in candidates:
        if (folder / "quickstart.yaml").is_file():
            return folder.resolve()
    where = " or ".join(str(c) for c in candidates)
    raise SystemExit(f"no configs/quickstart.yaml in {where}: the grids use the repository's configs/; "
                     "run from the checkout or pass --configs DIR")


def cell_env(threads: int | None = None, cuda_devices: str | None = None) -> dict[str, str]:
    """The environment of a cell's processes.

    W&B off, warnings quiet, this ``ncl`` first on ``PYTHONPATH``; ``threads`` sets
    ``OMP_NUM_THREADS`` (the cell's share of the CPU) and ``cuda_devices``
    ``CUDA_VISIBLE_DEVICES`` (its GPU); ``None`` leaves the caller's value.
    """
    path = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONWARNINGS": "ignore", "PYTHONPATH": path}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
        env["MKL_NUM_THREADS"] = str(threads)
    if cuda_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_devices
    return env


def cli_command(subcommand: str, args: Sequence[str]) -> list[str]:
    """``python -m ncl.cli <subcommand> <args>`` with this interpreter."""
    return [sys.executable, "-m", "ncl.cli", subcommand, *args]


def run_cli(subcommand: str, args: Sequence[str], env: dict[str, str], log: Path | None = None) -> float:
    """Run one ``ncl`` sub-command to the end in a fresh process; its CPU seconds.

    Output goes to ``log`` (appended, so a resumed cell keeps its history) or a temporary
    file. The CPU time (user + system, from ``os.wait4``) is the process's own, so it stays
    comparable when other jobs share the machine, unlike the wall time.

    Raises:
        CellError: the process failed; with the command and the last 3,000 characters of output.
    """
    with tempfile.TemporaryFile("w+", encoding="utf-8") if log is None else open(log, "a+", encoding="utf-8") as out:
        out.write(f"$ ncl {subcommand} {' '.join(args)}\n")
        out.flush()
        start = out.tell()
        proc = subprocess.Popen(cli_command(subcommand, args), env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            out.seek(start)
            raise CellError(f"ncl {subcommand} {' '.join(args)} exited with {proc.returncode}:\n"
                            f"{out.read()[-3000:]}")
    return usage.ru_utime + usage.ru_stime


def newest(root: Path, pattern: str) -> Path:
    """The most recently modified file under ``root`` matching ``pattern`` (this run's)."""
    found = list(root.rglob(pattern))
    if not found:
        raise FileNotFoundError(f"no {pattern} under {root}")
    return max(found, key=lambda p: p.stat().st_mtime)


def read_metrics(run_root: Path) -> list[dict[str, str]]:
    """The rows of the newest ``metrics.csv`` under ``run_root`` (one row per logging call);
    give the run folder itself where ``run_root`` also holds ``ncl test`` folders."""
    with open(newest(run_root, "metrics.csv"), newline="") as handle:
        return list(csv.DictReader(handle))


@dataclass(frozen=True)
class FitTest:
    """What one fit + test of a cell left behind.

    Attributes:
        metrics: the run's ``metrics.csv`` rows.
        results: ``test_results.json``: ``results[system][protocol][metric]``.
        best: the tested checkpoint.
        fit_seconds: wall time of this attempt's ``ncl fit``.
        test_seconds: wall time of ``ncl test``.
        cpu_seconds: CPU time (user + system) of both processes.
        resumed: whether the fit continued a killed attempt from its ``last.ckpt``.
    """

    metrics: list[dict[str, str]]
    results: dict[str, Any]
    best: Path
    fit_seconds: float
    test_seconds: float
    cpu_seconds: float
    resumed: bool


def fit_then_test(common: Sequence[str], fit_args: Sequence[str], run_root: Path, env: dict[str, str],
                  resume: bool = False, log: Path | None = None) -> FitTest:
    """``ncl fit`` then ``ncl test`` of the best checkpoint (by the monitored validation rSum).

    Args:
        common: overrides of both sub-commands (config, model, data, ``default_root_dir``).
        fit_args: overrides of the fit only (``--trainer.max_epochs``).
        run_root: the cell's ``trainer.default_root_dir``.
        env: the processes' environment (:func:`cell_env`).
        resume: fit with ``--ckpt_path last --fresh_if_missing true``: a fit that was killed
            continues from its last finished epoch, a new one starts from scratch.
        log: file the CLI output is appended to, or ``None``.
    """
    resumed = resume and any(run_root.rglob("last.ckpt"))
    resume_args = ["--ckpt_path=last", "--fresh_if_missing=true"] if resume else []
    start = time.time()
    cpu = run_cli("fit", [*common, *fit_args, *resume_args], env, log)
    fit_seconds = time.time() - start
    best = newest(run_root, "best-*.ckpt")
    # The fit's own run folder (the parent of checkpoints/): every ``ncl test`` writes a folder
    # of its own, so after a resumed fit that did not log anything new the newest metrics.csv
    # under run_root would be an earlier test's.
    metrics = read_metrics(best.parent.parent)
    start = time.time()
    cpu += run_cli("test", [*common, f"--ckpt_path={best}"], env, log)
    test_seconds = time.time() - start
    results = json.loads(newest(run_root, "test_results.json").read_text())
    return FitTest(metrics, results, best, round(fit_seconds, 1), round(test_seconds, 1), round(cpu, 1),
                   resumed)
