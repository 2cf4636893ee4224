"""The tiny stand-in for a shipped config (tests/cli/test_configs.py, test_bf16.py): a second
``--config`` with synthetic tiny data, small backbone dimensions and one short epoch, as a user
would override them."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import yaml

from ncl.compose import merged

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))
TINY_BACKBONE = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8}


def tiny_override(tmp_path: Path, cache: Path, config: Path) -> Path:
    """A second config: synthetic tiny data, small dims, short epochs, outputs in tmp_path."""
    original = merged(config)
    data_args = {"preset": "tiny", "n_train": None, "cache_dir": str(cache), "batch_size": 16,
                 "eval_batch_size": 32}
    for key in ("noise_type", "noise_ratio", "noise_seed"):
        if key in original["data"].get("init_args", {}):
            data_args[key] = original["data"]["init_args"][key]
    # An official noise file fits the official split sizes only: the tiny data draws the same
    # kind of noise (noise_type/ratio/seed above) instead of reading it.
    data_args["noise_file"] = None
    backbone_args = TINY_BACKBONE
    backbone_path = original["model"].get("init_args", {}).get("backbone", {}).get("class_path", "")
    data_class = "ncl.data.datamodule.SyntheticDataModule"
    # a DataModule with more than the splits (MSCN's meta split) names its synthetic twin
    twin = tiny_counterpart(original["data"].get("class_path", ""))
    if twin is not None:
        data_class, extra = twin
        data_args.update(extra)
    if backbone_path:  # only the sizes the backbone takes (VSE-infinity: no regions, no head)
        backbone_args = {k: v for k, v in TINY_BACKBONE.items() if k in init_parameters(backbone_path)}
    if backbone_path.endswith("GatedVideoText"):  # video: tiny synthetic clips of 2 experts
        backbone_args = {"img_dim": 12, "num_regions": 2, "word_dim": 8, "text_dim": 16,
                         "embed_size": 16}
        data_class = "ncl.data.video.VideoSyntheticDataModule"
        data_args = {k: v for k, v in data_args.items() if k != "n_train"}
    override = {
        "data": {"class_path": data_class, "init_args": data_args},
        "model": {"init_args": {"backbone": {"init_args": backbone_args}}},
        "trainer": {"max_epochs": 1, "limit_train_batches": 2, "accelerator": "cpu",
                    "default_root_dir": str(tmp_path / "root"), "enable_progress_bar": False},
    }
    path = tmp_path / "tiny_override.yaml"
    path.write_text(yaml.safe_dump(override))
    return path


def tiny_counterpart(class_path: str) -> tuple[str, dict] | None:
    """The synthetic DataModule (class path, extra ``init_args``) a config's DataModule class
    declares for tiny test data (``TINY_COUNTERPART``), or ``None``: plain synthetic data."""
    module, _, name = class_path.rpartition(".")
    if not module:
        return None
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return getattr(cls, "TINY_COUNTERPART", None)


def init_parameters(class_path: str) -> set[str]:
    """The ``__init__`` parameter names of the class at ``class_path`` (``ncl.models.sgraf.SGRAF``):
    which of :data:`TINY_BACKBONE` a config's backbone takes, without a list of backbone names."""
    module, _, name = class_path.rpartition(".")
    return set(inspect.signature(getattr(importlib.import_module(module), name)).parameters)
