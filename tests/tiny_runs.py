"""Shared pieces of the tests that train tiny synthetic runs through the real CLI: the
trainer section with the configs' two checkpoints, writing the YAML, and reading a run back."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import torch
import yaml

#: A small SAF that trains on the ``tiny`` synthetic preset (6 regions x 16 dims).
TINY_SAF = {"module_name": "SAF", "img_dim": 16, "num_regions": 6, "word_dim": 8,
            "embed_size": 16, "sim_dim": 8}


def tiny_trainer(root: Path, max_epochs: int, steps: int, monitor: str = "val/rsum",
                 **extra: Any) -> dict[str, Any]:
    """CPU, deterministic, ``steps`` batches an epoch, outputs under ``root/runs``; a best
    checkpoint monitoring ``monitor`` and an unmonitored ``last.ckpt``, as the configs have."""
    return {"accelerator": "cpu", "devices": 1, "max_epochs": max_epochs, "deterministic": True,
            "log_every_n_steps": 1, "enable_model_summary": False, "enable_progress_bar": False,
            "limit_train_batches": steps, "default_root_dir": str(root / "runs"),
            "callbacks": [
                {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                 "init_args": {"monitor": monitor, "mode": "max", "filename": "best-{epoch}"}},
                {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                 "init_args": {"filename": "last", "enable_version_counter": False}}],
            **extra}


def save_config(root: Path, cfg: dict[str, Any]) -> Path:
    """Write ``cfg`` as ``root/config.yaml`` and return the path."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_folder(root: Path) -> Path:
    """The one run folder of a run whose ``default_root_dir`` is ``root/runs``."""
    folders = sorted((root / "runs" / "lightning_logs").iterdir())
    assert len(folders) == 1, folders
    return folders[0]


def metric_rows(folder: Path) -> list[dict[str, str]]:
    with open(folder / "metrics.csv") as handle:
        return list(csv.DictReader(handle))


def per_epoch(folder: Path, key: str) -> dict[int, float]:
    """``{epoch: value}`` of ``key``; fails when an epoch was logged twice."""
    rows = [r for r in metric_rows(folder) if r.get(key)]
    epochs = [int(r["epoch"]) for r in rows]
    assert len(epochs) == len(set(epochs)), f"duplicated rows of {key}: {epochs}"
    return {int(r["epoch"]): float(r[key]) for r in rows}


def last_checkpoint(folder: Path) -> dict:
    return torch.load(folder / "checkpoints" / "last.ckpt", weights_only=False)
