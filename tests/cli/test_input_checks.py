"""Issue 29, items 4, 5 and 6 (``--data.help``): a user's input mistake is one line, through
the CLI. Feature files of another shape or dtype, an empty fit, a batch larger than the
training set, option typos, YAML syntax errors, a NaN outside the sampled images, the help of
a DataModule's options."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ncl.cli as cli
from ncl.data.datamodule import SyntheticDataModule

from cli_helpers import QUICKSTART, error_lines, main_exit, run_ncl, tiny


def private_cache(root: Path) -> tuple[Path, Path]:
    """A tiny synthetic dataset of this test's own (its files get rewritten): ``(cache, data_dir)``."""
    cache = root / "cache"
    return cache, SyntheticDataModule(preset="tiny", cache_dir=str(cache)).data_dir


def poisoned_cache(root: Path, split: str, images: list[int]) -> Path:
    """A tiny dataset whose ``split`` features hold NaN in ``images`` (odd) or Inf (even),
    which a two-image sample check (first and last image) does not see."""
    cache, data_dir = private_cache(root)

    def poison(feats: np.ndarray) -> np.ndarray:
        for i in images:
            feats[i, 1, 2] = np.nan if i % 2 else np.inf
        return feats

    rewrite(data_dir, split, poison)
    return cache


def rewrite(data_dir: Path, split: str, change) -> np.ndarray:
    """Replace ``<split>_ims.npy`` with ``change(features)``; return the new array."""
    path = data_dir / f"{split}_ims.npy"
    feats = change(np.load(path))
    np.save(path, feats)
    return feats


# ---------------------------------------------------------------- item 4: every split's shape
@pytest.mark.parametrize("change, shape_text", [
    (lambda f: np.concatenate([f, f[:, :4]], axis=1), "(60, 10, 16) (10 regions x 16 dims)"),
    (lambda f: f[:, :, :12], "(60, 6, 12) (6 regions x 12 dims)"),
])
def test_training_features_of_another_shape_are_one_line(tmp_path: Path, capsys, monkeypatch,
                                                         change, shape_text: str) -> None:
    cache, data_dir = private_cache(tmp_path)
    rewrite(data_dir, "train", change)  # dev and test keep the backbone's 6 x 16
    monkeypatch.chdir(tmp_path)
    err = main_exit(capsys, "fit", *tiny(cache, "--trainer.max_epochs=1"))
    assert "Traceback" not in err
    [line] = error_lines(err)
    assert f"the train features {data_dir / 'train_ims.npy'} have shape {shape_text}" in line
    assert "the backbone (net) expects 6 regions x 16 dims" in line
    assert "dev (30, 6, 16)" in line  # the other split, which fits
    assert not list(tmp_path.rglob("*.ckpt"))


# ---------------------------------------------------------------- item 5: warnings at the start
@pytest.fixture(scope="module")
def warned_fit(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, np.ndarray, int]:
    """One short fit on float64 training and float16 dev features with a batch larger than the
    training set: ``(stderr, data_dir, training features, training pairs)``."""
    root = tmp_path_factory.mktemp("warned")
    cache, data_dir = private_cache(root)
    train = rewrite(data_dir, "train", lambda f: f.astype(np.float64))
    rewrite(data_dir, "dev", lambda f: f.astype(np.float16))
    pairs = len((data_dir / "train_caps.txt").read_text().splitlines())
    out = run_ncl("fit", *tiny(cache, "--trainer.max_epochs=1", f"--data.batch_size={pairs + 1}",
                               "--trainer.limit_val_batches=1"), cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stderr, data_dir, train, pairs


def test_feature_dtypes_other_than_float32_warn_once(warned_fit) -> None:
    err, data_dir, train, _ = warned_fit
    warnings = [line for line in err.splitlines() if line.startswith("ncl: warning: feature file")]
    assert len(warnings) == 2, err
    float64 = next(w for w in warnings if "train_ims.npy" in w)
    assert f"feature file {data_dir / 'train_ims.npy'} holds float64 features" in float64
    assert "doubles the memory" in float64
    extra = train.size * 4  # the bytes float64 takes beyond float32
    assert f"({extra / 1e3:.1f} kB more for this file)" in float64
    float16 = next(w for w in warnings if "dev_ims.npy" in w)
    assert f"feature file {data_dir / 'dev_ims.npy'} holds float16 features" in float16


def test_batch_larger_than_the_training_set_warns(warned_fit) -> None:
    err, data_dir, _, pairs = warned_fit
    [line] = [line for line in err.splitlines() if "data.batch_size" in line]
    assert line.startswith(f"ncl: warning: data.batch_size={pairs + 1} is not smaller than the "
                           f"training set ({pairs} pairs in {data_dir / 'train_caps.txt'})")


def test_max_epochs_zero_is_one_line_before_a_run_folder(tmp_path: Path, capsys, monkeypatch,
                                                         synthetic_cache: Path) -> None:
    monkeypatch.chdir(tmp_path)
    err = main_exit(capsys, "fit", *tiny(synthetic_cache, "--trainer.max_epochs=0"))
    assert err.strip().splitlines() == [
        ("ncl: error: trainer.max_epochs is 0, so ncl fit would train nothing and leave an empty "
         "run; set it to 1 or more (ncl validate/test evaluate a checkpoint without training)")]
    assert not any(tmp_path.iterdir())  # no run folder


# ---------------------------------------------------------------- item 5: option typos
@pytest.mark.parametrize("typo, suggestion", [
    (["--model.tauu", "1"], "--model.tau"),
    (["--model.init_args.backbone.init_args.embed_sise", "8"],
     "--model.init_args.backbone.init_args.embed_size"),
    (["--data.init_args.noise_ratoi", "0.2"], "--data.init_args.noise_ratio"),
    (["--model.optimizer.init_args.lrr", "0.1"], "--model.optimizer.init_args.lr"),
    (["--trainer.max_epohcs", "3"], "--trainer.max_epochs"),
    (["--dat.batch_size", "3"], "--data.batch_size"),
    (["--fresh_if_misssing", "true"], "--fresh_if_missing"),
])
def test_option_typo_is_one_line_with_the_nearest_name(capsys, typo: list[str], suggestion: str) -> None:
    err = main_exit(capsys, "fit", "--config", QUICKSTART, *typo)
    [line] = err.strip().splitlines()
    assert line.startswith(f"ncl: error: unknown option {typo[0]}")
    assert line.endswith(f"did you mean {suggestion}?")


def test_option_typo_in_a_config_file_is_one_line(tmp_path: Path, capsys) -> None:
    extra = tmp_path / "typo.yaml"
    extra.write_text("model:\n  init_args:\n    tauu: 0.1\n")
    err = main_exit(capsys, "fit", "--config", QUICKSTART, "--config", str(extra))
    assert err.strip().splitlines() == [
        ("ncl: error: unknown option model.init_args.tauu in a --config file: RCL has no option "
         "'tauu'; did you mean model.init_args.tau?")]


# ---------------------------------------------------------------- item 5: YAML syntax errors
@pytest.mark.parametrize("text, where", [
    ("model:\n  init_args:\n    tau: [0.1\n  x: 1\n", "at line 4, column 4: expected ',' or ']'"),
    ("trainer:\n\tmax_epochs: 1\n", "at line 2, column 1: found character '\\t'"),
])
def test_yaml_syntax_error_names_file_and_line(tmp_path: Path, capsys, text: str, where: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    err = main_exit(capsys, "fit", "--config", QUICKSTART, "--config", str(bad))
    [line] = err.strip().splitlines()
    assert line.startswith(f"ncl: error: config file {bad} is not valid YAML {where}")


# ---------------------------------------------------------------- item 5: NaN outside the sample
def test_nan_outside_the_sample_points_at_the_data_check_first(tmp_path: Path) -> None:
    cache = poisoned_cache(tmp_path, "train", [5])
    out = run_ncl("fit", *tiny(cache, "--data.nan_check_samples=2", "--trainer.max_epochs=1"),
                  cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    [line] = error_lines(out.stderr)
    assert line.startswith("ncl: error: the loss of RCL is NaN at global step")
    assert "train_ims.npy (2 of 60 images checked)" in line
    data_check, diverged = line.index("--data.nan_check full"), line.index("training diverged")
    assert data_check < diverged < line.index("learning rate")


# ---------------------------------------------------------------- item 6: --data.help
def test_data_help_lists_each_option_once(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", "--config", QUICKSTART, "--data.help", "SyntheticDataModule"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == ("usage: ncl fit|validate|test|predict [--config FILE ...] "
                                   "[--data.KEY value ...]")
    for option in ("--data.preset", "--data.batch_size", "--data.noise_ratio", "--data.nan_check "):
        assert out.count(option) == 1, option
