"""What the benchmarks in ``scripts/benchmarks/`` share: the machine line, the load, the worker children.

Every benchmark measures in fresh child processes (``--worker TASK`` on its own command line)
so that one measurement's allocations, threads or imports cannot colour the next, and prints
the machine and its load with the numbers: on a shared machine the load changes them, and a
table read without it misleads. The scripts are run as ``python scripts/benchmarks/NAME.py``,
which puts this folder first on ``sys.path``, so they import this file as ``benchlib``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the checkout


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, as ``uptime`` prints them."""
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo``, else what :mod:`platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine() -> str:
    """CPU model, logical cores and torch version: the line a timing is read against."""
    import torch  # here, not at import: a worker that never prints a header need not pay it

    return f"{cpu_model()}, {os.cpu_count()} logical cores, torch {torch.__version__}"


def parse_or_run_worker(argv: list[str] | None,
                        parse_args: Callable[[list[str]], argparse.Namespace],
                        run_worker: Callable[[argparse.Namespace], None],
                        ) -> tuple[argparse.Namespace, list[str]] | None:
    """Parse ``argv`` (default: the command line); in a worker child run it and return ``None``.

    In the parent returns ``(args, argv)``; the parent passes ``argv`` on to its workers.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if getattr(args, "worker", ""):
        run_worker(args)
        return None
    return args, argv


def print_header(name: str, argv: list[str], facts: str) -> None:
    """The two lines every benchmark starts with: the machine and load, and its command."""
    print(f"# {name}: {machine()}, {facts}, {load_average()} "
          "(the machine may be shared with other jobs)")
    print(f"command: python scripts/benchmarks/{name}.py " + " ".join(argv))


def worker_command(script: str, argv: list[str], worker: str) -> list[str]:
    """The command line that runs ``script``'s worker ``worker`` with the parent's options."""
    return [sys.executable, str(Path(script).resolve()), *argv, "--worker", worker]


def parse_worker_output(worker: str, returncode: int, stdout: str,
                        stderr: str) -> tuple[dict, str]:
    """A finished worker's JSON (its last stdout line) and the rest of its stdout.

    A failed worker raises one error with its name and the end of its stderr, so that a broken
    measurement never turns into a table row.
    """
    if returncode != 0:
        raise RuntimeError(f"worker {worker} failed (exit {returncode}):\n{stderr[-4000:]}")
    lines = stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"worker {worker} printed nothing:\n{stderr[-4000:]}")
    return json.loads(lines[-1]), "\n".join(lines[:-1])


def run_worker_child(script: str, argv: list[str], worker: str, *,
                     env: dict[str, str] | None = None,
                     cwd: str | Path | None = None) -> tuple[dict, str]:
    """Run ``script --worker worker`` in a fresh interpreter; its JSON and its other output."""
    done = subprocess.run(worker_command(script, argv, worker), capture_output=True, text=True,
                          check=False, env=env, cwd=cwd or ROOT)
    return parse_worker_output(worker, done.returncode, done.stdout, done.stderr)


def threads_env(threads: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with ``OMP_NUM_THREADS=threads``."""
    return dict(os.environ if base is None else base, OMP_NUM_THREADS=str(threads))


def top1_agreement(reference: Any, other: Any) -> tuple[float, float, float]:
    """Two ``(N_img, N_cap)`` score matrices (torch tensors): the largest absolute difference,
    and the shares of images (rows, i2t) and of captions (columns, t2i) whose top-1 match is the
    same in both."""
    diff = (other.float() - reference.float()).abs().max().item()
    i2t = (other.argmax(1) == reference.argmax(1)).double().mean().item()
    t2i = (other.argmax(0) == reference.argmax(0)).double().mean().item()
    return diff, i2t, t2i
