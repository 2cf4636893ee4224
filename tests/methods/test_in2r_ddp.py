"""IN2R on two CPU processes (DDP on gloo): the same weights, refiners, division and **queues**
on both ranks after every epoch (a push all-gathers the ranks' rows, so each queue is the one
process's of the global batch: docs/methods/in2r.md, "The queue under DDP"), and the last
validation, evaluated in the official pair batches of 16 with the batch centring on, equal to a
single-process ``ncl validate`` of the checkpoint (each rank encodes whole batches)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from tiny_runs import (
    DDP_DATA,
    DDP_TRAINER,
    METHODS,
    assert_counted_once,
    last_checkpoint,
    method_config,
    run_folder,
    sync_check_args,
)

from ncl.cli import main


def test_two_processes_hold_the_same_queues_and_evaluate_as_one(
        tmp_path: Path, synthetic_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    data = {**DDP_DATA, "eval_batch_size": 16}  # centred pair batches, not one sample at a time
    config = method_config(tmp_path, synthetic_cache, METHODS["in2r"], max_epochs=3,
                           steps=DDP_TRAINER["limit_train_batches"], trainer=DDP_TRAINER, data=data)
    main(["fit", "--config", str(config), *sync_check_args(tmp_path),
          "--trainer.callbacks+=in2r_checks.QueueCheck", f"--trainer.callbacks.marker_dir={tmp_path}"])
    assert (tmp_path / "sync_ok_world2").read_text() == "2"  # weights and division equal on both ranks
    assert (tmp_path / "queues_ok").read_text() == "2"  # both co-training epochs
    folder = run_folder(tmp_path)
    state = last_checkpoint(folder)["ncl_training_state"]
    assert len(state["queues"]) == 2  # [A's, B's], one pair for every rank
    assert all(q is not None and q["images"].shape[0] > 0 for q in state["queues"])
    assert math.isfinite(float(state["division"]["prob"].sum()))
    assert_counted_once(config, folder, tmp_path)  # the validation equals one process's
