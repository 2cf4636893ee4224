"""ReCon through the real CLI on tiny synthetic data: fit and test with the division logged,
resume equal to an uninterrupted run (from a checkpoint that holds the next epoch's division,
from one that does not, and after SIGKILL mid-epoch), and two CPU processes (DDP on gloo)
with identical divisions and pseudo-labels on both ranks and every sample counted once."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import pytest

from ncl.cli import main
from resume_helpers import fit_killed_at
from tiny_runs import (DDP_DATA, DDP_TRAINER, assert_counted_once, assert_same_checkpoints,
                       last_checkpoint, per_epoch, run_folder, save_config, sync_check_args,
                       tiny_trainer)
from ncl.data.datamodule import SyntheticDataModule

BACKBONE = {"module_name": "SAF", "img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16,
            "sim_dim": 8, "add_mask_token": True, "similarity_strategy": "chunked"}  # dropout on
STEPS_PER_EPOCH = 4


def write_config(root: Path, cache: Path, model: dict | None = None,
                 trainer: dict | None = None, data: dict | None = None) -> Path:
    """A tiny ReCon config: one warm-up epoch, then two epochs on divisions; augmentation on."""
    data = {"preset": "tiny", "cache_dir": str(cache), "batch_size": 16, "eval_batch_size": 64,
            "noise_type": "caption", "noise_ratio": 0.4,
            "augment": {"class_path": "ncl.data.augment.CaptionRegionAugment"}, **(data or {})}
    cfg = {
        "seed_everything": 0,
        "trainer": tiny_trainer(root, 3, STEPS_PER_EPOCH, **(trainer or {})),
        "model": {"class_path": "ncl.methods.recon.ReCon",
                  "init_args": {"backbone": {"class_path": "ncl.models.sgraf.SGRAF",
                                             "init_args": BACKBONE},
                                "optimizer": {"class_path": "torch.optim.Adam",
                                              "init_args": {"lr": 2e-3}},
                                "warmup_epochs": 1, **(model or {})}},
        "data": {"class_path": "ncl.data.datamodule.SyntheticDataModule", "init_args": data},
    }
    return save_config(root, cfg)


def last(folder: Path) -> dict:
    return last_checkpoint(folder)


def test_fit_logs_the_division_and_tests(tmp_path: Path, synthetic_cache: Path) -> None:
    config = write_config(tmp_path, synthetic_cache)
    main(["fit", "--config", str(config)])
    folder = run_folder(tmp_path)
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1, 2]
    sizes = {name: per_epoch(folder, f"division/{name}") for name in ("clean", "local", "noisy")}
    assert all(sorted(s) == [1, 2] for s in sizes.values())  # no division in the warm-up epoch
    dm = SyntheticDataModule(preset="tiny", cache_dir=str(synthetic_cache), noise_type="caption",
                             noise_ratio=0.4)
    dm.setup("fit")
    noisy = int((~dm.clean_mask).sum())  # shuffled captions that left their image
    assert 100 < noisy <= 120
    for epoch in (1, 2):
        assert sum(s[epoch] for s in sizes.values()) == 300  # every training pair, once
        truly = sum(per_epoch(folder, f"division/{n}_true_noisy")[epoch] for n in sizes)
        assert truly == noisy
    assert per_epoch(folder, "division/made_for_epoch") == {1: 1.0, 2: 2.0}
    assert per_epoch(folder, "train/warmup_triplet_epoch").keys() == {0}
    assert per_epoch(folder, "train/cross_modal_epoch").keys() == {1, 2}
    state = last(folder)["ncl_training_state"]
    assert state["division"]["epoch"] == 2 and state["division"]["subset"].shape == (300,)
    assert state["pseudo_labels"]["values"].shape == (1, 300)

    main(["test", "--config", str(config), "--ckpt_path", "best"])
    results = json.loads(next(tmp_path.rglob("test_results.json")).read_text())
    assert set(results) == {"net", "training_noise"}  # the system, and the noise it trained on


class StopAfterEpoch(L.Callback):
    """End the run cleanly after epoch ``epoch`` although ``max_epochs`` is larger: the last
    checkpoint then holds the next epoch's division, as after a pre-empted job's last epoch."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch >= self.epoch:
            trainer.should_stop = True


# "stopped": the first run ends after epoch 1 with max_epochs 3, so its checkpoint carries
# epoch 2's division; "extended": the first run has max_epochs 2 (fit 2 + resume 1), so the
# resumed run makes epoch 2's division itself, from the same weights; "killed": SIGKILL in the
# middle of epoch 2 (no teardown), resumed from epoch 1's checkpoint.
FIRST_RUN = {"stopped": ["--trainer.callbacks+=methods.test_recon_cli.StopAfterEpoch",
                         "--trainer.callbacks.epoch=1"],
             "extended": ["--trainer.max_epochs=2"],
             "killed": None}


@pytest.mark.parametrize("how", sorted(FIRST_RUN))
def test_resume_equals_uninterrupted(tmp_path: Path, synthetic_cache: Path, how: str) -> None:
    straight_cfg = write_config(tmp_path / "straight", synthetic_cache)
    main(["fit", "--config", str(straight_cfg)])
    straight = run_folder(tmp_path / "straight")

    resumed_cfg = write_config(tmp_path / "resumed", synthetic_cache)
    if FIRST_RUN[how] is None:
        killed = fit_killed_at(resumed_cfg, tmp_path, 2 * STEPS_PER_EPOCH + 2)
        assert killed.returncode == -9, killed.stderr[-2000:]
    else:
        main(["fit", "--config", str(resumed_cfg), *FIRST_RUN[how]])
    folder = run_folder(tmp_path / "resumed")
    first = last(folder)
    assert first["epoch"] == 1
    carried = first["ncl_training_state"]["division"]["epoch"]
    assert carried == (1 if how == "extended" else 2)
    main(["fit", "--config", str(resumed_cfg), "--ckpt_path", "last"])
    assert run_folder(tmp_path / "resumed") == folder

    assert per_epoch(folder, "val/rsum") == per_epoch(straight, "val/rsum")
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1, 2]
    assert per_epoch(folder, "division/noisy") == per_epoch(straight, "division/noisy")
    a, b = last(straight), last(folder)
    assert a["epoch"] == 2
    assert_same_checkpoints(a, b)  # weights, division, pseudo-labels


def test_two_cpu_processes_fit_resume_test(tmp_path: Path, synthetic_cache: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """DDP (ddp_fork, gloo): the division pass is sharded over the ranks and gathered by
    index, the GMM fit broadcast from rank 0, so every rank holds the same division and
    pseudo-labels; every pair is divided once and validation counts every sample once
    although the sizes are odd (padded shards); checkpoint, resume and test."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    config = write_config(tmp_path, synthetic_cache, trainer=DDP_TRAINER, data=DDP_DATA)
    sync, marker = sync_check_args(tmp_path), tmp_path / "sync_ok_world2"
    main(["fit", "--config", str(config), "--trainer.max_epochs=2", *sync])
    assert marker.read_text() == "1"
    folder = run_folder(tmp_path)
    assert last(folder)["ncl_training_state"]["division"]["epoch"] == 1
    main(["fit", "--config", str(config), "--ckpt_path=last", *sync])
    assert marker.read_text() == "2" and last(folder)["epoch"] == 2
    state = last(folder)["ncl_training_state"]
    pairs = 5 * DDP_DATA["n_train"]
    assert state["division"]["epoch"] == 2 and state["pseudo_labels"]["values"].shape == (1, pairs)
    sizes = [per_epoch(folder, f"division/{name}") for name in ("clean", "local", "noisy")]
    assert all(sum(s[epoch] for s in sizes) == pairs for epoch in (1, 2))  # each pair once
    assert_counted_once(config, folder, tmp_path)
    main(["test", "--config", str(config), "--trainer.devices=1", "--trainer.strategy=auto",
          "--ckpt_path=best"])
    assert list(tmp_path.rglob("test_results.json"))
