"""``ncl predict --config <fit config> --ckpt_path best|last|FILE``: the model from the
checkpoint, the data from the config, the scores from the method's own networks (the base
class's batch scorer), the ranking the method declares, and the table in the run's
``predictions/<split>.csv`` when there is no ``--out``.

The RCL run is the session's shared tiny run (conftest ``rcl_f30k_checkpoint``), copied first
since predicting writes into its folder; DECL gets a tiny fit of its own."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from launch import ncl_here

from ncl.evaluation.ranking import COLUMNS, GMM, Ranking
from ncl.methods.decl import DECL
from ncl.methods.decl_ranking import UNCERTAINTY
from ncl.methods.declaration import declarations
from ncl.methods.rcl import RCL

REPO = Path(__file__).resolve().parents[2]
RCL_CONFIG = REPO / "configs" / "rcl_saf_f30k.yaml"
TINY = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8}


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open(newline="", encoding="utf-8")))


def _error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def rcl_run(tmp_path: Path, rcl_f30k_checkpoint) -> tuple[Path, Path, Path]:
    """A copy of the shared RCL-SAF run: ``(cwd, fit override, run folder)``."""
    best = rcl_f30k_checkpoint("SAF")
    root = next(p for p in best.parents if (p / "runs").is_dir())
    shutil.copytree(root, tmp_path / "work")
    run = tmp_path / "work" / best.relative_to(root).parents[1]
    return tmp_path / "work", tmp_path / "work" / "fit_SAF.yaml", run


def _predict(cwd: Path, override: Path, *args: str, config: Path = RCL_CONFIG):
    return ncl_here("predict", "--config", str(config), "--config", str(override), *args, cwd=cwd)


def test_best_ranks_into_the_run_folder_with_the_runs_networks(
        rcl_run: tuple[Path, Path, Path], synthetic_cache: Path, tmp_path: Path) -> None:
    cwd, override, run = rcl_run
    runs_before = sorted(p for p in run.parent.iterdir())
    result = _predict(cwd, override, "--ckpt_path", "best")
    assert result.returncode == 0, result.stderr
    table = run / "predictions" / "train.csv"
    assert str(table.resolve()) in result.stdout  # the command says where the table is
    assert (run / "predictions" / "train.metrics.json").is_file()
    rows = _rows(table)
    assert tuple(rows[0]) == COLUMNS  # RCL's ranking: the GMM (its declared default)
    prob = [float(r["clean_probability"]) for r in rows]
    assert prob == sorted(prob) and len(set(prob)) > 2
    assert sorted(p for p in run.parent.iterdir()) == runs_before  # no new run folder

    # The same networks through the eval form (Pretrained over the same file) rank the same.
    [best] = (run / "checkpoints").glob("best-*.ckpt")
    eval_override = tmp_path / "eval.yaml"
    eval_override.write_text(yaml.safe_dump({
        "data": yaml.safe_load(override.read_text())["data"],
        "model": {"init_args": {
            "backbones": [{"class_path": "ncl.models.SGRAF",
                           "init_args": {"module_name": "SAF", "add_mask_token": True, **TINY}}],
            "checkpoints": [str(best)], "names": ["SAF"], "ensemble_name": None}},
        "trainer": {"accelerator": "cpu", "logger": False, "default_root_dir": str(tmp_path / "eval")}}))
    out = tmp_path / "eval.csv"
    result = _predict(tmp_path, eval_override, "--out", str(out),
                      config=REPO / "configs" / "eval_sgraf_f30k.yaml")
    assert result.returncode == 0, result.stderr
    assert _rows(out) == rows


def test_last_and_a_file_load_that_checkpoint(rcl_run: tuple[Path, Path, Path], tmp_path: Path) -> None:
    cwd, override, run = rcl_run
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, map_location="cpu", weights_only=False)
    generator = torch.Generator().manual_seed(0)
    for key, value in ckpt["state_dict"].items():  # other weights than best's, so it shows
        if value.is_floating_point() and "running_" not in key:  # BatchNorm variances stay > 0
            ckpt["state_dict"][key] = value + 0.3 * torch.randn(value.shape, generator=generator)
    torch.save(ckpt, last)

    assert _predict(cwd, override, "--ckpt_path", "best", "--out", str(tmp_path / "best.csv")).returncode == 0
    result = _predict(cwd, override, "--ckpt_path", "last", "--out", str(tmp_path / "last.csv"))
    assert result.returncode == 0, result.stderr
    assert str(tmp_path / "last.csv") in result.stdout
    assert not (run / "predictions").exists()  # --out wins over the run folder
    result = _predict(cwd, override, "--ckpt_path", str(last), "--split", "dev")
    assert result.returncode == 0, result.stderr
    assert _rows(tmp_path / "last.csv") != _rows(tmp_path / "best.csv")
    assert (run / "predictions" / "dev.csv").is_file()  # <split>.csv
    assert not (run / "predictions" / "dev.metrics.json").exists()  # no ground truth for dev


def test_a_bad_ckpt_path_is_one_error_line(rcl_run: tuple[Path, Path, Path]) -> None:
    cwd, override, run = rcl_run
    line = _error_line(_predict(cwd, override, "--ckpt_path", "missing.ckpt"))
    assert line == "ncl: error: --ckpt_path missing.ckpt: no such checkpoint file"
    line = _error_line(_predict(cwd, override))
    assert line.startswith("ncl: error: ncl predict: no --ckpt_path")
    line = _error_line(_predict(cwd, override, "--ckpt_path", "best", "--ranking", "uncertainty"))
    assert line == "ncl: error: --ranking must be one of gmm, got 'uncertainty'"  # RCL's rankings
    assert not (run / "predictions").exists()


def test_other_noise_than_the_runs_is_named(rcl_run: tuple[Path, Path, Path], tmp_path: Path) -> None:
    cwd, override, run = rcl_run
    result = _predict(cwd, override, "--ckpt_path", "best", "--data.init_args.noise_ratio", "0.2",
                      "--out", str(tmp_path / "other.csv"))
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("ncl: warning:")]
    assert "was trained on other noise than this config's: data.init_args.noise_ratio 0.4 (the run) " \
           "vs 0.2 (this config)" in line and str(run.resolve() / "config.yaml") in line
    result = _predict(cwd, override, "--ckpt_path", "best", "--out", str(tmp_path / "own.csv"))
    assert result.returncode == 0, result.stderr
    assert "ncl: warning:" not in result.stderr  # the run's own noise: no warning


def test_a_decl_run_ranks_by_uncertainty_by_default(tmp_path: Path, synthetic_cache: Path) -> None:
    override = tmp_path / "decl.yaml"
    override.write_text(yaml.safe_dump({
        "data": {"class_path": "ncl.data.datamodule.SyntheticDataModule",
                 "init_args": {"preset": "tiny", "n_train": None, "cache_dir": str(synthetic_cache),
                               "batch_size": 16, "eval_batch_size": 32, "noise_type": "caption",
                               "noise_ratio": 0.4, "noise_seed": 0, "noise_file": None}},
        "model": {"init_args": {"backbone": {"init_args": TINY}, "warmup_epochs": 1, "eta": 1.0,
                                "mu": 3}},
        "trainer": {"max_epochs": 1, "limit_train_batches": 4, "enable_progress_bar": False}}))
    config = REPO / "configs" / "decl_sgr_synthetic.yaml"
    fit = ncl_here("fit", "--config", str(config), "--config", str(override), cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr
    [run] = (tmp_path / "runs" / "decl_sgr_synthetic" / "lightning_logs").iterdir()

    result = _predict(tmp_path, override, "--ckpt_path", "last", config=config)
    assert result.returncode == 0, result.stderr
    assert "ranked by DECL uncertainty" in result.stdout
    rows = _rows(run / "predictions" / "train.csv")
    assert tuple(rows[0]) == UNCERTAINTY.table_columns()
    uncertainty = [float(r["uncertainty"]) for r in rows]
    assert uncertainty == sorted(uncertainty, reverse=True) and len(set(uncertainty)) > 2

    result = _predict(tmp_path, override, "--ckpt_path", "last", "--ranking", "gmm", config=config)
    assert result.returncode == 0, result.stderr
    assert tuple(_rows(run / "predictions" / "train.csv")[0]) == COLUMNS  # --ranking overrides


def test_every_method_declares_its_rankings_and_keeps_gmm() -> None:
    """``rankings`` on every method class: Ranking strategies with distinct names, ``gmm``
    among them (every method can be ranked by the GMM of the mean hinge), the first the
    default of ``--ranking``."""
    assert RCL.rankings == (GMM,) and DECL.rankings == (UNCERTAINTY, GMM)
    for declared in declarations():
        module, name = declared.class_path.rsplit(".", 1)
        cls = getattr(__import__(module, fromlist=[name]), name)
        names = [r.name for r in cls.rankings]
        assert all(isinstance(r, Ranking) for r in cls.rankings), declared.class_path
        assert GMM in cls.rankings and len(set(names)) == len(names), declared.class_path
        for ranking in cls.rankings:  # the table frame: keys first, the pair's values last
            assert ranking.table_columns()[:3] == COLUMNS[:3]
            assert ranking.table_columns()[-2:] == COLUMNS[-2:]
