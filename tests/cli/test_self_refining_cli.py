"""SelfRefining as a plug-in through the real CLI (``--trainer.callbacks+=``) on methods that
know nothing of it, on tiny synthetic data: RCL re-initialises at the piece boundary (a fresh
factory draw of the piece's stream, empty optimiser state, the schedule restarted), and kill -9
and ``--ckpt_path last`` inside a piece and across the boundary equal the uninterrupted run;
InfoNCE under two gloo processes keeps identical weights on both ranks across the boundary."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncl.cli import main
from refining_helpers import fit_killed_at
from tiny_runs import (DDP_DATA, DDP_TRAINER, METHODS, assert_same_checkpoints, last_checkpoint,
                       method_config, per_epoch, run_folder, sync_check_args)

STEPS_PER_EPOCH = 3
PIECES = "[1,2]"  # epoch 0 is piece 0; epochs 1-2 are piece 1 (the boundary at epoch 1)


def refining_args(marker_dir: Path) -> list[str]:
    """SelfRefining on the command line, and the boundary check writing into ``marker_dir``."""
    return ["--trainer.callbacks+=ncl.callbacks.SelfRefining",  # the README's spelling
            f"--trainer.callbacks.pieces={PIECES}",
            "--trainer.callbacks+=refining_helpers.BoundaryCheck",
            "--trainer.callbacks.starts=[0,1]", f"--trainer.callbacks.marker_dir={marker_dir}"]


def refining_state(checkpoint: dict) -> dict:
    return checkpoint["callbacks"]["SelfRefining"]


def test_rcl_reinitialises_and_resumes_exactly(tmp_path: Path, synthetic_cache: Path) -> None:
    def config(root: Path) -> Path:
        return method_config(root, synthetic_cache, METHODS["rcl"], max_epochs=3,
                             steps=STEPS_PER_EPOCH, trainer={"limit_val_batches": 1})

    straight_cfg = config(tmp_path / "straight")
    main(["fit", "--config", str(straight_cfg), *refining_args(tmp_path / "straight")])
    assert (tmp_path / "straight" / "boundary_ok").read_text() == "1\n"
    straight = last_checkpoint(run_folder(tmp_path / "straight"))
    assert straight["epoch"] == 2 and refining_state(straight) == {"initialised_piece": 1}
    assert straight["lr_schedulers"][0]["lr_lambdas"] == [None]  # nothing of the method pickled

    # killed in epoch 1 (resumed from epoch 0's checkpoint: the resumed run re-initialises at
    # the boundary) and in epoch 2 (resumed inside piece 1, after its re-initialisation)
    rsum = per_epoch(run_folder(tmp_path / "straight"), "val/rsum")
    for name, step, checked in (("across_boundary", STEPS_PER_EPOCH + 1, "1\n1\n"),
                                ("inside_piece", 2 * STEPS_PER_EPOCH + 1, "1\n")):
        root = tmp_path / name
        killed_cfg, args = config(root), refining_args(root)
        killed = fit_killed_at(killed_cfg, step, args)
        assert killed.returncode == -9, killed.stderr[-2000:]
        main(["fit", "--config", str(killed_cfg), "--ckpt_path", "last", *args])
        assert (root / "boundary_ok").read_text() == checked  # killed run, then resumed one
        resumed = last_checkpoint(run_folder(root))
        assert_same_checkpoints(straight, resumed)  # bit-identical weights
        assert refining_state(resumed) == refining_state(straight)
        assert per_epoch(run_folder(root), "val/rsum") == rsum


def test_infonce_two_cpu_processes_cross_the_boundary_in_sync(
        tmp_path: Path, synthetic_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    config = method_config(tmp_path, synthetic_cache, METHODS["infonce_clean"], max_epochs=2,
                           steps=2, trainer={**DDP_TRAINER, "limit_train_batches": 2},
                           data={**DDP_DATA, "eval_batch_size": 64})
    main(["fit", "--config", str(config), *refining_args(tmp_path), *sync_check_args(tmp_path)])
    assert (tmp_path / "sync_ok_world2").read_text() == "1"  # weights equal on both ranks
    assert (tmp_path / "boundary_ok").read_text() == "1\n"
    assert refining_state(last_checkpoint(run_folder(tmp_path))) == {"initialised_piece": 1}
