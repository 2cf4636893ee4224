"""A run's record is append-only and a mismatched checkpoint is one line (issue 29, items 1, 3
and the empty run folders of 5): a resume whose model or data options differ from the run's
stops before anything in the run folder is written, ``--override_run true`` records the change
beside the original record, evaluating a checkpoint under another backbone names the option,
``--ckpt_path best`` without a selectable epoch is an error, and failed starts leave no run
folder."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from cli_helpers import error_lines, main_exit, tiny
from tiny_runs import METHODS, method_config

from ncl import cli
from launch import launch

main = cli.main
TESTS = Path(__file__).resolve().parents[1]
FAST = ["--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1"]
EMBED = "--model.backbone.init_args.embed_size"


def fingerprint(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` (relative path -> digest)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def run_args(root: Path, cache: Path, *extra: str) -> list[str]:
    return [*tiny(cache, *FAST, f"--trainer.default_root_dir={root}"), *extra]


@pytest.fixture(scope="module")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """One epoch of the quickstart on the tiny preset with embed_size 32 (the probe's
    ``embed_size 128``): ``(root, cache, run folder)``."""
    base = tmp_path_factory.mktemp("big")
    root, cache = base / "runs", base / "cache"
    main(["fit", *run_args(root, cache, f"{EMBED}=32", "--trainer.max_epochs=1")])
    [folder] = (root / "lightning_logs").iterdir()
    return root, cache, folder


# ------------------------------------------------ 1 + 3: a resume with other options is one line
@pytest.mark.parametrize("change, named", [
    ([f"{EMBED}=16"], "model.init_args.backbone.init_args.embed_size 32 (the run) vs 16 (now)"),
    (["--model.backbone.init_args.module_name=SAF", f"{EMBED}=32"],
     "model.init_args.backbone.init_args.module_name SGR (the run) vs SAF (now)"),
    (["--model=ncl.methods.baselines.Triplet", f"{EMBED}=32"],
     "model.class_path ncl.methods.rcl.RCL (the run) vs ncl.methods.baselines.Triplet (now)"),
    (["--data.noise_ratio=0.2", f"{EMBED}=32"], "data.init_args.noise_ratio 0.4 (the run) vs 0.2 (now)"),
    (["--data.noise_seed=3", "--data.noise_type=caption", f"{EMBED}=32"],
     ("data.init_args.noise_seed 0 (the run) vs 3 (now); data.init_args.noise_type image (the run) "
      "vs caption (now)")),
])
def test_resume_with_other_options_is_one_line_and_writes_nothing(
        big_run: tuple[Path, Path, Path], capsys: pytest.CaptureFixture, change: list[str],
        named: str) -> None:
    root, cache, folder = big_run
    before = fingerprint(root)
    err = main_exit(capsys, "fit", *run_args(root, cache, *change, "--trainer.max_epochs=2",
                                             "--ckpt_path=last"))
    [line] = error_lines(err)
    assert "Traceback" not in err and named in line, err[-3000:]
    assert "--override_run true" in line and str(folder / "config.yaml") in line
    assert fingerprint(root) == before  # the run folder byte for byte, nothing added


def test_override_of_the_backbone_shapes_is_still_one_line(big_run: tuple[Path, Path, Path],
                                                           capsys: pytest.CaptureFixture) -> None:
    """``--override_run`` accepts the new options, but weights of another shape cannot be
    loaded: one line naming a weight and both shapes, before anything is written."""
    root, cache, _ = big_run
    before = fingerprint(root)
    err = main_exit(capsys, "fit", *run_args(root, cache, f"{EMBED}=16", "--trainer.max_epochs=2",
                                             "--ckpt_path=last", "--override_run=true"))
    [line] = error_lines(err)
    assert "does not fit the model this config builds" in line and "[32, 16]" in line, err[-3000:]
    assert "size mismatch" not in err and fingerprint(root) == before


# ------------------------------------------------ 1: evaluating a checkpoint of another backbone
@pytest.mark.parametrize("subcommand", ["validate", "test", "predict"])
def test_evaluating_a_checkpoint_of_another_backbone_is_one_line(
        big_run: tuple[Path, Path, Path], capsys: pytest.CaptureFixture, tmp_path: Path,
        subcommand: str) -> None:
    root, cache, folder = big_run
    before = fingerprint(root)
    extra = [f"--out={tmp_path / 'ranked.csv'}"] if subcommand == "predict" else []
    err = main_exit(capsys, subcommand, *run_args(root, cache, f"{EMBED}=16", *extra,
                                                  f"--ckpt_path={folder / 'checkpoints' / 'last.ckpt'}"))
    [line] = error_lines(err)
    assert "model.init_args.backbone.init_args.embed_size 32 (the run) vs 16 (this config)" in line, err
    assert "size mismatch" not in err and fingerprint(root) == before
    assert not (tmp_path / "ranked.csv").exists()


def test_saf_checkpoint_under_sgr_config_is_one_line(big_run: tuple[Path, Path, Path],
                                                     capsys: pytest.CaptureFixture) -> None:
    root, cache, folder = big_run
    err = main_exit(capsys, "test", *run_args(root, cache, f"{EMBED}=32", "--model.backbone.init_args.module_name=SAF",
                                              f"--ckpt_path={folder / 'checkpoints' / 'last.ckpt'}"))
    [line] = error_lines(err)
    assert "model.init_args.backbone.init_args.module_name SGR (the run) vs SAF (this config)" in line


def test_a_checkpoint_outside_its_run_folder_is_checked_by_its_weights(
        big_run: tuple[Path, Path, Path], capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """No config.yaml beside it: the weights' shapes and names are compared instead."""
    root, cache, folder = big_run
    lone = tmp_path / "copied.ckpt"
    shutil.copy(folder / "checkpoints" / "last.ckpt", lone)
    err = main_exit(capsys, "test", *run_args(root, cache, f"{EMBED}=16", f"--ckpt_path={lone}"))
    [line] = error_lines(err)
    assert "has shape [32, 16] in the checkpoint and [16, 16] in this config's model" in line, err
    err = main_exit(capsys, "test", *run_args(root, cache, f"{EMBED}=32", f"--ckpt_path={lone}",
                                              "--model.backbone.init_args.module_name=SAF"))
    [line] = error_lines(err)
    assert "the checkpoint has no nets.0.sim_enc.SAF_module" in line, err
    assert "this config's model has no nets.0.sim_enc.SGR_module" in line


# ------------------------------------------------ 3: --override_run keeps the original record
def test_override_run_records_beside_the_original(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root, cache = tmp_path / "runs", tmp_path / "cache"
    main(["fit", *run_args(root, cache, "--trainer.max_epochs=1")])
    [folder] = (root / "lightning_logs").iterdir()
    start = {name: (folder / name).read_bytes() for name in ("config.yaml", "noise.json", "noise_index.npy")}
    main(["fit", *run_args(root, cache, "--trainer.max_epochs=2", "--ckpt_path=last")])  # plain resume
    main(["fit", *run_args(root, cache, "--trainer.max_epochs=3", "--ckpt_path=last",
                           "--data.noise_ratio=0.2", "--override_run=true")])
    assert {name: (folder / name).read_bytes() for name in start} == start  # epoch 0's record
    plain, override = [json.loads(line) for line in (folder / "resumes.jsonl").read_text().splitlines()]
    assert plain["changes"] == [["trainer.max_epochs", 1, 2]] and plain["override_run"] is False
    assert plain["noise"] == "noise.json" and plain["epoch"] == 0
    assert override["changes"] == [["data.init_args.noise_ratio", 0.4, 0.2], ["trainer.max_epochs", 2, 3]]
    assert override["override_run"] is True and override["epoch"] == 1
    new_noise = json.loads((folder / override["noise"]).read_text())
    assert override["noise"] != "noise.json" and abs(new_noise["noise_rate"] - 0.2) < 0.05
    assert (folder / override["noise"].replace("noise.", "noise_index.").replace(".json", ".npy")).is_file()
    # the run's options are now those of the override: the original ratio is the difference
    err = main_exit(capsys, "fit", *run_args(root, cache, "--trainer.max_epochs=4", "--ckpt_path=last"))
    [line] = error_lines(err)
    assert "data.init_args.noise_ratio 0.2 (the run) vs 0.4 (now)" in line and "resumes.jsonl" in line


# ------------------------------------------------ 3: --ckpt_path best without a best epoch
def test_best_without_a_selectable_epoch_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A run that never left its warm-up: val/rsum_selected was -1 in every validation, so
    its "best" checkpoint is no best (it used to be tested silently)."""
    cache = tmp_path / "cache"
    config = method_config(tmp_path, cache, METHODS["ncr"], max_epochs=1, steps=2,
                           trainer={"monitor": "val/rsum_selected"})
    main(["fit", "--config", str(config)])
    assert list(tmp_path.rglob("best*.ckpt"))  # Lightning kept an epoch of score -1
    err = main_exit(capsys, "test", "--config", str(config), "--ckpt_path=best")
    [line] = error_lines(err)
    assert "--ckpt_path best: no epoch of the run in" in line and "val/rsum_selected was -1" in line
    assert not list(tmp_path.rglob("test_results.json"))


# ------------------------------------------------ 5: failed starts leave no run folder
def test_a_failed_start_leaves_no_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "runs"
    err = main_exit(capsys, "fit", *run_args(root, tmp_path / "cache", "--data.augment=ncl.data.augment.CaptionRegionAugment",
                                             "--model.backbone.init_args.add_mask_token=false"))
    assert "add_mask_token=true" in error_lines(err)[0]
    assert not [p for p in root.rglob("*") if p.is_file()], list(root.rglob("*"))


def fit_killed_before_first_checkpoint(args: list[str], cwd: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    out = launch([sys.executable, "-m", "ncl.cli", "fit", *args,
                          "--trainer.callbacks+=resume_helpers.KillAtStep", "--trainer.callbacks.step=0"],
                         cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == -9, out.stderr[-3000:]


def test_fresh_if_missing_after_kills_keeps_one_run_folder(tmp_path: Path) -> None:
    """A start killed before its first checkpoint, started again with ``--ckpt_path last
    --fresh_if_missing true``: one run folder, not one per kill (the issue found 26); the
    leftover of another run (other options) is kept."""
    root, cache = tmp_path / "runs", tmp_path / "cache"
    args = run_args(root, cache, "--ckpt_path=last", "--fresh_if_missing=true", "--trainer.max_epochs=1")
    fit_killed_before_first_checkpoint([*args, "--data.noise_seed=5"], tmp_path)  # another run's
    other = sorted((root / "lightning_logs").iterdir())
    fit_killed_before_first_checkpoint(args, tmp_path)  # this run's start, killed
    assert len(list((root / "lightning_logs").iterdir())) == len(other) + 1
    main(["fit", *args])  # started again: replaces the killed start's folder
    folders = sorted((root / "lightning_logs").iterdir())
    assert len(folders) == len(other) + 1 and set(other) < set(folders), folders
    assert list(root.rglob("checkpoints/last.ckpt"))
