"""What ``ncl`` prints, through the real console (issue 29, item 6): progress lines in a log
file, no Lightning warning about the Figures callback's checkpoint state, no torch
deprecation per DDP rank, no ``v_num`` in the terminal's bar, video result tables."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import TINY_BACKBONE_ARGS

from ncl.evaluation.report import read_results
from launch import launch

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = str(REPO / "configs" / "quickstart.yaml")
TESTS = REPO / "tests"
#: Terminal control sequences (cursor moves, colours): a log file must hold none.
ANSI = re.compile(r"\x1b\[")


def ncl_command(*args: str) -> list[str]:
    return [shutil.which("ncl") or str(Path(sys.executable).parent / "ncl"), *args]


def console_env() -> dict[str, str]:
    """The user's default warning settings (no PYTHONWARNINGS); ``tests/`` importable for the
    DDP helper callback (after any PYTHONPATH given, which may point at another checkout)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env["WANDB_MODE"] = "disabled"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(TESTS)) if p)
    return env


def tiny_args(cache: Path, root: Path, *extra: str) -> list[str]:
    """The quickstart on the tiny preset with the progress bar left on."""
    return ["--config", QUICKSTART, *TINY_BACKBONE_ARGS, "--data.preset=tiny", "--data.n_train=null",
            f"--data.cache_dir={cache}", f"--trainer.default_root_dir={root}", *extra]


def fit_into_file(work: Path, *extra: str) -> tuple[subprocess.CompletedProcess, str]:
    """``ncl fit ... > log.txt``: stdout goes to a file (not a terminal); returns the log."""
    log = work / "log.txt"
    with log.open("w") as handle:
        out = launch(ncl_command("fit", *tiny_args(work / "cache", work / "runs", *extra)),
                             cwd=work, env=console_env(), stdout=handle, stderr=subprocess.PIPE,
                             text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out, log.read_text()


@pytest.fixture(scope="module")
def logged_fit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One epoch of 4 steps, stdout into a file: (work folder, the log's text)."""
    work = tmp_path_factory.mktemp("logged_fit")
    _, log = fit_into_file(work, "--trainer.max_epochs=1", "--trainer.limit_train_batches=4")
    return work, log


def step_lines(log: str, epoch: int) -> list[str]:
    return [line for line in log.splitlines() if line.startswith(f"epoch {epoch} step ")]


# ---------------------------------------------------------------- progress in a log file
def test_log_file_shows_progress_lines_inside_the_epoch(logged_fit) -> None:
    _, log = logged_fit
    lines = log.splitlines()
    steps = step_lines(log, 0)
    # default: about 10 lines per epoch, so every step of a 4-step epoch
    assert [line.split()[3] for line in steps] == ["1/4", "2/4", "3/4", "4/4"], log
    assert all(re.search(r" loss \d+\.\d+", line) and re.search(r" (it/s|s/it) ", line)
               for line in steps), steps
    summary = next(i for i, line in enumerate(lines) if line.startswith("epoch 0 validation"))
    assert lines.index(steps[0]) < summary  # printed while the epoch ran, not at the end
    # no redraw junk: no carriage returns, control sequences, bar glyphs or v_num
    assert "\r" not in log and not ANSI.search(log) and "━" not in log and "v_num" not in log


def test_progress_line_interval_is_configurable(tmp_path: Path) -> None:
    _, log = fit_into_file(tmp_path, "--trainer.max_epochs=1", "--trainer.limit_train_batches=5",
                           "--trainer.callbacks+=ncl.callbacks.progress_bars.LineProgressBar",
                           "--trainer.callbacks.every_n_steps=2")
    assert [line.split()[3] for line in step_lines(log, 0)] == ["2/5", "4/5", "5/5"], log


# ---------------------------------------------------------------- evaluating a fit checkpoint
@pytest.mark.parametrize("subcommand", ["test", "validate"])
def test_evaluating_a_fit_checkpoint_does_not_ask_for_callbacks(logged_fit, subcommand: str) -> None:
    """The checkpoint holds the Figures callback's state (its curves, for resuming); Lightning
    warned "Please add the following callbacks: ['Figures']" on every ncl test/validate."""
    work, _ = logged_fit
    (ckpt,) = work.glob("runs/lightning_logs/version_0/checkpoints/last.ckpt")
    out = launch(
        ncl_command(subcommand, *tiny_args(work / "cache", work / f"eval_{subcommand}"),
                    f"--ckpt_path={ckpt}"),
        cwd=work, env=console_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Restoring states from the checkpoint" in out.stderr  # callbacks were restored
    text = out.stdout + out.stderr
    assert "Please add the following callbacks" not in text and "Traceback" not in text
    assert not list((work / f"eval_{subcommand}").rglob("*.png"))  # figures are fit's only


# ---------------------------------------------------------------- two processes
def test_two_process_run_prints_no_torch_deprecation_per_rank(tmp_path: Path) -> None:
    """Two gloo processes (``ddp_spawn``, as the DDP tests) with the tests' rank check, which
    compares the ranks' weights with Lightning's ``all_gather``: torch 2.13 deprecated the
    function behind it and each rank printed the deprecation; spawned ranks also printed the
    warnings ncl filters (a spawned interpreter never ran ncl's console setup)."""
    out = launch(
        ncl_command("fit", *tiny_args(tmp_path / "cache", tmp_path / "runs"),
                    "--trainer.max_epochs=1", "--trainer.limit_train_batches=2",
                    "--trainer.limit_val_batches=1", "--trainer.devices=2",
                    "--trainer.strategy=ddp_spawn", "--trainer.enable_progress_bar=false",
                    "--trainer.callbacks+=tiny_runs.RankSyncCheck",
                    f"--trainer.callbacks.marker_dir={tmp_path}"),
        cwd=tmp_path, env=console_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "sync_ok_world2").read_text() == "0"  # epoch 0 gathered on both ranks
    assert "is deprecated" not in out.stderr, out.stderr
    assert "sync_dist=True" not in out.stderr  # a filtered Lightning warning, per spawned rank
    # NclWarnings of a spawned rank are one line too
    assert "NclWarning" not in out.stderr and "ncl: warning: 2 processes each train" in out.stderr


# ---------------------------------------------------------------- the terminal's bar
def run_on_terminal(command: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``command`` with stdout and stderr on a pseudo-terminal; (exit status, output)."""
    leader, follower = pty.openpty()
    env = {**console_env(), "TERM": "xterm", "COLUMNS": "160"}
    process = launch(command, popen=True, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                               stdout=follower, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closed: the process ended
                break
            if not data:
                break
            chunks.append(data)
        elif process.poll() is not None:
            break
    os.close(leader)
    return process.wait(timeout=600), b"".join(chunks).decode("utf-8", "replace")


def test_terminal_bar_shows_no_version_number(tmp_path: Path) -> None:
    status, output = run_on_terminal(
        ncl_command("fit", *tiny_args(tmp_path / "cache", tmp_path / "runs"),
                    "--trainer.max_epochs=2", "--trainer.limit_train_batches=2"), tmp_path)
    assert status == 0, output[-3000:]
    assert "━" in output and "val/rsum" in output  # Rich drew its bar, with the metrics
    assert "v_num" not in output and not step_lines(output, 0)


# ---------------------------------------------------------------- video result tables
def test_video_test_table_names_video_and_shows_ranks(tmp_path: Path) -> None:
    config = REPO / "configs" / "rcl_video_synthetic.yaml"
    override = tmp_path / "tiny.yaml"
    override.write_text(yaml.safe_dump({
        "data": {"init_args": {"preset": "tiny", "cache_dir": str(tmp_path / "cache"),
                               "batch_size": 32, "eval_batch_size": 64}},
        "model": {"init_args": {"backbone": {"init_args": {
            "img_dim": 12, "num_regions": 2, "word_dim": 8, "text_dim": 16, "embed_size": 16}}}},
        "trainer": {"max_epochs": 1, "limit_train_batches": 2, "enable_progress_bar": False,
                    "default_root_dir": str(tmp_path / "runs")}}))
    common = ["--config", str(config), "--config", str(override)]

    def ncl(*args: str) -> subprocess.CompletedProcess:
        out = launch(ncl_command(*args), cwd=tmp_path, env=console_env(),
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        return out

    ncl("fit", *common)
    (ckpt,) = tmp_path.glob("runs/lightning_logs/version_0/checkpoints/last.ckpt")
    out = ncl("test", *common, f"--ckpt_path={ckpt}", f"--trainer.default_root_dir={tmp_path / 'test'}")
    lines = out.stdout.splitlines()
    title = next(i for i, line in enumerate(lines) if "Video -> Text" in line)
    assert "Text -> Video" in lines[title] and "Image" not in out.stdout
    assert lines[title + 1].split() == ["System", "Protocol", *["R@1", "R@5", "R@10", "MdR", "MnR"] * 2,
                                        "rSum"]
    results, _ = read_results(json.loads(next((tmp_path / "test").rglob("test_results.json")).read_text()))
    ((system, by_protocol),) = results.items()
    m = by_protocol["1k"]
    keys = [f"{d}_{k}" for d in ("i2t", "t2i") for k in ("r1", "r5", "r10", "medr", "meanr")]
    assert lines[title + 2].split() == [system, "1k", *(f"{m[k]:.1f}" for k in [*keys, "rsum"])]
