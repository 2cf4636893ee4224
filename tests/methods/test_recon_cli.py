"""ReCon through the real CLI on tiny synthetic data: fit and test with the division logged,
resume equal to an uninterrupted run (from a checkpoint that holds the next epoch's division,
and from one that does not), and two CPU processes (DDP on gloo) with identical divisions and
pseudo-labels on both ranks."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import pytest
import torch

from ncl.cli import main
from tiny_runs import last_checkpoint, per_epoch, run_folder, save_config, tiny_trainer
from ncl.data.datamodule import SyntheticDataModule

BACKBONE = {"module_name": "SAF", "img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16,
            "sim_dim": 8, "add_mask_token": True, "similarity_strategy": "chunked"}  # dropout on
STEPS_PER_EPOCH = 4


def write_config(root: Path, cache: Path, model: dict | None = None,
                 trainer: dict | None = None) -> Path:
    """A tiny ReCon config: one warm-up epoch, then two epochs on divisions; augmentation on."""
    data = {"preset": "tiny", "cache_dir": str(cache), "batch_size": 16, "eval_batch_size": 64,
            "noise_type": "caption", "noise_ratio": 0.4,
            "augment": {"class_path": "ncl.data.augment.CaptionRegionAugment"}}
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
    assert set(results) == {"net"}


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
# resumed run makes epoch 2's division itself, from the same weights.
FIRST_RUN = {"stopped": ["--trainer.callbacks+=methods.test_recon_cli.StopAfterEpoch",
                         "--trainer.callbacks.epoch=1"],
             "extended": ["--trainer.max_epochs=2"]}


@pytest.mark.parametrize("how", sorted(FIRST_RUN))
def test_resume_equals_uninterrupted(tmp_path: Path, synthetic_cache: Path, how: str) -> None:
    straight_cfg = write_config(tmp_path / "straight", synthetic_cache)
    main(["fit", "--config", str(straight_cfg)])
    straight = run_folder(tmp_path / "straight")

    resumed_cfg = write_config(tmp_path / "resumed", synthetic_cache)
    main(["fit", "--config", str(resumed_cfg), *FIRST_RUN[how]])
    folder = run_folder(tmp_path / "resumed")
    first = last(folder)
    assert first["epoch"] == 1
    carried = first["ncl_training_state"]["division"]["epoch"]
    assert carried == (2 if how == "stopped" else 1)
    main(["fit", "--config", str(resumed_cfg), "--ckpt_path", "last"])
    assert run_folder(tmp_path / "resumed") == folder

    assert per_epoch(folder, "val/rsum") == per_epoch(straight, "val/rsum")
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1, 2]
    assert per_epoch(folder, "division/noisy") == per_epoch(straight, "division/noisy")
    a, b = last(straight), last(folder)
    assert a["epoch"] == b["epoch"] == 2
    for key, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][key]), key
    sa, sb = a["ncl_training_state"], b["ncl_training_state"]
    for key, value in sa["division"].items():
        other = sb["division"][key]
        assert (value == other) if key == "epoch" else torch.equal(value, other), key
    assert torch.equal(sa["pseudo_labels"]["values"], sb["pseudo_labels"]["values"])


class DivisionSyncCheck(L.Callback):
    """DDP tests: after every epoch every rank must hold the same division, pseudo-labels and
    weights; rank 0 leaves a marker file.

    Args:
        marker_dir: folder of the ``division_ok_world<W>`` marker.
    """

    def __init__(self, marker_dir: str = ".") -> None:
        self.marker_dir = marker_dir

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        module = pl_module
        tensors = {"pseudo": module.pseudo_labels.values[0],  # type: ignore[attr-defined]
                   "weights": torch.cat([p.detach().reshape(-1) for p in module.nets.parameters()])}
        division = module.division  # type: ignore[attr-defined]
        if division is not None:
            tensors.update(subset=division.subset.float(), labels=division.labels,
                           clean_prob=division.clean_prob, im_loss=division.im_loss)
        for name, local in tensors.items():
            gathered = pl_module.all_gather(local).reshape(trainer.world_size, -1)
            if not all(torch.equal(gathered[0], row) for row in gathered):
                raise AssertionError(f"the ranks' {name} diverged at epoch {trainer.current_epoch}")
        if trainer.is_global_zero:
            Path(self.marker_dir, f"division_ok_world{trainer.world_size}").write_text(
                str(trainer.current_epoch))


def test_two_cpu_processes_fit_resume_test(tmp_path: Path, synthetic_cache: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """DDP (ddp_spawn, gloo): the division pass is sharded over the ranks and gathered by
    index, the GMM fit broadcast from rank 0; checkpoint, resume and test."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    trainer = {"devices": 2, "strategy": "ddp_spawn", "limit_train_batches": 3}
    config = write_config(tmp_path, synthetic_cache, trainer=trainer)
    sync = ["--trainer.callbacks+=methods.test_recon_cli.DivisionSyncCheck",
            f"--trainer.callbacks.marker_dir={tmp_path}"]
    marker = tmp_path / "division_ok_world2"
    main(["fit", "--config", str(config), "--trainer.max_epochs=2", *sync])
    assert marker.read_text() == "1"
    folder = run_folder(tmp_path)
    assert last(folder)["ncl_training_state"]["division"]["epoch"] == 1
    main(["fit", "--config", str(config), "--ckpt_path=last", *sync])
    assert marker.read_text() == "2" and last(folder)["epoch"] == 2
    state = last(folder)["ncl_training_state"]
    assert state["division"]["epoch"] == 2 and state["pseudo_labels"]["values"].shape == (1, 300)
    assert sorted(per_epoch(folder, "division/clean")) == [1, 2]
    main(["test", "--config", str(config), "--trainer.devices=1", "--trainer.strategy=auto",
          "--ckpt_path=best"])
    assert list(tmp_path.rglob("test_results.json"))
