"""End-to-end: the ``ncl`` command on tiny data in the official layout, run in this process
(:func:`launch.ncl_here`: the same arguments, exit status and output, without a new
interpreter). The console script's own exit status is checked in a real process by
test_reliability.py and test_input_checks.py (``cli_helpers.run_ncl``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import TINY_BACKBONE_ARGS, prefill_token_cache, repeated_captions, write_split
from launch import ncl_here

REPO = Path(__file__).resolve().parents[2]
TINY = TINY_BACKBONE_ARGS


def ncl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``ncl ARGS`` in ``cwd`` (in this process)."""
    return ncl_here(*args, cwd=cwd)


def test_fit_then_test_on_synthetic(tmp_path: Path, synthetic_cache: Path) -> None:
    common = ["--config", str(REPO / "configs" / "quickstart.yaml"), *TINY,
              "--data.preset=tiny", "--data.n_train=null", f"--data.cache_dir={synthetic_cache}", "--data.batch_size=16",
              "--trainer.limit_train_batches=3", "--trainer.enable_progress_bar=false"]
    fit = ncl("fit", *common, "--trainer.max_epochs=2", cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr[-3000:]
    run_dirs = [p.parent for p in tmp_path.rglob("config.yaml")]
    assert len(run_dirs) == 1
    run = run_dirs[0]
    summary = json.loads((run / "noise.json").read_text())
    assert summary["format"] == "image" and len(summary["sha256"]) == 64
    assert np.load(run / "noise_index.npy").shape == (60,)
    ckpt = sorted(run.rglob("best-*.ckpt"))[0]
    test = ncl("test", *common, f"--ckpt_path={ckpt}", cwd=tmp_path)
    assert test.returncode == 0, test.stderr[-3000:]
    assert "rSum" in test.stdout or "rsum" in test.stdout.lower()
    results = list(tmp_path.rglob("test_results.json"))
    assert results
    metrics = json.loads(results[-1].read_text())
    assert "net" in metrics and "1k" in metrics["net"]


def test_headline_command_without_data(tmp_path: Path) -> None:
    out = ncl("fit", "--config", str(REPO / "configs" / "rcl_sgr_coco.yaml"), cwd=tmp_path)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "data/coco_precomp" in out.stderr and "Preparing the datasets" in out.stderr
    assert not list(tmp_path.rglob("*.ckpt")) and not list(tmp_path.rglob("config.yaml"))


@pytest.mark.parametrize("args, message", [
    (["--data.noise_ratio=1.0"], "data.noise_ratio must be in [0, 1)"),
    (["--model.loss=bogus"], "loss"),
    (["--config", "/nonexistent/cfg.yaml"], "does not exist"),
])
def test_bad_options_give_one_clear_error(tmp_path: Path, synthetic_cache: Path, args: list[str],
                                          message: str) -> None:
    out = ncl("fit", "--config", str(REPO / "configs" / "quickstart.yaml"), *TINY,
              "--data.preset=tiny", "--data.n_train=null", f"--data.cache_dir={synthetic_cache}", *args, cwd=tmp_path)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert message in out.stderr
    assert len(out.stderr.strip().splitlines()) < 25


def test_region_mismatch_is_reported(tmp_path: Path, synthetic_cache: Path) -> None:
    out = ncl("fit", "--config", str(REPO / "configs" / "quickstart.yaml"), *TINY[:1],
              "--model.backbone.init_args.num_regions=7", "--data.preset=tiny", "--data.n_train=null",
              f"--data.cache_dir={synthetic_cache}", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "6 regions x 16 dims" in out.stderr


def _f30k_sized_dataset(root: Path) -> None:
    """F30K's split sizes with two 4-dim regions, so official noise files fit."""
    data = root / "f30k_precomp"
    words = ["a", "dog", "runs", "on", "the", "grass", "man", "rides", "bike"]
    write_split(data, "train", 29000, regions=2, dim=4, captions=repeated_captions(words, 145000))
    write_split(data, "dev", 20, regions=2, dim=4)


@pytest.mark.parametrize("vocab, size", [("f30k", 8481), ("coco", 11353), ("cc152k", 12072)])
def test_official_vocab_and_noise_file_through_cli(tmp_path: Path, shared_data: Path, vocab: str,
                                                    size: int) -> None:
    _f30k_sized_dataset(tmp_path)
    vocab_path = shared_data / "vocab" / f"{vocab}_precomp_vocab.json"
    prefill_token_cache(tmp_path / "f30k_precomp", vocab_path)  # the loader reads the ids then
    noise = shared_data / "noise_index" / "rcl" / "f30k_precomp" / "noise_inx_0.6.npy"
    out = ncl("fit", "--config", str(REPO / "configs" / "rcl_sgr_f30k.yaml"),
              "--model.backbone.init_args.img_dim=4", "--model.backbone.init_args.num_regions=2",
              "--model.backbone.init_args.word_dim=8", "--model.backbone.init_args.embed_size=8",
              "--model.backbone.init_args.sim_dim=8", f"--data.data_root={tmp_path}",
              f"--data.vocab_path={vocab_path}",
              f"--data.noise_file={noise}", "--data.batch_size=16", "--data.num_workers=0",
              "--trainer.max_epochs=1", "--trainer.limit_train_batches=2",
              "--trainer.limit_val_batches=2", "--trainer.num_sanity_val_steps=0",
              "--trainer.enable_progress_bar=false", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(next(tmp_path.rglob("noise.json")).read_text())
    assert summary["format"] == "image" and abs(summary["noise_rate"] - 0.59993) < 1e-4
    ckpt = torch.load(next(tmp_path.rglob("*.ckpt")), map_location="cpu", weights_only=False)
    assert ckpt["hyper_parameters"]["vocab_size"] == size  # linked from the vocabulary file
    rows = [v.shape[0] for k, v in ckpt["state_dict"].items() if k.endswith("embed.weight")]
    assert rows == [size + 1]  # RCL appends <mask>


def test_wrong_length_noise_file_through_cli(tmp_path: Path, synthetic_cache: Path) -> None:
    bad = tmp_path / "noise_bad.npy"
    np.save(bad, np.arange(17))
    out = ncl("fit", "--config", str(REPO / "configs" / "quickstart.yaml"), *TINY,
              "--data.preset=tiny", "--data.n_train=null", f"--data.cache_dir={synthetic_cache}",
              f"--data.noise_file={bad}", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert str(bad) in out.stderr and "length 17" in out.stderr and "300" in out.stderr
