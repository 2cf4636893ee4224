"""IN2R on two CPU processes (DDP on gloo): the same weights, refiners and division on both
ranks after every epoch, and one pair of queues per rank in the checkpoint (each rank queues
its own labelled batches: docs/methods/in2r.md, "The queue under DDP"); the last validation
equals a single-process ``ncl validate`` of the checkpoint."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
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


def test_two_cpu_processes_hold_the_same_division_and_a_queue_each(
        tmp_path: Path, synthetic_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    config = method_config(tmp_path, synthetic_cache, METHODS["in2r"], max_epochs=3,
                           steps=DDP_TRAINER["limit_train_batches"], trainer=DDP_TRAINER, data=DDP_DATA)
    main(["fit", "--config", str(config), *sync_check_args(tmp_path)])
    assert (tmp_path / "sync_ok_world2").read_text() == "2"  # weights and division equal on both ranks
    folder = run_folder(tmp_path)
    state = last_checkpoint(folder)["ncl_training_state"]
    assert len(state["queues"]) == 2  # one [A's, B's] per rank
    for rank_queues in state["queues"]:
        assert all(q is not None and q["images"].shape[0] > 0 for q in rank_queues)
    assert not torch.equal(state["queues"][0][0]["images"], state["queues"][1][0]["images"])
    assert math.isfinite(float(state["division"]["prob"].sum()))
    assert_counted_once(config, folder, tmp_path)  # the validation equals one process's
