"""The clean-only baseline under DDP (issue 28): a rank whose batch holds fewer than two clean
pairs returned ``None`` from ``training_step``. The issue expected the other rank to wait in
the gradient all-reduce forever; measured on CPU/gloo with Lightning 2.6, Lightning stops the run
instead ("Skipping the `training_step` by returning None in distributed training is not
supported", a traceback). Run in a subprocess with a timeout, so that a hang would fail too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tiny_runs import DDP_DATA, DDP_TRAINER, METHODS, method_config
from launch import launch


def test_clean_only_with_few_clean_pairs_does_not_hang_two_processes(tmp_path: Path) -> None:
    # 80 % noise in batches of 2: most rank-steps have fewer than two clean pairs, and the two
    # ranks differ in which steps they are
    config = method_config(tmp_path, tmp_path / "cache", METHODS["infonce_clean"], max_epochs=1,
                           steps=6, trainer={**DDP_TRAINER, "limit_train_batches": 6},
                           data={**DDP_DATA, "batch_size": 2, "noise_ratio": 0.8})
    try:
        out = launch([sys.executable, "-m", "ncl.cli", "fit", "--config", str(config)],
                             cwd=tmp_path, capture_output=True, text=True, timeout=240,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired as err:
        raise AssertionError("two processes hung (a rank skipped its backward)") from err
    assert out.returncode == 0, out.stderr[-3000:]
    assert "epoch 0 validation" in out.stdout
