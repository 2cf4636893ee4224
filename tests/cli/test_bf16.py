"""``trainer.precision: bf16-mixed`` on CPU through the CLI (issue 28): every method trains an
epoch with finite losses, and its checkpoint resumes in float32. Before issue 28 SGRAF's
local-similarity Function raised in its backward under CPU autocast (bfloat16 != float)."""

from __future__ import annotations

import csv
import math
import subprocess
from pathlib import Path

import pytest
import torch
from config_override import REPO, tiny_override
from launch import ncl_here
from tiny_runs import METHODS, method_config

ALL = {**METHODS,
       "crcl": {"class_path": "ncl.methods.crcl.CRCL", "init_args": {"freeze_epochs": 1}},
       "recon": {"class_path": "ncl.methods.recon.ReCon", "init_args": {"warmup_epochs": 1}}}


def ncl(subcommand: str, config: Path, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    """``ncl SUBCOMMAND --config CONFIG ...`` in ``cwd``, in this process (a new interpreter
    would spend seconds importing; nothing here needs one)."""
    return ncl_here(subcommand, "--config", str(config), *extra, cwd=cwd)


def fit(config: Path, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    return ncl("fit", config, cwd, *extra)


def logged_training_values(root: Path) -> list[float]:
    """Every logged ``train/*`` value (losses, targets; methods name them differently) in the
    run's ``metrics.csv``."""
    values = []
    for path in root.rglob("metrics.csv"):
        for row in csv.DictReader(path.open()):
            values += [float(v) for k, v in row.items() if k.startswith("train/") and v]
    return values


@pytest.mark.parametrize("name", sorted(ALL))
def test_bf16_mixed_trains_resumes_and_tests(name: str, tmp_path: Path) -> None:
    """bf16 epoch, a float32 resume, then ``ncl test`` of the last checkpoint in bf16."""
    config = method_config(tmp_path / name, tmp_path / "cache", ALL[name], max_epochs=1, steps=4)
    first = fit(config, tmp_path, "--trainer.precision=bf16-mixed")
    assert first.returncode == 0, first.stderr[-3000:]
    values = logged_training_values(tmp_path / name)
    assert values and all(math.isfinite(v) for v in values)
    resumed = fit(config, tmp_path, "--trainer.precision=32-true", "--trainer.max_epochs=2",
                  "--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "epoch 1 validation" in resumed.stdout
    tested = ncl("test", config, tmp_path, "--trainer.precision=bf16-mixed", "--ckpt_path=last")
    assert tested.returncode == 0, tested.stderr[-3000:]
    assert "rSum" in tested.stdout, tested.stdout[-2000:]


# Every backbone and similarity strategy, from the shipped configs (tiny data and dims as
# tests/cli/test_configs.py swaps in): a float32 epoch, then a bf16-mixed epoch resumed from
# its checkpoint (the other direction of the method test above).
BACKBONES = {"sgr_chunked": ("rcl_sgr_f30k.yaml", []),
             "sgr_loop": ("rcl_sgr_f30k.yaml",
                          ["--model.init_args.backbone.init_args.similarity_strategy=loop"]),
             "saf": ("rcl_saf_f30k.yaml", []),
             "vse_infinity": ("rcl_vse_synthetic.yaml", []),
             "gated_video": ("rcl_video_synthetic.yaml", [])}


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_every_backbone_resumes_in_bf16(name: str, tmp_path: Path, synthetic_cache: Path) -> None:
    config, extra = BACKBONES[name]
    config = REPO / "configs" / config
    override = tiny_override(tmp_path, synthetic_cache, config)
    common = ["--config", str(override), "--trainer.logger=true", *extra]
    first = fit(config, tmp_path, *common, "--trainer.precision=32-true")
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = fit(config, tmp_path, *common, "--trainer.precision=bf16-mixed",
                  "--trainer.max_epochs=2", "--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    values = logged_training_values(tmp_path / "root")
    assert values and all(math.isfinite(v) for v in values)
    assert "epoch 1 validation" in resumed.stdout


def test_float32_matmul_precision_option(tmp_path: Path, synthetic_cache: Path,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture) -> None:
    """``--float32_matmul_precision high`` (TF32 on GPUs) reaches torch; a wrong value is a
    parser error (exit 2) naming the option and its choices."""
    from cli_helpers import main_exit, tiny

    from ncl.cli import main

    monkeypatch.chdir(tmp_path)
    before = torch.get_float32_matmul_precision()
    try:
        main(["fit", *tiny(synthetic_cache, "--trainer.max_epochs=1", "--trainer.limit_train_batches=1",
                           "--trainer.logger=false", "--float32_matmul_precision=high")])
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)
    err = main_exit(capsys, "fit", *tiny(synthetic_cache, "--float32_matmul_precision=fast"))
    # one line naming the option, the value and the allowed ones
    assert err.strip() == ("ncl: error: float32_matmul_precision 'fast' is not valid: it must be one "
                           "of highest, high, medium"), err
