"""Helpers of the CLI failure tests (test_reliability, test_input_checks, test_run_record):
the real console script, the tiny quickstart, and the one-error-line checks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY_BACKBONE_ARGS

import ncl.cli as cli
from launch import launch

QUICKSTART = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")


def run_ncl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The console script with the user's default warning settings (no PYTHONWARNINGS)."""
    exe = shutil.which("ncl") or str(Path(sys.executable).parent / "ncl")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env["WANDB_MODE"] = "disabled"
    return launch([exe, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def tiny(cache: Path, *extra: str) -> list[str]:
    """The quickstart on the tiny preset, its data cached under ``cache``, no progress bar."""
    return ["--config", QUICKSTART, *TINY_BACKBONE_ARGS, "--data.preset=tiny", "--data.n_train=null",
            f"--data.cache_dir={cache}", "--trainer.enable_progress_bar=false", *extra]


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("ncl: error:")]


def main_exit(capsys: pytest.CaptureFixture, *args: str) -> str:
    """Run ``ncl.cli.main``; assert exit status 2 and return stderr."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(list(args))
    assert exit_info.value.code == 2
    return capsys.readouterr().err
