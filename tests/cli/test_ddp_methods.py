"""Two CPU processes (DDP on gloo) for every declared tiny case whose method keeps no
per-sample state (today Triplet, InfoNCE, RCL): both ranks end every epoch with identical weights, the run checkpoints, and
its validation counts every image and caption once, equal to a single-process ``ncl validate``
of the same checkpoint, although the split sizes are odd so the DistributedSampler pads each
rank's shard. Methods with per-sample state have the same checks, with their state, in their
own test files (tests/methods/test_{ncr,crcl,recon,decl,l2rm}_cli.py, test_gsc.py)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from ncl.cli import main
from ncl.methods.resumable import Resumable
from tiny_runs import (
    DDP_TRAINER,
    METHODS,
    DDP_DATA,
    assert_counted_once,
    last_checkpoint,
    method_config,
    run_folder,
    sync_check_args,
)


def stateless(case: dict) -> bool:
    """Whether a tiny case's method keeps no per-sample training state (it does not override
    ``training_state``); a method with state has its own two-process test in its own test
    file, which also compares that state across the ranks."""
    module, _, name = case["class_path"].rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    return cls.training_state is Resumable.training_state


#: The tiny cases (declared by the methods) whose method keeps no per-sample state.
STATELESS = sorted(name for name, case in METHODS.items() if stateless(case))


@pytest.mark.parametrize("name", STATELESS)
def test_two_cpu_processes_train_validate_checkpoint(tmp_path: Path, synthetic_cache: Path,
                                                     monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    config = method_config(tmp_path, synthetic_cache, METHODS[name], max_epochs=2,
                           steps=DDP_TRAINER["limit_train_batches"], trainer=DDP_TRAINER,
                           data=DDP_DATA)
    main(["fit", "--config", str(config), *sync_check_args(tmp_path)])
    assert (tmp_path / "sync_ok_world2").read_text() == "1"  # both epochs checked on both ranks
    folder = run_folder(tmp_path)
    assert last_checkpoint(folder)["epoch"] == 1
    assert len(list((folder / "checkpoints").glob("best*.ckpt"))) == 1
    assert_counted_once(config, folder, tmp_path)
