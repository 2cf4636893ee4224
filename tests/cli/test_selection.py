"""Model selection skips warm-up epochs (NCR/LNC; CRCL in tests/methods/test_crcl_cli.py).

The official NCR code validates after its warm-up but keeps the best checkpoint among the
co-training epochs only (spec 4.2.3, 5.5). With ``select_warmup: false`` a warm-up epoch's
validation goes to ``val_warmup/*``; the monitored ``val/rsum`` exists only afterwards, and
Lightning's ModelCheckpoint (which raises when its monitor is missing after a validation) is
told to skip those epochs. Checked through the real CLI on tiny synthetic data.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ncl.cli import main
from tiny_runs import metric_rows, run_folder, save_config

BACKBONE = {"module_name": "SAF", "img_dim": 16, "num_regions": 6, "word_dim": 8,
            "embed_size": 16, "sim_dim": 8, "dropout": 0.0, "similarity_strategy": "chunked"}


def write_config(root: Path, cache: Path, select_warmup: bool, max_epochs: int) -> Path:
    """Tiny NCR, 2 warm-up epochs; every validation epoch that may be selected is kept
    (``save_top_k: -1``), so a warm-up checkpoint would show up as a file."""
    cfg = {
        "seed_everything": 0,
        "trainer": {"accelerator": "cpu", "devices": 1, "max_epochs": max_epochs,
                    "log_every_n_steps": 1, "enable_model_summary": False,
                    "enable_progress_bar": False, "limit_train_batches": 4,
                    "default_root_dir": str(root / "runs"),
                    "callbacks": [
                        {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                         "init_args": {"monitor": "val/rsum", "mode": "max", "save_top_k": -1,
                                       "filename": "best-{epoch}"}},
                        {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                         "init_args": {"filename": "last", "enable_version_counter": False}}]},
        "model": {"class_path": "ncl.methods.ncr.NCR",
                  "init_args": {"backbone": {"class_path": "ncl.models.sgraf.SGRAF", "init_args": BACKBONE},
                                "warmup_epochs": 2, "unlabelled_start": 0,
                                "select_warmup": select_warmup}},
        "data": {"class_path": "ncl.data.datamodule.SyntheticDataModule",
                 "init_args": {"preset": "tiny", "cache_dir": str(cache), "batch_size": 16,
                               "eval_batch_size": 64, "noise_type": "caption", "noise_ratio": 0.2}},
    }
    return save_config(root, cfg)


def epochs_with(folder: Path, key: str) -> list[int]:
    return sorted(int(r["epoch"]) for r in metric_rows(folder) if r.get(key))


def test_warmup_epochs_are_never_selected(tmp_path: Path, synthetic_cache: Path) -> None:
    main(["fit", "--config", str(write_config(tmp_path, synthetic_cache, False, 4))])
    folder = run_folder(tmp_path)
    assert epochs_with(folder, "val_warmup/rsum") == [0, 1]
    assert epochs_with(folder, "val_warmup_A/rsum") == [0, 1]
    assert epochs_with(folder, "val/rsum") == [2, 3]  # the monitored key: co-training only
    assert epochs_with(folder, "val_B/rsum") == [2, 3]
    checkpoints = folder / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("best-*.ckpt")) == [
        "best-epoch=2.ckpt", "best-epoch=3.ckpt"]
    last = torch.load(checkpoints / "last.ckpt", weights_only=False)
    assert last["epoch"] == 3
    best = next(v for k, v in last["callbacks"].items() if "val/rsum" in k)
    assert Path(best["best_model_path"]).name in ("best-epoch=2.ckpt", "best-epoch=3.ckpt")


def test_warmup_only_run_writes_last_but_no_best(tmp_path: Path, synthetic_cache: Path) -> None:
    """A run that ends inside the warm-up: no monitored key at all, no error, last.ckpt only."""
    main(["fit", "--config", str(write_config(tmp_path, synthetic_cache, False, 1))])
    folder = run_folder(tmp_path)
    assert epochs_with(folder, "val/rsum") == [] and epochs_with(folder, "val_warmup/rsum") == [0]
    assert sorted(p.name for p in (folder / "checkpoints").glob("*.ckpt")) == ["last.ckpt"]


def test_select_warmup_true_selects_among_all_epochs(tmp_path: Path, synthetic_cache: Path) -> None:
    main(["fit", "--config", str(write_config(tmp_path, synthetic_cache, True, 3))])
    folder = run_folder(tmp_path)
    assert epochs_with(folder, "val/rsum") == [0, 1, 2] and epochs_with(folder, "val_warmup/rsum") == []
    assert len(list((folder / "checkpoints").glob("best-*.ckpt"))) == 3
