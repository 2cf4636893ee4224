"""DECL through the real CLI on tiny synthetic data: fit with the per-epoch correspondence
prediction logged against the ground truth, test; a short last batch skipped and counted;
two CPU processes (DDP on gloo) predict the table one process computes from the same weights.
Kill-and-resume equal to an uninterrupted run, two processes holding the same state with every
sample counted once, and bf16: tests/cli/test_resume.py, tests/cli/test_ddp_methods.py and
tests/cli/test_bf16.py (``decl`` in tiny_runs.METHODS)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import torch
from tiny_runs import (
    DDP_DATA,
    DDP_TRAINER,
    METHODS,
    TINY_SGRAF,
    last_checkpoint,
    method_config,
    per_epoch,
    run_folder,
    sync_check_args,
)

from ncl.cli import main
from ncl.data.datamodule import SyntheticDataModule
from ncl.methods.decl import DECL, MATCHED_EVIDENCE, PRED_CLEAN, U_I2T, U_T2I
from ncl.methods.pretrained import Pretrained
from ncl.models.sgraf import SGRAF
from ncl.training.passes import run_pass


def decl_config(root: Path, cache: Path, epochs: int = 3, steps: int = 4, **kwargs) -> Path:
    return method_config(root, cache, METHODS["decl"], max_epochs=epochs, steps=steps, **kwargs)


def test_fit_logs_the_prediction_and_tests(tmp_path: Path, synthetic_cache: Path) -> None:
    config = decl_config(tmp_path, synthetic_cache)
    main(["fit", "--config", str(config)])
    folder = run_folder(tmp_path)
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1, 2]
    # the prediction exists from the first epoch after the warm-up on, with P/R/F1
    for key in ("decl/predicted_clean", "decl/f1", "decl/precision", "decl/recall",
                "decl/uncertainty_true_clean", "decl/uncertainty_true_noisy"):
        assert sorted(per_epoch(folder, key)) == [1, 2], key
    assert sorted(per_epoch(folder, "train/edl_epoch")) == [0, 1, 2]
    hardness = per_epoch(folder, "train/hardness_epoch")
    assert hardness[0] > hardness[2] >= 3  # k shrinks towards mu
    state = last_checkpoint(folder)["ncl_training_state"]
    assert state["steps"] == 12 and state["main_steps"] == 8
    assert state["prediction_epoch"] == 2 and state["predictions"]["values"].shape == (4, 300)
    table = state["predictions"]["values"]
    assert set(table[PRED_CLEAN].unique().tolist()) <= {0.0, 1.0}
    assert bool(((table[1] > 0) & (table[1] <= 1)).all())  # u_i2t = K / sum(alpha) in (0, 1]
    # a pair is predicted clean when N_ii is its row's maximum, so N_ii >= 1 / B (B <= 16)
    assert bool((table[MATCHED_EVIDENCE][table[PRED_CLEAN] > 0.5] >= 1 / 16).all())
    # epoch 2's logged prediction is the saved table's (the epoch it trained with), recounted
    # here against the ground truth (positives: noisy)
    pred_clean = [float(v) > 0.5 for v in table[PRED_CLEAN]]
    data = SyntheticDataModule(preset="tiny", cache_dir=str(synthetic_cache), batch_size=16,
                               noise_type="image", noise_ratio=0.4)
    data.setup("fit")
    truth = [bool(v) for v in data.clean_mask]
    tp = sum(not p and not t for p, t in zip(pred_clean, truth))
    fp = sum(not p and t for p, t in zip(pred_clean, truth))
    fn = sum(p and not t for p, t in zip(pred_clean, truth))
    uncertainty = (table[U_I2T] + table[U_T2I]).tolist()  # logged as their sum
    logged = {key: per_epoch(folder, f"decl/{key}")[2] for key in (
        "predicted_clean", "precision", "recall", "f1", "uncertainty_true_clean", "uncertainty_true_noisy")}
    assert logged["predicted_clean"] == sum(pred_clean)
    assert 0 < tp and 0 < sum(pred_clean)  # a division that both finds noise and keeps pairs
    want = {"precision": tp / (tp + fp), "recall": tp / (tp + fn), "f1": 2 * tp / (2 * tp + fp + fn),
            "uncertainty_true_clean": sum(u for u, t in zip(uncertainty, truth) if t) / sum(truth),
            "uncertainty_true_noisy": sum(u for u, t in zip(uncertainty, truth) if not t) / truth.count(False)}
    for key, value in want.items():
        assert logged[key] == pytest.approx(value, rel=1e-6), key  # logged in float32
    # the figures: uncertainty and matched-evidence histograms (split by the ground truth)
    # of the epochs after the warm-up, and the detection curve of the prediction
    names = {p.name for p in (folder / "figures").iterdir()}
    assert {"labels_epoch002.png", "detection.png", "rsum.png"} <= names, names
    main(["test", "--config", str(config), "--ckpt_path", "best"])
    results = json.loads(next(tmp_path.rglob("test_results.json")).read_text())
    assert set(results) == {"net", "training_noise"}  # the system, and the noise it trained on
    # two ncl DECL checkpoints ensemble by evidence (DECL-SGRAF), as combine: auto resolves
    ckpts = [str(next((folder / "checkpoints").glob("best*.ckpt"))), str(folder / "checkpoints" / "last.ckpt")]
    vocab = last_checkpoint(folder)["hyper_parameters"]["vocab_size"]
    ensemble = Pretrained(vocab, [partial(SGRAF, **TINY_SGRAF)] * 2, ckpts, names=["a", "b"])
    assert ensemble.rule == "evidence"


def test_a_short_last_batch_is_skipped_and_counted(tmp_path: Path, synthetic_cache: Path) -> None:
    """300 pairs in batches of 37: eight full batches and one of 4 < mu + 1 = 6 after the
    warm-up, where the official loop breaks; in the warm-up only a batch of one is."""
    config = method_config(tmp_path, synthetic_cache,
                           {**METHODS["decl"], "init_args": {**METHODS["decl"]["init_args"], "mu": 5}},
                           max_epochs=2, steps=100, data={"batch_size": 37})
    main(["fit", "--config", str(config)])
    folder = run_folder(tmp_path)
    assert per_epoch(folder, "train/skipped_batches") == {1: 1.0}
    assert last_checkpoint(folder)["ncl_training_state"]["steps"] == 9 + 8


def test_two_cpu_processes_predict_as_one(tmp_path: Path, synthetic_cache: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The table two processes predict (the same on both ranks: RankSyncCheck) equals the
    prediction one process makes from the same weights: the pass's batches do not depend on
    the number of processes. (Both ranks' state and the validation counted once, for every
    tiny case: tests/cli/test_ddp_methods.py.)"""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    config = decl_config(tmp_path, synthetic_cache, epochs=2, steps=DDP_TRAINER["limit_train_batches"],
                         trainer=DDP_TRAINER, data=DDP_DATA)
    main(["fit", "--config", str(config), "--trainer.max_epochs=1", *sync_check_args(tmp_path)])
    folder = run_folder(tmp_path)
    ckpt = last_checkpoint(folder)
    assert ckpt["epoch"] == 0 and ckpt["ncl_training_state"]["prediction_epoch"] == -1  # warm-up

    # one process, the weights the table will be predicted with (the end of epoch 0)
    data = SyntheticDataModule(preset="tiny", cache_dir=str(synthetic_cache), batch_size=16,
                               noise_type="image", noise_ratio=0.4, n_train=DDP_DATA["n_train"],
                               n_dev=DDP_DATA["n_dev"])
    data.setup("fit")
    model = DECL(ckpt["hyper_parameters"]["vocab_size"], partial(SGRAF, **TINY_SGRAF),
                 **{k: v for k, v in METHODS["decl"]["init_args"].items()},
                 prediction_batch_size=16)
    model.load_state_dict(ckpt["state_dict"])
    model._training_seed = int(ckpt["ncl_training_seed"])
    alone = run_pass(model.refinement_pass(1), model.nets, data.train_pairs(), 1,
                     torch.device("cpu"))[0]  # (N, 4)
    main(["fit", "--config", str(config), "--ckpt_path=last", *sync_check_args(tmp_path)])
    assert (tmp_path / "sync_ok_world2").read_text() == "1"
    state = last_checkpoint(folder)["ncl_training_state"]
    assert state["prediction_epoch"] == 1
    table = state["predictions"]["values"]
    assert table.shape == (4, 5 * DDP_DATA["n_train"])
    assert torch.equal(table[PRED_CLEAN], alone[:, PRED_CLEAN].double())
    assert torch.allclose(table, alone.t().double(), rtol=1e-6, atol=1e-9)
