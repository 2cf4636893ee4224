"""Failures a user can provoke end with one ``ncl: error:`` line and exit status 2; the console
shows what matters (issue 9). Real console (subprocess) where the console itself is tested,
``ncl.cli.main`` in-process elsewhere."""

from __future__ import annotations

import errno
import importlib
import inspect
import json
import pkgutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

import ncl.cli as cli
import ncl.data.datamodule as datamodules
import ncl.methods
from ncl.console import configure_console
from ncl.data.datamodule import SyntheticDataModule
from ncl.errors import NclWarning
from ncl.methods.base import RetrievalMethod

from cli_helpers import QUICKSTART, error_lines, main_exit, run_ncl, tiny

REPO = Path(__file__).resolve().parents[2]


def poisoned_cache(root: Path, split: str, images: list[int]) -> Path:
    """A private tiny synthetic dataset whose ``split`` features hold NaN/Inf in ``images``,
    which the two-image sample check (first and last image) does not see."""
    cache = root / "cache"
    data_dir = SyntheticDataModule(preset="tiny", cache_dir=str(cache)).data_dir
    path = data_dir / f"{split}_ims.npy"
    feats = np.load(path)
    for i in images:
        feats[i, 1, 2] = np.nan if i % 2 else np.inf
    np.save(path, feats)
    return cache


# ---------------------------------------------------------------- 1. non-finite training loss
def test_nan_training_features_stop_fit_with_one_line(tmp_path: Path) -> None:
    cache = poisoned_cache(tmp_path, "train", [5])
    out = run_ncl("fit", *tiny(cache, "--data.nan_check_samples=2", "--trainer.max_epochs=2"),
                  cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    [line] = error_lines(out.stderr)
    assert "the loss of RCL is NaN at global step" in line
    assert "(epoch 0)" in line and "learning rate" in line and "--data.nan_check full" in line
    assert not list(tmp_path.rglob("*.ckpt")) and not list(tmp_path.rglob("test_results.*"))


# ---------------------------------------------------------------- 2. NaN/Inf at evaluation
@pytest.mark.parametrize("subcommand, split, label", [("validate", "dev", "validation"),
                                                       ("test", "test", "test")])
def test_nan_eval_features_name_split_file_and_images(tmp_path: Path, capsys, monkeypatch,
                                                       subcommand: str, split: str, label: str) -> None:
    cache = poisoned_cache(tmp_path, split, [3, 8])
    monkeypatch.chdir(tmp_path)
    err = main_exit(capsys, subcommand, *tiny(cache, "--data.nan_check_samples=2", "--allow_untrained=true"))
    [line] = error_lines(err)
    assert f"the {label} features in " in line and f"{split}_ims.npy" in line
    assert "2 of 30 images (images 3, 8)" in line
    assert not list(tmp_path.rglob("test_results.*"))


# ---------------------------------------------------------------- 3. full scan (CLI option)
def test_full_scan_option_through_cli(tmp_path: Path, capsys, monkeypatch) -> None:
    cache = poisoned_cache(tmp_path, "train", [5, 6])
    monkeypatch.chdir(tmp_path)
    err = main_exit(capsys, "fit", *tiny(cache, "--data.nan_check=full"))
    [line] = error_lines(err)
    assert "train_ims.npy holds NaN or Inf values in 2 of 60 images: images 5, 6 (full scan)" in line
    assert "NaN/Inf scan of train_ims.npy" in err  # the progress bar
    assert not list(tmp_path.rglob("*.ckpt"))


# ---------------------------------------------------------------- 4. empty captions: the console
def test_ncl_warnings_are_one_console_line(capsys) -> None:
    with warnings.catch_warnings():
        configure_console()
        warnings.warn("caption file x/train_caps.txt has 1 empty caption(s) (line 3); kept",
                      NclWarning)
    err = capsys.readouterr().err
    assert err == "ncl: warning: caption file x/train_caps.txt has 1 empty caption(s) (line 3); kept\n"


# ---------------------------------------------------------------- 5. predict
def test_predict_without_a_checkpoint_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    out = run_ncl("predict", "--config", QUICKSTART, cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == error_lines(out.stderr)  # one line, nothing else
    # ncl predict on a fit config takes its model from a checkpoint (--out then defaults to the
    # run folder): without --ckpt_path it is refused as ncl test is, before anything is built
    assert "no --ckpt_path" in out.stderr and "--ckpt_path best" in out.stderr
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------- 6. fit --help
def test_fit_help_lists_methods_and_datamodules(tmp_path: Path) -> None:
    for info in pkgutil.iter_modules(ncl.methods.__path__, prefix="ncl.methods."):
        importlib.import_module(info.name)

    def public_subclasses(base: type) -> set[type]:
        found = set()
        for sub in base.__subclasses__():
            found |= public_subclasses(sub) | ({sub} if not sub.__name__.startswith("_") else set())
        return found

    methods = {f"{c.__module__}.{c.__name__}" for c in public_subclasses(RetrievalMethod)
               if c.__module__.startswith("ncl.methods.")}
    data = {f"{datamodules.__name__}.{n}" for n, c in inspect.getmembers(datamodules, inspect.isclass)
            if c.__module__ == datamodules.__name__ and n.endswith("DataModule")}
    assert {"ncl.methods.rcl.RCL", "ncl.methods.ncr.NCR"} <= methods
    assert "ncl.data.datamodule.SyntheticDataModule" in data
    out = run_ncl("fit", "--help", cwd=tmp_path)
    assert out.returncode == 0
    catalogue = out.stdout.split("methods (--model")[1]
    for name in methods | data:
        assert f"\n  {name}\n" in catalogue, name


# ---------------------------------------------------------------- 7. output folder
def _not_writable_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        (folder / "probe").mkdir()
    except PermissionError:
        return folder / "runs"
    (folder / "probe").rmdir()
    folder.chmod(0o700)
    pytest.skip("running as root: a 0o500 folder is writable")


@pytest.mark.parametrize("kind", ["under_a_file", "a_file", "proc", "read_only"])
def test_unwritable_output_folder(tmp_path: Path, synthetic_cache: Path, capsys, monkeypatch,
                                  kind: str) -> None:
    (tmp_path / "afile").write_text("not a folder")
    target = {"under_a_file": tmp_path / "afile" / "runs", "a_file": tmp_path / "afile",
              "proc": Path("/proc/ncl-forbidden")}.get(kind) or _not_writable_dir(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    err = main_exit(capsys, "fit", *tiny(synthetic_cache, f"--trainer.default_root_dir={target}"))
    [line] = error_lines(err)
    assert f"output folder trainer.default_root_dir={target} cannot be created or written" in line
    assert err.strip().splitlines() == [line]  # before any trainer: nothing else printed
    assert not list(work.iterdir()) and (tmp_path / "afile").read_text() == "not a folder"


def test_logger_save_dir_is_checked_too(tmp_path: Path, synthetic_cache: Path, capsys,
                                        monkeypatch) -> None:
    (tmp_path / "afile").write_text("")
    monkeypatch.chdir(tmp_path)
    err = main_exit(capsys, "fit", *tiny(synthetic_cache, "--trainer.logger=CSVLogger",
                                         f"--trainer.logger.save_dir={tmp_path / 'afile' / 'logs'}"))
    assert "trainer.logger.init_args.save_dir=" in err and "is a file, not a folder" in err


def test_write_error_in_an_output_folder_during_a_run(tmp_path: Path, capsys, monkeypatch) -> None:
    """Fallback for what the early check cannot foresee (disk full, permissions changed)."""
    root = tmp_path / "runs"

    def failing_cli(*args, **kwargs):
        cli.check_output_folders({"trainer": {"default_root_dir": str(root)}})
        raise OSError(errno.ENOSPC, "No space left on device", str(root / "v0" / "last.ckpt"))

    monkeypatch.setattr(cli, "NclCLI", failing_cli)
    err = main_exit(capsys, "fit")
    assert err == f"ncl: error: cannot write {root / 'v0' / 'last.ckpt'}: No space left on device\n"

    def unrelated(*args, **kwargs):  # a bug elsewhere keeps its traceback
        cli.check_output_folders({"trainer": {"default_root_dir": str(root)}})
        raise OSError(errno.EACCES, "Permission denied", "/somewhere/else")

    monkeypatch.setattr(cli, "NclCLI", unrelated)
    with pytest.raises(OSError, match="/somewhere/else"):
        cli.main(["fit"])


# ---------------------------------------------------------------- 8 + 9. a normal run
@pytest.fixture(scope="module")
def tiny_fit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """One epoch of the quickstart on the tiny preset, through the real console."""
    work = tmp_path_factory.mktemp("tiny_fit")
    out = run_ncl("fit", *tiny(work / "cache", "--trainer.max_epochs=1",
                               "--trainer.limit_train_batches=2"), cwd=work)
    assert out.returncode == 0, out.stderr[-3000:]
    return work, out


def test_noise_provenance_is_in_the_logged_hyperparameters(tiny_fit) -> None:
    work, _ = tiny_fit
    run = next(work.rglob("noise.json")).parent
    noise = json.loads((run / "noise.json").read_text())
    logged = yaml.safe_load((run / "hparams.yaml").read_text())  # what the CSV logger received
    assert logged["noise_sha256"] == noise["sha256"]
    assert logged["noise_rate"] == pytest.approx(noise["noise_rate"])
    assert logged["noise_format"] == "image" and logged["noise_source"] == noise["source"]


def test_console_shows_no_uninformative_warnings(tiny_fit) -> None:
    _, out = tiny_fit
    for noise in ("litlogger", "litmodels", "LeafSpec", "tensorboardX", "sync_dist=True"):
        assert noise not in out.stderr, noise
    assert "smaller than the logging interval" in out.stderr  # Lightning's useful ones stay
    assert "Traceback" not in out.stderr and "validation [net]" in out.stdout


def test_lightning_results_table_is_off_by_default(capsys) -> None:
    """ncl prints its own table; Lightning's repeats it per DataLoader with float32 digits."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["test", "--help"])
    assert exit_info.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "prints the test results. (type: bool, default: False)" in help_text


# ---------------------------------------------------------------- issue 29, item 2
@pytest.mark.parametrize("subcommand", ["test", "validate"])
def test_evaluating_without_a_checkpoint_is_one_line(tmp_path: Path, capsys, monkeypatch,
                                                     subcommand: str) -> None:
    """``ncl test --config configs/quickstart.yaml`` without ``--ckpt_path`` used to score the
    untrained initial weights, exit 0 and write ``test_results.json`` (issue 29, item 2)."""
    monkeypatch.chdir(tmp_path)
    err = main_exit(capsys, subcommand, *tiny(tmp_path / "cache"))
    [line] = error_lines(err)
    assert f"ncl {subcommand}: no --ckpt_path" in line and "--allow_untrained" in line
    assert len(err.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("test_results.*")) and not list(tmp_path.rglob("metrics.csv"))
