"""Model selection keeps warm-up epochs out of the best checkpoint (NCR/LNC here; CRCL's
``selection`` in tests/methods/test_crcl_cli.py), through the real CLI on tiny synthetic data.

The official NCR code validates after its warm-up but keeps the best checkpoint among the
co-training epochs only (spec 4.2.3, 5.5). Every epoch logs ``val/rsum`` (and ``val_<net>/*``);
``val/rsum_selected``, which the best checkpoint monitors, is the rSum of a selectable epoch
and -1 for an excluded one (``select_warmup: false``), so a warm-up epoch never outranks a
co-training one.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ncl.cli import main
from ncl.errors import NclWarning
from ncl.evaluation.selection import UNSELECTED_RSUM, check_selection_monitor
from tiny_runs import metric_rows, per_epoch, run_folder, save_config

BACKBONE = {"module_name": "SAF", "img_dim": 16, "num_regions": 6, "word_dim": 8,
            "embed_size": 16, "sim_dim": 8, "dropout": 0.0, "similarity_strategy": "chunked"}


def write_config(root: Path, cache: Path, select_warmup: bool, max_epochs: int, top_k: int) -> Path:
    """Tiny NCR, 2 warm-up epochs; the best ``top_k`` epochs by ``val/rsum_selected`` are kept."""
    cfg = {
        "seed_everything": 0,
        "trainer": {"accelerator": "cpu", "devices": 1, "max_epochs": max_epochs, "logger": True,
                    "log_every_n_steps": 1, "enable_model_summary": False,
                    "enable_progress_bar": False, "limit_train_batches": 4,
                    "default_root_dir": str(root / "runs"),
                    "callbacks": [
                        {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                         "init_args": {"monitor": "val/rsum_selected", "mode": "max",
                                       "save_top_k": top_k, "filename": "best-{epoch}"}},
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


def best_files(folder: Path) -> list[str]:
    return sorted(p.name for p in (folder / "checkpoints").glob("best-*.ckpt"))


def best_state(folder: Path) -> dict:
    """The state of the checkpoint callback that monitors ``val/rsum_selected``."""
    last = torch.load(folder / "checkpoints" / "last.ckpt", weights_only=False)
    return next(v for k, v in last["callbacks"].items() if "val/rsum_selected" in k)


def test_warmup_epochs_are_never_selected(tmp_path: Path, synthetic_cache: Path) -> None:
    """Two slots for the best: they go to the two co-training epochs, whatever the warm-up's
    rSum, while every epoch's validation is logged under the same keys."""
    main(["fit", "--config", str(write_config(tmp_path, synthetic_cache, False, 4, top_k=2))])
    folder = run_folder(tmp_path)
    rsum, selected = per_epoch(folder, "val/rsum"), per_epoch(folder, "val/rsum_selected")
    assert sorted(rsum) == sorted(per_epoch(folder, "val_A/rsum")) == [0, 1, 2, 3]
    assert selected == {0: UNSELECTED_RSUM, 1: UNSELECTED_RSUM, 2: rsum[2], 3: rsum[3]}
    assert not any(k.startswith("val_warmup") for k in metric_rows(folder)[0])  # one set of keys
    assert best_files(folder) == ["best-epoch=2.ckpt", "best-epoch=3.ckpt"]
    state = best_state(folder)
    assert Path(state["best_model_path"]).name in ("best-epoch=2.ckpt", "best-epoch=3.ckpt")
    assert float(state["best_model_score"]) == max(rsum[2], rsum[3])


def test_warmup_only_run_has_no_selectable_epoch(tmp_path: Path, synthetic_cache: Path) -> None:
    """A run that ends inside the warm-up: val/rsum is logged, val/rsum_selected is -1 (its
    best checkpoint scores below any epoch that may be selected), no error."""
    main(["fit", "--config", str(write_config(tmp_path, synthetic_cache, False, 1, top_k=1))])
    folder = run_folder(tmp_path)
    assert sorted(per_epoch(folder, "val/rsum")) == [0]
    assert per_epoch(folder, "val/rsum_selected") == {0: UNSELECTED_RSUM}
    assert float(best_state(folder)["best_model_score"]) == UNSELECTED_RSUM


def test_select_warmup_true_selects_among_all_epochs(tmp_path: Path, synthetic_cache: Path) -> None:
    main(["fit", "--config", str(write_config(tmp_path, synthetic_cache, True, 3, top_k=-1))])
    folder = run_folder(tmp_path)
    rsum = per_epoch(folder, "val/rsum")
    assert sorted(rsum) == [0, 1, 2] and per_epoch(folder, "val/rsum_selected") == rsum
    assert len(best_files(folder)) == 3


def _trainer(monitor: str, max_epochs: int = 4) -> SimpleNamespace:
    return SimpleNamespace(max_epochs=max_epochs,
                           checkpoint_callbacks=[SimpleNamespace(monitor=monitor), SimpleNamespace(monitor=None)])


def test_monitoring_val_rsum_with_excluded_epochs_warns() -> None:
    warmup = lambda epoch: epoch >= 2  # noqa: E731 - epochs 0 and 1 are not selectable
    with pytest.warns(NclWarning, match=r"monitors val/rsum, .* epochs 0, 1 may not be selected"):
        check_selection_monitor(_trainer("val/rsum"), warmup)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_selection_monitor(_trainer("val/rsum_selected"), warmup)  # the configs' key
        check_selection_monitor(_trainer("val/rsum"), lambda epoch: True)  # nothing excluded
        check_selection_monitor(_trainer("val/rsum", max_epochs=-1), warmup)  # no end: no list
