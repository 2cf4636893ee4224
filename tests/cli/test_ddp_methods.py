"""Two CPU processes (DDP on gloo) for every declared tiny case (``tiny_runs.METHODS``: each
method class's ``spec.tiny``, so a new method's case is taken here with no edit): two epochs
on two processes.

* :class:`tiny_runs.RankSyncCheck`: both ranks hold the same weights and the same
  ``training_state()`` (every leaf: per-sample tables, divisions, their epochs and counters)
  after every training epoch and whenever a checkpoint is written, and the same buffers when
  a validation ends;
* one validation per epoch, a best and a last checkpoint;
* the last validation counts every image and caption once, equal to a single-process
  ``ncl validate`` of the same checkpoint, although the split sizes are odd so the
  DistributedSampler pads each rank's shard (``tiny_runs.assert_counted_once``).

Method-specific two-process checks stay in the method's own test file: DECL's table against
one process's (after a two-process resume), L2RM's and IN2R's per-rank queues, and CRCL and
ReCon (no tiny case; a two-process resume and test each).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ncl.cli import main
from tiny_runs import (
    DDP_DATA,
    DDP_TRAINER,
    METHODS,
    assert_counted_once,
    last_checkpoint,
    method_config,
    per_epoch,
    run_folder,
    sync_check_args,
)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_two_cpu_processes_train_validate_checkpoint(tmp_path: Path, synthetic_cache: Path,
                                                 monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    config = method_config(tmp_path, synthetic_cache, METHODS[name], max_epochs=2,
                           steps=DDP_TRAINER["limit_train_batches"], trainer=DDP_TRAINER,
                           data=DDP_DATA)
    main(["fit", "--config", str(config), *sync_check_args(tmp_path)])
    assert (tmp_path / "sync_ok_world2").read_text() == "1"  # both epochs checked on both ranks
    folder = run_folder(tmp_path)
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1]  # each epoch validated once
    # the last checkpoint checked on both ranks as it was written. Epoch 1's, unless that epoch
    # made no optimizer step, for which Lightning writes none (L2RM idles an epoch whose
    # division leaves no full batch per process: its tiny case here, after three warm-up steps)
    saved = last_checkpoint(folder)["epoch"]
    assert (tmp_path / "saved_ok_world2").read_text() == str(saved) and saved in (0, 1)
    assert len(list((folder / "checkpoints").glob("best*.ckpt"))) == 1
    assert_counted_once(config, folder, tmp_path)
