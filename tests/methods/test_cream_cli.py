"""CREAM through the real CLI on tiny synthetic data: fit (warm-up, division, three steps),
test, predict, and two CPU processes (DDP on gloo) that stay in sync, resume and count every
sample once. The SIGKILL resume is tests/cli/test_resume.py's (``cream`` in tiny_runs.METHODS)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from launch import ncl_here
from ncl.cli import main
from resume_helpers import fit_killed_at
from tiny_runs import (DDP_DATA, METHODS, assert_counted_once, assert_same_checkpoints,
                       last_checkpoint, method_config, per_epoch, run_folder, sync_check_args)


def tiny_config(root: Path, cache: Path, **kwargs) -> Path:  # noqa: ANN003 - forwarded
    return method_config(root, cache, METHODS["cream"], max_epochs=3, steps=4,
                         data={"noise_type": "caption"}, **kwargs)


def test_fit_divides_trains_three_steps_tests_and_predicts(tmp_path: Path, synthetic_cache: Path) -> None:
    config = tiny_config(tmp_path, synthetic_cache)
    main(["fit", "--config", str(config)])
    folder = run_folder(tmp_path)
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1, 2]
    assert sorted(per_epoch(folder, "train/A/warmup_infonce_epoch")) == [0]
    for net in "AB":
        assert sorted(per_epoch(folder, f"train/{net}/loss_clean_epoch")) == [1, 2]
    assert sorted(per_epoch(folder, "train/B/loss_noisy_epoch")) == [2]  # noisy_start_epoch 1
    sizes = [per_epoch(folder, f"cream/{name}")[1] for name in ("clean", "hard", "noisy")]
    assert sum(sizes) == 300
    assert sorted(per_epoch(folder, "train/detection/f1")) == [1, 2]
    state = last_checkpoint(folder)["ncl_training_state"]
    assert state["division"]["epoch"] == 2 and state["division"]["prob"].shape == (2, 300)
    assert state["warmup_done"] and state["warmup_best"] is None  # applied, weights dropped

    assert ncl_here("test", "--config", str(config), "--ckpt_path", "best", cwd=tmp_path).returncode == 0
    results = json.loads(next(tmp_path.rglob("test_results.json")).read_text())
    assert {"A", "B", "A+B"} <= set(results)
    out = tmp_path / "ranked.csv"
    result = ncl_here("predict", "--config", str(config), "--ckpt_path", "best", "--out", str(out),
                      cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(list(csv.DictReader(out.open()))) == 300


def test_killed_inside_the_warmup_resumes_its_selection_exactly(tmp_path: Path,
                                                                 synthetic_cache: Path) -> None:
    """Two warm-up epochs, killed in the second: the checkpoint of the first holds the running
    maxima and the kept epoch's weights, and the resumed run selects, divides and trains as
    the uninterrupted one."""
    method = {**METHODS["cream"], "init_args": {**METHODS["cream"]["init_args"], "warmup_epochs": 2}}

    def config(root: Path) -> Path:
        return method_config(root, synthetic_cache, method, max_epochs=3, steps=4,
                             data={"noise_type": "caption"})

    main(["fit", "--config", str(config(tmp_path / "straight"))])
    straight = run_folder(tmp_path / "straight")
    killed_cfg = config(tmp_path / "killed")
    killed = fit_killed_at(killed_cfg, tmp_path, 4 + 2)  # the second warm-up epoch
    assert killed.returncode == -9, killed.stderr[-2000:]
    folder = run_folder(tmp_path / "killed")
    state = last_checkpoint(folder)["ncl_training_state"]
    assert last_checkpoint(folder)["epoch"] == 0 and not state["warmup_done"]
    assert state["warmup_maxima"] is not None and state["warmup_best"]["epoch"] == 0
    main(["fit", "--config", str(killed_cfg), "--ckpt_path", "last"])
    assert per_epoch(folder, "val/rsum") == per_epoch(straight, "val/rsum")
    assert_same_checkpoints(last_checkpoint(straight), last_checkpoint(folder))


def test_two_cpu_processes_fit_resume_test(tmp_path: Path, synthetic_cache: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    config = method_config(tmp_path, synthetic_cache, METHODS["cream"], max_epochs=2, steps=4,
                           trainer={"devices": 2, "strategy": "ddp_spawn"},
                           data={**DDP_DATA, "noise_type": "caption"})
    sync, marker = sync_check_args(tmp_path), tmp_path / "sync_ok_world2"
    main(["fit", "--config", str(config), *sync])
    assert marker.read_text() == "1"  # weights, division and BatchNorm statistics in sync
    main(["fit", "--config", str(config), "--ckpt_path=last", "--trainer.max_epochs=3", *sync])
    assert marker.read_text() == "2"
    folder = run_folder(tmp_path)
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1, 2]
    division = last_checkpoint(folder)["ncl_training_state"]["division"]
    assert division["prob"].shape == (2, 5 * DDP_DATA["n_train"])  # gathered once per pair
    assert_counted_once(config, folder, tmp_path)
    main(["test", "--config", str(config), "--trainer.devices=1", "--trainer.strategy=auto",
          "--ckpt_path=best"])
    assert list(tmp_path.rglob("test_results.json"))
