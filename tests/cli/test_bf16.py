"""``trainer.precision: bf16-mixed`` on CPU through the CLI (issue 28): every method trains an
epoch with finite losses, and its checkpoint resumes in float32. Before issue 28 SGRAF's
local-similarity Function raised in its backward under CPU autocast (bfloat16 != float)."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_runs import METHODS, method_config

ALL = {**METHODS,
       "crcl": {"class_path": "ncl.methods.crcl.CRCL", "init_args": {"freeze_epochs": 1}},
       "recon": {"class_path": "ncl.methods.recon.ReCon", "init_args": {"warmup_epochs": 1}}}


def fit(config: Path, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ncl.cli", "fit", "--config", str(config), *extra],
                          cwd=cwd, capture_output=True, text=True, timeout=600)


def logged_training_values(root: Path) -> list[float]:
    """Every logged ``train/*`` value (losses, targets; methods name them differently) in the
    run's ``metrics.csv``."""
    values = []
    for path in root.rglob("metrics.csv"):
        for row in csv.DictReader(path.open()):
            values += [float(v) for k, v in row.items() if k.startswith("train/") and v]
    return values


@pytest.mark.parametrize("name", sorted(ALL))
def test_bf16_mixed_trains_and_resumes_in_float32(name: str, tmp_path: Path) -> None:
    config = method_config(tmp_path / name, tmp_path / "cache", ALL[name], max_epochs=1, steps=4)
    first = fit(config, tmp_path, "--trainer.precision=bf16-mixed")
    assert first.returncode == 0, first.stderr[-3000:]
    values = logged_training_values(tmp_path / name)
    assert values and all(math.isfinite(v) for v in values)
    resumed = fit(config, tmp_path, "--trainer.precision=32-true", "--trainer.max_epochs=2",
                  "--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "epoch 1 validation" in resumed.stdout
