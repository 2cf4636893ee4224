"""CRCL through the real CLI on tiny synthetic data: fit and test, the last-piece selection,
kill -9 and resume equal to an uninterrupted run (inside a piece and just after a piece
boundary), and two CPU processes (DDP on gloo) with identical labels on both ranks and every
sample counted once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ncl.cli import main
from resume_helpers import fit_killed_at
from tiny_runs import (DDP_DATA, DDP_TRAINER, assert_counted_once, assert_same_checkpoints,
                       last_checkpoint, per_epoch, run_folder, save_config, sync_check_args,
                       tiny_trainer)

BACKBONE = {"module_name": "SAF", "img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16,
            "sim_dim": 8, "add_mask_token": True, "similarity_strategy": "chunked"}  # dropout on
STEPS_PER_EPOCH = 4


def write_config(root: Path, cache: Path, model: dict | None = None, trainer: dict | None = None,
                 augment: bool = True, data: dict | None = None) -> Path:
    """A tiny CRCL config: pieces [2, 2] (4 epochs), e_f = 1, the configs' two checkpoints."""
    data = {"preset": "tiny", "cache_dir": str(cache), "batch_size": 16, "eval_batch_size": 64,
            "noise_type": "caption", "noise_ratio": 0.4, **(data or {})}
    if augment:
        data["augment"] = {"class_path": "ncl.data.augment.CaptionRegionAugment"}
    cfg = {
        "seed_everything": 0,
        "trainer": tiny_trainer(root, 4, STEPS_PER_EPOCH, "val/rsum_selected", **(trainer or {})),
        "model": {"class_path": "ncl.methods.crcl.CRCL",
                  "init_args": {"backbone": {"class_path": "ncl.models.sgraf.SGRAF",
                                             "init_args": BACKBONE},
                                "optimizer": {"class_path": "torch.optim.AdamW",
                                              "init_args": {"lr": 2e-3, "weight_decay": 0.01}},
                                "pieces": [2, 2], "freeze_epochs": 1, "lr_update": 1, **(model or {})}},
        "data": {"class_path": "ncl.data.datamodule.SyntheticDataModule", "init_args": data},
    }
    return save_config(root, cfg)


def last(folder: Path) -> dict:
    return last_checkpoint(folder)


def initialised_piece(checkpoint: dict) -> int:
    """The last piece SelfRefining re-initialised, from its state in ``checkpoint``."""
    return checkpoint["callbacks"]["SelfRefining"]["initialised_piece"]


def test_fit_select_last_piece_and_test(tmp_path: Path, synthetic_cache: Path) -> None:
    config = write_config(tmp_path, synthetic_cache, {"selection": "last_piece"})
    main(["fit", "--config", str(config)])
    folder = run_folder(tmp_path)
    rsum, selected = per_epoch(folder, "val/rsum"), per_epoch(folder, "val/rsum_selected")
    # epoch 0 is piece 0's frozen epoch (e_f = 1): warm-up, validated, never selected
    assert sorted(rsum) == [0, 1, 2, 3]
    assert selected == {0: -1.0, 1: -1.0, 2: rsum[2], 3: rsum[3]}  # only the last piece competes
    best = list((folder / "checkpoints").glob("best-*.ckpt"))
    assert len(best) == 1 and best[0].name in ("best-epoch=2.ckpt", "best-epoch=3.ckpt")
    assert per_epoch(folder, "crcl/piece") == {0: 0.0, 1: 0.0, 2: 1.0, 3: 1.0}
    for key in ("labels/noisy_f1", "labels/clean/mean", "labels/noisy/hist00", "labels/flips"):
        assert per_epoch(folder, key), key  # diagnostics from the synthetic ground truth
    state = last(folder)["ncl_training_state"]
    assert state["labels"]["values"].shape == (1, 300) and initialised_piece(last(folder)) == 1
    assert bool((state["labels"]["values"] < 1).any())

    main(["test", "--config", str(config), "--ckpt_path", "best"])
    results = json.loads(next(tmp_path.rglob("test_results.json")).read_text())
    assert set(results) == {"net", "training_noise"}  # the system, and the noise it trained on


# (kill after this optimiser step, rule): step 6 is inside piece 0 (its 2nd epoch, resumed
# from epoch 0's checkpoint; the per-step label writes); step 10 is in the first epoch of
# piece 1, just after the boundary (resumed from the checkpoint of piece 0's last epoch, so the
# resumed run re-initialises the network itself; the paper rule's per-epoch labels). The
# re-initialisation alone across a resume: tests/cli/test_self_refining_cli.py.
CASES = {"inside_piece": (STEPS_PER_EPOCH + 2, "official"),
         "after_boundary_paper": (2 * STEPS_PER_EPOCH + 2, "paper")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_kill_and_resume_equals_uninterrupted(tmp_path: Path, synthetic_cache: Path, case: str) -> None:
    step, rule = CASES[case]
    straight_cfg = write_config(tmp_path / "straight", synthetic_cache, {"rule": rule})
    main(["fit", "--config", str(straight_cfg)])
    straight = run_folder(tmp_path / "straight")

    killed_cfg = write_config(tmp_path / "killed", synthetic_cache, {"rule": rule})
    killed = fit_killed_at(killed_cfg, tmp_path, step)
    assert killed.returncode == -9, killed.stderr[-2000:]
    folder = run_folder(tmp_path / "killed")
    assert last(folder)["epoch"] == step // STEPS_PER_EPOCH - 1
    main(["fit", "--config", str(killed_cfg), "--ckpt_path", "last"])
    assert run_folder(tmp_path / "killed") == folder

    assert per_epoch(folder, "val/rsum") == per_epoch(straight, "val/rsum")
    assert per_epoch(folder, "val/rsum_selected") == per_epoch(straight, "val/rsum_selected")
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1, 2, 3]
    assert per_epoch(folder, "val/rsum_selected")[0] == -1.0  # epoch 0: piece 0's warm-up
    a, b = last(straight), last(folder)
    assert a["epoch"] == 3
    assert_same_checkpoints(a, b)  # weights, labels, label epoch
    assert initialised_piece(a) == initialised_piece(b) == 1
    assert a["ncl_training_state"]["label_epoch"] == (3 if rule == "paper" else -1)
    assert per_epoch(folder, "labels/all/mean") == per_epoch(straight, "labels/all/mean")


def test_two_cpu_processes_fit_resume_test(tmp_path: Path, synthetic_cache: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """DDP (ddp_fork, gloo): the per-step label writes and the re-initialisation keep the
    ranks identical; validation counts every sample once although the sizes are odd (padded
    shards); checkpoint, resume and test. Then the paper rule, whose eval pass is sharded
    over the ranks and gathered by index."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    config = write_config(tmp_path / "official", synthetic_cache, trainer=DDP_TRAINER, data=DDP_DATA)
    sync, marker = sync_check_args(tmp_path), tmp_path / "sync_ok_world2"
    main(["fit", "--config", str(config), "--trainer.max_epochs=3", *sync])  # crosses the boundary
    assert marker.read_text() == "2"
    folder = run_folder(tmp_path / "official")
    state = last(folder)["ncl_training_state"]
    assert initialised_piece(last(folder)) == 1 and bool((state["labels"]["values"] < 1).any())
    main(["fit", "--config", str(config), "--ckpt_path=last", *sync])
    assert marker.read_text() == "3" and last(folder)["epoch"] == 3
    assert_counted_once(config, folder, tmp_path / "official")
    main(["test", "--config", str(config), "--trainer.devices=1", "--trainer.strategy=auto",
          "--ckpt_path=best"])
    assert list((tmp_path / "official").rglob("test_results.json"))

    paper = write_config(tmp_path / "paper", synthetic_cache, {"rule": "paper"}, DDP_TRAINER,
                         augment=False, data=DDP_DATA)
    main(["fit", "--config", str(paper), "--trainer.max_epochs=2", *sync])
    assert marker.read_text() == "1"
    state = last(run_folder(tmp_path / "paper"))["ncl_training_state"]
    assert state["label_epoch"] == 1 and bool((state["labels"]["values"] < 1).all())
    assert state["labels"]["values"].shape == (1, 5 * DDP_DATA["n_train"])


def test_more_epochs_than_pieces_is_one_clear_error(tmp_path: Path, synthetic_cache: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    config = write_config(tmp_path, synthetic_cache, augment=False)
    with pytest.raises(SystemExit) as stop:
        main(["fit", "--config", str(config), "--trainer.max_epochs=5"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "trainer.max_epochs (5)" in err and "model.pieces [2, 2]" in err
