"""BiCro through the real CLI on tiny synthetic data (SIGKILL-resume and bf16 come from the shared
tests, ``bicro`` in tiny_runs.METHODS): two CPU processes (DDP on gloo) hold the same weights and
division after every epoch and count every validation sample once; ``ncl test`` and
``ncl predict`` on the run's best checkpoint."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from launch import ncl_here
from tiny_runs import (DDP_DATA, DDP_TRAINER, METHODS, assert_counted_once, last_checkpoint,
                       method_config, run_folder)

from ncl.cli import main


def test_two_cpu_processes_hold_the_same_division(tmp_path: Path, synthetic_cache: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    config = method_config(tmp_path, synthetic_cache, METHODS["bicro"], max_epochs=3,
                           steps=DDP_TRAINER["limit_train_batches"], trainer=DDP_TRAINER, data=DDP_DATA)
    main(["fit", "--config", str(config), "--trainer.callbacks+=bicro_sync.NanEqualSyncCheck",
          f"--trainer.callbacks.marker_dir={tmp_path}"])
    assert (tmp_path / "sync_ok_world2").read_text() == "2"  # weights and division equal on both ranks
    folder = run_folder(tmp_path)
    division = last_checkpoint(folder)["ncl_training_state"]["division"]
    assert division["epoch"] == 2 and division["clean"].shape == (2, 63 * 5)
    assert_counted_once(config, folder, tmp_path)


def test_fit_test_and_predict(tmp_path: Path, synthetic_cache: Path) -> None:
    config = method_config(tmp_path, synthetic_cache, METHODS["bicro"], max_epochs=2, steps=4)
    main(["fit", "--config", str(config)])
    assert ncl_here("test", "--config", str(config), "--ckpt_path", "best", cwd=tmp_path).returncode == 0
    results = json.loads(next(tmp_path.rglob("test_results.json")).read_text())
    assert {"A", "B", "A+B"} <= set(results)
    out = tmp_path / "ranked.csv"
    result = ncl_here("predict", "--config", str(config), "--ckpt_path", "best", "--out", str(out),
                      cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(out.open()))
    prob = [float(r["clean_probability"]) for r in rows]
    assert len(rows) > 0 and prob == sorted(prob) and all(0 <= p <= 1 and math.isfinite(p) for p in prob)
