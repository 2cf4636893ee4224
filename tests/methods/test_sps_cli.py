"""SPS through the real CLI on tiny synthetic data: fit (warm-up, per-network split, strictly
clean, clean and proxy steps), test, predict, and two CPU processes (DDP on gloo) that stay in
sync, resume and count every sample once. The SIGKILL resume is tests/cli/test_resume.py's
(``sps`` in tiny_runs.METHODS)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from launch import ncl_here
from ncl.cli import main
from tiny_runs import (DDP_DATA, METHODS, assert_counted_once, last_checkpoint, method_config,
                       per_epoch, run_folder, sync_check_args)


def test_fit_splits_trains_tests_and_predicts(tmp_path: Path, synthetic_cache: Path) -> None:
    config = method_config(tmp_path, synthetic_cache, METHODS["sps"], max_epochs=3, steps=4,
                           data={"noise_type": "caption"})
    main(["fit", "--config", str(config)])
    folder = run_folder(tmp_path)
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1, 2]
    for net in "AB":
        assert sorted(per_epoch(folder, f"train/{net}/loss_strict_epoch")) == [1, 2]
        assert sorted(per_epoch(folder, f"train/{net}/structure_epoch")) == [1, 2]
    assert sorted(per_epoch(folder, "train/A/loss_proxy_epoch")) == [2]  # noisy_start_epoch 1
    for net in "AB":
        sizes = [per_epoch(folder, f"sps/{net}/{name}")[1] for name in ("strict", "clean", "noisy")]
        assert sum(sizes) == 300
    state = last_checkpoint(folder)["ncl_training_state"]
    assert state["division"]["subset"].shape == (2, 300)

    assert ncl_here("test", "--config", str(config), "--ckpt_path", "best", cwd=tmp_path).returncode == 0
    results = json.loads(next(tmp_path.rglob("test_results.json")).read_text())
    assert {"A", "B", "A+B"} <= set(results)
    out = tmp_path / "ranked.csv"
    result = ncl_here("predict", "--config", str(config), "--ckpt_path", "best", "--out", str(out),
                      cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(list(csv.DictReader(out.open()))) == 300


def test_two_cpu_processes_fit_resume_test(tmp_path: Path, synthetic_cache: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    config = method_config(tmp_path, synthetic_cache, METHODS["sps"], max_epochs=2, steps=4,
                           trainer={"devices": 2, "strategy": "ddp_spawn"},
                           data={**DDP_DATA, "noise_type": "caption"})
    sync, marker = sync_check_args(tmp_path), tmp_path / "sync_ok_world2"
    main(["fit", "--config", str(config), *sync])
    assert marker.read_text() == "1"
    main(["fit", "--config", str(config), "--ckpt_path=last", "--trainer.max_epochs=3", *sync])
    assert marker.read_text() == "2"
    folder = run_folder(tmp_path)
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1, 2]
    assert_counted_once(config, folder, tmp_path)
    main(["test", "--config", str(config), "--trainer.devices=1", "--trainer.strategy=auto",
          "--ckpt_path=best"])
    assert list(tmp_path.rglob("test_results.json"))
