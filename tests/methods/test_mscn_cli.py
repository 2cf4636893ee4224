"""MSCN through the real CLI on tiny synthetic data: warm-up, purification logged against the
ground truth, meta steps, a test of the best checkpoint scored with the corrected similarities
(checked by hand), ``ncl predict``; two CPU processes (DDP on gloo) with the same networks,
meta networks and purification on both ranks; the one error without a meta set. (The SIGKILL
resume is tests/cli/test_resume.py's, through ``tiny_runs.METHODS``.)"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from cli_helpers import error_lines, main_exit
from tiny_runs import (DDP_DATA, DDP_TRAINER, METHODS, TINY_SGRAF, assert_counted_once,
                       last_checkpoint, method_config, per_epoch, run_folder, sync_check_args)
from ncl.cli import main
from ncl.data.datamodule import SyntheticDataModule
from ncl.data.datasets import collate
from ncl.models.mscn_meta import MetaSimilarity, corrected_batch
from ncl.models.sgraf import SGRAF

STEPS = 4


def mscn_config(root: Path, cache: Path, epochs: int = 3, init_args: dict | None = None, **kwargs) -> Path:
    method = {**METHODS["mscn"], "init_args": {**METHODS["mscn"]["init_args"], **(init_args or {})}}
    return method_config(root, cache, method, max_epochs=epochs, steps=kwargs.pop("steps", STEPS), **kwargs)


def hand_rsum(ckpt: dict, cache: Path) -> float:
    """rSum on the tiny test split (30 images x 5 captions) of the mean of both networks'
    corrected similarities, every score from one eval-mode forward, ranks counted here."""
    data = SyntheticDataModule(preset="tiny", cache_dir=str(cache), batch_size=16)
    data.setup("test")
    split = data.test_data
    vocab, state = ckpt["hyper_parameters"]["vocab_size"], ckpt["state_dict"]
    captions = collate([{"tokens": torch.from_numpy(split.tokens(c).astype("int64")), "index": c}
                        for c in range(split.n_captions)])
    batch = {"images": torch.tensor(split.features[:split.n_images]), **captions}
    scores = 0
    for k in (0, 1):
        net, meta = SGRAF(vocab, **TINY_SGRAF).eval(), MetaSimilarity(8).eval()
        net.load_state_dict({n.removeprefix(f"nets.{k}."): v for n, v in state.items() if n.startswith(f"nets.{k}.")})
        meta.load_state_dict({n.removeprefix(f"meta_nets.{k}."): v for n, v in state.items()
                              if n.startswith(f"meta_nets.{k}.")})
        with torch.no_grad():
            scores = scores + corrected_batch(net, meta, batch).double() / 2
    n_img, n_cap = scores.shape
    per = n_cap // n_img
    total = 0.0
    for k in (1, 5, 10):
        i2t = [min(int((scores[i] > scores[i, c]).sum()) for c in range(per * i, per * i + per))
               for i in range(n_img)]
        t2i = [int((scores[:, c] > scores[c // per, c]).sum()) for c in range(n_cap)]
        total += 100 * sum(r < k for r in i2t) / n_img + 100 * sum(r < k for r in t2i) / n_cap
    return total


def test_fit_purifies_meta_steps_tests_and_predicts(tmp_path: Path, synthetic_cache: Path) -> None:
    config = mscn_config(tmp_path, synthetic_cache, epochs=2)
    main(["fit", "--config", str(config)])
    folder = run_folder(tmp_path)
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1]
    assert sorted(per_epoch(folder, "train/A/warmup_triplet_epoch")) == [0]
    for key in ("train/A/meta_bce_epoch", "train/B/meta_bce_epoch", "train/A/loss_epoch",
                "train/detection/f1", "division/A/f1"):
        assert sorted(per_epoch(folder, key)) == [1], key
    ckpt = last_checkpoint(folder)
    division = ckpt["ncl_training_state"]["division"]
    assert division["epoch"] == 1 and division["clean"].shape == (2, 300)
    removed = 6 * 5  # the method's own meta set: 6 training images and their captions
    assert int((division["prob"] == 0).sum(dim=1).min()) >= removed
    assert {k.split(".")[0] for k in ckpt["state_dict"]} == {"nets", "meta_nets"}
    assert len(ckpt["optimizer_states"]) == 4
    best = next((folder / "checkpoints").glob("best*.ckpt"))
    main(["test", "--config", str(config), f"--ckpt_path={best}",
          f"--trainer.default_root_dir={tmp_path / 'test'}"])
    results = json.loads(next((tmp_path / "test").rglob("test_results.json")).read_text())
    assert {"A", "B", "A+B"} <= set(results)
    tested = torch.load(best, weights_only=False)
    assert results["A+B"]["1k"]["rsum"] == pytest.approx(hand_rsum(tested, synthetic_cache), abs=1e-3)
    out = tmp_path / "ranked.csv"
    main(["predict", "--config", str(config), f"--ckpt_path={best}", f"--out={out}",
          f"--trainer.default_root_dir={tmp_path / 'predict'}"])
    with open(out) as handle:
        assert len(list(csv.DictReader(handle))) == 300


def test_two_cpu_processes_share_networks_meta_networks_and_purification(
        tmp_path: Path, synthetic_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    config = mscn_config(tmp_path, synthetic_cache, epochs=2, steps=DDP_TRAINER["limit_train_batches"],
                         trainer=DDP_TRAINER, data={**DDP_DATA, "batch_size": 8})
    main(["fit", "--config", str(config), *sync_check_args(tmp_path)])
    assert (tmp_path / "sync_ok_world2").read_text() == "1"
    folder = run_folder(tmp_path)
    assert last_checkpoint(folder)["ncl_training_state"]["division"]["epoch"] == 1
    assert_counted_once(config, folder, tmp_path)


def test_no_meta_set_is_one_error(tmp_path: Path, synthetic_cache: Path,
                                  capsys: pytest.CaptureFixture) -> None:
    config = mscn_config(tmp_path, synthetic_cache, epochs=1, init_args={"meta_train_images": None})
    err = main_exit(capsys, "fit", "--config", str(config))
    lines = error_lines(err)
    assert len(lines) == 1 and "meta set" in lines[0] and "meta_train_images" in lines[0], err[-2000:]
