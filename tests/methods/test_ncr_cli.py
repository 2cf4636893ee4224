"""NCR / LNC through the real CLI on tiny synthetic data: fit, checkpoint, exact resume,
test. Two CPU processes (DDP on gloo): tests/cli/test_ddp_methods.py (``ncr`` and ``lnc`` in
``tiny_runs.METHODS``)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import torch
import yaml

from ncl.cli import main

BACKBONE = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8,
            "dropout": 0.0, "similarity_strategy": "chunked"}


def write_config(tmp_path: Path, cache: Path, model: dict, trainer: dict | None = None,
                 data: dict | None = None) -> Path:
    """A tiny NCR config (CSV logger, checkpoint on val/rsum) with ``model`` switches."""
    cfg = {
        "seed_everything": 0,
        "trainer": {"accelerator": "cpu", "devices": 1, "max_epochs": 3, "log_every_n_steps": 1, "logger": True,
                    "enable_model_summary": False, "enable_progress_bar": False,
                    "limit_train_batches": 6, "default_root_dir": str(tmp_path / "runs"),
                    "callbacks": [{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                   # every epoch: Lightning 2.6 refreshes last.ckpt only
                                   # when a top-k checkpoint is written
                                   "init_args": {"monitor": "val/rsum", "mode": "max",
                                                 "save_top_k": -1, "save_last": True}}],
                    **(trainer or {})},
        "model": {"class_path": "ncl.methods.ncr.NCR",
                  "init_args": {"backbone": {"class_path": "ncl.models.sgraf.SGRAF",
                                             "init_args": BACKBONE}, "warmup_epochs": 1, **model}},
        "data": {"class_path": "ncl.data.datamodule.SyntheticDataModule",
                 "init_args": {"preset": "tiny", "cache_dir": str(cache), "batch_size": 16,
                               "eval_batch_size": 64, "noise_type": "caption", "noise_ratio": 0.2,
                               **(data or {})}},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def last_ckpt(root: Path, version: int) -> Path:
    return root / "runs" / "lightning_logs" / f"version_{version}" / "checkpoints" / "last.ckpt"


def metrics(root: Path, version: int) -> list[dict[str, str]]:
    with open(root / "runs" / "lightning_logs" / f"version_{version}" / "metrics.csv") as f:
        return list(csv.DictReader(f))


def test_ncr_fit_resume_exactly_and_test(tmp_path: Path, synthetic_cache: Path) -> None:
    # unlabelled_start fixed: the default (num_epochs // 2) would follow --trainer.max_epochs.
    config = write_config(tmp_path, synthetic_cache, {"unlabelled_start": 1})
    main(["fit", "--config", str(config)])  # version_0: 3 epochs straight
    main(["fit", "--config", str(config), "--trainer.max_epochs=2"])  # version_1
    main(["fit", "--config", str(config), f"--ckpt_path={last_ckpt(tmp_path, 1)}"])  # version_1 again
    assert not last_ckpt(tmp_path, 2).parent.exists()  # a resume continues its run folder
    straight = torch.load(last_ckpt(tmp_path, 0), weights_only=False)
    resumed = torch.load(last_ckpt(tmp_path, 1), weights_only=False)
    assert straight["epoch"] == resumed["epoch"] == 2
    for key, value in straight["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][key]), key
    division = resumed["ncl_training_state"]["division"]
    assert division["epoch"] == 2 and division["prob"].shape == (2, 300)
    assert torch.equal(division["prob"], straight["ncl_training_state"]["division"]["prob"])

    rows = metrics(tmp_path, 0)
    for net in "AB":  # the batch limit is shared by A and B, both train every epoch
        assert [r["epoch"] for r in rows if r.get(f"train/{net}/warmup_triplet_epoch")] == ["0"]
        assert [r["epoch"] for r in rows if r.get(f"train/{net}/loss_labelled_epoch")] == ["1", "2"]
    assert [r["epoch"] for r in rows if r.get("train/A/loss_unlabelled_epoch")] == ["2"]
    assert any(r.get("division/A/f1") for r in rows) and any(r.get("val_B/rsum") for r in rows)

    main(["test", "--config", str(config), f"--ckpt_path={last_ckpt(tmp_path, 1)}"])
    results = json.loads(next(tmp_path.rglob("test_results.json")).read_text())
    assert {"A", "B", "A+B"} <= set(results)


def test_lnc_switches_fit(tmp_path: Path, synthetic_cache: Path) -> None:
    """LNC (MR + RNA) with the other fidelity switches flipped."""
    config = write_config(tmp_path, synthetic_cache, {
        "warmup_epochs": 2, "momentum_regularization": True, "noise_abandon": True,
        "ncr_margin_mode": "official_2023", "soft_margin": "sigmoid", "unlabelled_start": 0,
        "unlabelled_update": "summed", "prediction_form": "linear"})
    main(["fit", "--config", str(config)])
    ckpt = torch.load(last_ckpt(tmp_path, 0), weights_only=False)
    gamma = ckpt["ncl_training_state"]["momentum_targets"]["values"]
    assert gamma.shape == (2, 300) and bool((gamma < 1).any(dim=1).all())
    rows = metrics(tmp_path, 0)
    assert [r["epoch"] for r in rows if r.get("division/abandoned")] == ["1"]
    assert any(r.get("train/B/loss_unlabelled_step") for r in rows)
    # the Figures callback (added to every fit) draws the abandon draw and the co-divide
    assert sorted(p.name for p in tmp_path.rglob("loss_gmm_epoch*.png")) == [
        "loss_gmm_epoch001.png", "loss_gmm_epoch002.png"]
