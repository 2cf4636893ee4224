"""PC² on NoW's layout (issue 51): the generated twin of NoW's released folder
(:class:`ncl.data.now_synthetic.NowSyntheticDataModule`: token-id captions, one feature file
per split) instead of the F30K layout of the shared tests (tiny_runs.METHODS on
``SyntheticDataModule``). Through the real CLI: a SIGKILL mid-epoch and ``--ckpt_path last``
give the uninterrupted run's validations, weights and per-sample state; ``ncl test`` and
``ncl predict`` of its best checkpoint; two CPU processes in sync, every validation sample
counted once."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ncl.cli import main
from resume_helpers import fit_killed_at
from tiny_runs import (
    DDP_DATA,
    DDP_TRAINER,
    METHODS,
    assert_counted_once,
    assert_same_checkpoints,
    best_tested_and_predicted,
    last_checkpoint,
    method_config,
    per_epoch,
    run_folder,
    sync_check_args,
)

NOW = "ncl.data.now_synthetic.NowSyntheticDataModule"
STEPS = 4


def now_config(root: Path, cache: Path, **kwargs) -> Path:
    return method_config(root, cache, METHODS["pc2"], data_class=NOW, **kwargs)


def test_resume_test_and_predict_on_now_layout(tmp_path: Path, synthetic_cache: Path) -> None:
    straight_cfg = now_config(tmp_path / "straight", synthetic_cache, max_epochs=3, steps=STEPS)
    main(["fit", "--config", str(straight_cfg)])
    straight = run_folder(tmp_path / "straight")

    killed_cfg = now_config(tmp_path / "killed", synthetic_cache, max_epochs=3, steps=STEPS)
    killed = fit_killed_at(killed_cfg, tmp_path, STEPS + 2)  # mid second epoch
    assert killed.returncode == -9, killed.stderr[-2000:]
    folder = run_folder(tmp_path / "killed")
    assert last_checkpoint(folder)["epoch"] == 0
    main(["fit", "--config", str(killed_cfg), "--ckpt_path", "last"])

    rsum = per_epoch(folder, "val/rsum")
    assert sorted(rsum) == [0, 1, 2] and rsum == per_epoch(straight, "val/rsum")
    assert_same_checkpoints(last_checkpoint(straight), last_checkpoint(folder))

    results, rows = best_tested_and_predicted(straight_cfg, tmp_path / "straight")
    assert math.isfinite(results["A+B"]["1k"]["rsum"])  # NoW tests on its 1k protocol
    prob = [float(r["clean_probability"]) for r in rows]
    assert len(rows) > 0 and prob == sorted(prob) and all(0 <= p <= 1 for p in prob)


def test_two_cpu_processes_on_now_layout(tmp_path: Path, synthetic_cache: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    config = now_config(tmp_path, synthetic_cache, max_epochs=2,
                        steps=DDP_TRAINER["limit_train_batches"], trainer=DDP_TRAINER, data=DDP_DATA)
    main(["fit", "--config", str(config), *sync_check_args(tmp_path)])
    assert (tmp_path / "sync_ok_world2").read_text() == "1"  # both epochs checked on both ranks
    folder = run_folder(tmp_path)
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1]
    assert_counted_once(config, folder, tmp_path)
