"""Smoke test of scripts/benchmarks/bench_mscn_meta_step.py at toy sizes: it runs, prints the
header, both variants and the ratio of their times (the timings themselves mean nothing here)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from launch import launch

BENCHMARKS = Path(__file__).resolve().parents[1]
ROOT = BENCHMARKS.parents[1]


def test_meta_step_benchmark_prints_both_variants_and_their_ratio() -> None:
    argv = ("--threads", "1", "--dims", "toy", "--batch", "6", "--rounds", "1", "--pseudo-update", "adam")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = launch([sys.executable, str(BENCHMARKS / "bench_mscn_meta_step.py"), *argv],
                  capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("# bench_mscn_meta_step: ") and "load average" in lines[0]
    assert lines[1] == "command: python scripts/benchmarks/bench_mscn_meta_step.py " + " ".join(argv)
    times = {row.split()[0]: float(row.split()[1]) for row in lines[3:5]}
    assert set(times) == {"plain", "meta+plain"} and all(t > 0 for t in times.values())
    ratio = re.fullmatch(r"ratio meta\+plain / plain: (\d+\.\d\d)", lines[5])
    assert ratio and abs(float(ratio.group(1)) - times["meta+plain"] / times["plain"]) < 0.01 + 0.01 * float(ratio.group(1))
