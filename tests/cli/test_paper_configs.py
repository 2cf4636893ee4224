"""The configs for the papers' table rows (issue 11 A, B) and their failure modes, through the CLI.

``tests/cli/test_configs.py`` trains every config on tiny data; here: that the rows exist with
the settings the papers and official READMEs give, that RCL-style configs read RCL's official
index by default (and stop with one message when it is missing), and that the clean-only
oracle refuses data without ground truth.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ncl.cli import main

from helpers import prefill_token_cache, repeated_captions, write_split
from launch import ncl_here
from ncl.compose import merged

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"
NOISE_FILE = "noise_inx_{noise_ratio}.npy"


def load(name: str) -> dict:
    """The config as ``ncl fit --print_config`` resolves it (fragments merged, defaults filled)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(["fit", "--config", str(CONFIGS / f"{name}.yaml"), "--print_config"])
    return yaml.safe_load(out.getvalue())


def settings(cfg: dict) -> tuple:
    """``(module, lr, max_epochs, lr_update, noise_type, noise_file)`` of a config."""
    model, data = cfg["model"]["init_args"], cfg["data"]["init_args"]
    return (model["backbone"]["init_args"]["module_name"], model["optimizer"]["init_args"]["lr"],
            cfg["trainer"]["max_epochs"], model["lr_update"], data["noise_type"],
            data.get("noise_file"))


# (config, module, lr, epochs, lr_update, noise_type, noise_file): SGRAF's README for the plain
# baselines (SAF F30K 30/20, COCO 20/10), RCL's README and scripts (spec 4.3.4).
ROWS = [
    ("baseline_triplet_saf_f30k", "SAF", 2e-4, 30, 20, "caption", None),
    ("baseline_triplet_saf_coco", "SAF", 2e-4, 20, 10, "caption", None),
    ("baseline_triplet_saf_cc152k", "SAF", 2e-4, 30, 20, "none", None),
    ("baseline_triplet_sgr_f30k_imagenoise", "SGR", 2e-4, 40, 30, "image", NOISE_FILE),
    ("baseline_triplet_sgr_coco_imagenoise", "SGR", 2e-4, 20, 10, "image", NOISE_FILE),
    ("baseline_triplet_saf_f30k_imagenoise", "SAF", 2e-4, 30, 20, "image", NOISE_FILE),
    ("baseline_triplet_saf_coco_imagenoise", "SAF", 2e-4, 20, 10, "image", NOISE_FILE),
    ("rcl_sgr_f30k", "SGR", 2e-4, 30, 15, "image", NOISE_FILE),
    ("rcl_saf_f30k", "SAF", 2e-4, 30, 15, "image", NOISE_FILE),
    ("rcl_sgr_f30k_readme", "SGR", 5e-4, 40, 30, "image", NOISE_FILE),
    ("rcl_saf_f30k_readme", "SAF", 5e-4, 30, 20, "image", NOISE_FILE),
    ("rcl_sgr_coco", "SGR", 5e-4, 20, 10, "image", NOISE_FILE),
    ("rcl_saf_coco", "SAF", 5e-4, 20, 10, "image", NOISE_FILE),
    # DECL (spec 4.6.6, supplementary Table 1): warm-up epochs come first, inside max_epochs
    ("decl_sgr_f30k", "SGR", 2e-4, 45, 20, "image", NOISE_FILE),
    ("decl_saf_f30k", "SAF", 2e-4, 45, 20, "image", NOISE_FILE),
    ("decl_sgr_coco", "SGR", 5e-4, 22, 10, "image", NOISE_FILE),
    ("decl_saf_coco", "SAF", 5e-4, 22, 10, "image", NOISE_FILE),
    ("decl_sgr_cc152k", "SGR", 2e-4, 45, 20, "none", None),
    ("decl_saf_cc152k", "SAF", 2e-4, 45, 20, "none", None),
]


@pytest.mark.parametrize(("name", "warmup"), [("decl_sgr_f30k", 5), ("decl_saf_coco", 2),
                                              ("decl_sgr_cc152k", 5)])
def test_decl_rows_keep_the_official_constants(name: str, warmup: int) -> None:
    """Supplementary Table 1: the same DECL constants everywhere; only the schedule differs."""
    model = load(name)["model"]["init_args"]
    assert model.get("warmup_epochs", 5) == warmup
    assert model["backbone"]["init_args"].get("add_mask_token", False) is False  # DECL has no <mask>
    official = {"tau": 0.1, "lambda1": 0.8, "lambda2": 0.1, "eta": 0.025, "mu": 5, "margin": 0.2,
                "hardness_batch_size": 128, "hardness_counts_warmup": True, "rdh_reduction": "sum",
                "kl_anneal_epochs": 0, "lr_schedule": "after_warmup", "grad_clip": 2.0}
    assert {k: model[k] for k in official} == official


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_row_settings(row: tuple) -> None:
    name, *expected = row
    assert settings(load(name)) == tuple(expected)
    assert load(name)["trainer"]["logger"]["init_args"]["name"] == name.removeprefix("baseline_")


@pytest.mark.parametrize("dataset", ["f30k", "coco"])
def test_ncr_under_image_noise_differs_from_ncr_only_in_the_noise(dataset: str) -> None:
    plain, image = load(f"ncr_sgr_{dataset}"), load(f"ncr_sgr_{dataset}_imagenoise")
    assert image["model"] == plain["model"] and image["trainer"]["max_epochs"] == plain["trainer"]["max_epochs"]
    data = image["data"]["init_args"]
    assert (data["noise_type"], data["noise_file"]) == ("image", NOISE_FILE)
    assert {k: v for k, v in data.items() if k != "noise_file"} == \
        {**{k: v for k, v in plain["data"]["init_args"].items() if k != "noise_file"}, "noise_type": "image"}


def test_no_clean_oracle_on_cc152k() -> None:
    assert not (CONFIGS / "baseline_clean_sgr_cc152k.yaml").exists()
    for path in CONFIGS.glob("*cc152k*.yaml"):
        assert not merged(path)["model"]["init_args"].get("clean_only"), path.name


def test_rcl_cc152k_comment_cites_table_4() -> None:
    for module in ("sgr", "saf"):
        text = (CONFIGS / f"rcl_{module}_cc152k.yaml").read_text()
        assert "never run on CC152K" not in text and "Table 4 reports CC152K" in text


# --------------------------------------------------------------------- through the CLI
def ncl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``ncl ARGS`` in ``cwd`` (in this process: the same exit status and ``ncl: error:`` line;
    the console script's own status is tested in test_reliability.py)."""
    return ncl_here(*args, cwd=cwd)


@pytest.mark.parametrize("config", ["rcl_sgr_f30k", "baseline_triplet_saf_coco_imagenoise"])
def test_missing_official_noise_file_is_one_message(tmp_path: Path, config: str) -> None:
    dataset = load(config)["data"]["init_args"]["data_name"]
    (tmp_path / "data" / dataset).mkdir(parents=True)  # the dataset folder, without the index
    out = ncl("fit", "--config", str(CONFIGS / f"{config}.yaml"), "--data.noise_ratio=0.6", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("ncl: error:")]
    assert len(errors) == 1, out.stderr[-2000:]
    assert f"data/{dataset}/noise_inx_0.6.npy" in errors[0] and "RCL's repository" in errors[0]
    # Stopped before the trainer: no run folder, no saved config, no checkpoint.
    assert not (tmp_path / "runs").exists() and not list(tmp_path.rglob("config.yaml"))
    assert not list(tmp_path.rglob("*.ckpt"))


def _f30k_sized(root: Path, shared_data: Path) -> None:
    """F30K's training size (29,000 images, 145,000 captions) with 2 x 4 features, and RCL's
    official index files where RCL keeps them."""
    data = root / "f30k_precomp"
    words = ["a", "dog", "runs", "on", "the", "grass"]
    write_split(data, "train", 29000, regions=2, dim=4, captions=repeated_captions(words, 145000))
    write_split(data, "dev", 20, regions=2, dim=4)
    prefill_token_cache(data, shared_data / "vocab" / "f30k_precomp_vocab.json")  # read, not re-tokenised
    for path in (shared_data / "noise_index" / "rcl" / "f30k_precomp").glob("noise_inx_*.npy"):
        shutil.copy(path, data / path.name)


def test_rcl_config_reads_the_official_file_its_ratio_names(tmp_path: Path, shared_data: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _f30k_sized(tmp_path / "elsewhere", shared_data)
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", str(CONFIGS / "rcl_sgr_f30k.yaml"), "--data.data_root=elsewhere",
          f"--data.vocab_path={shared_data / 'vocab' / 'f30k_precomp_vocab.json'}",
          "--data.noise_ratio=0.6", "--data.batch_size=16", "--data.num_workers=0",
          "--model.backbone.init_args.img_dim=4", "--model.backbone.init_args.num_regions=2",
          "--model.backbone.init_args.word_dim=8", "--model.backbone.init_args.embed_size=8",
          "--model.backbone.init_args.sim_dim=8", "--trainer.max_epochs=1",
          "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=2",  # 1 would be 100%
          "--trainer.num_sanity_val_steps=0", "--trainer.enable_progress_bar=false"])
    summary = json.loads(next(tmp_path.rglob("noise.json")).read_text())
    assert summary["format"] == "image" and summary["noise_rate"] == pytest.approx(0.59993, abs=1e-5)
    assert "elsewhere/f30k_precomp/noise_inx_0.6.npy" in summary["source"]


def test_clean_oracle_refuses_real_noise(tmp_path: Path, synthetic_cache: Path,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    override = tmp_path / "tiny.yaml"
    override.write_text(yaml.safe_dump({
        "data": {"class_path": "ncl.data.datamodule.SyntheticDataModule",
                 "init_args": {"preset": "tiny", "n_train": None, "cache_dir": str(synthetic_cache),
                               "batch_size": 16, "noise_type": "none", "noise_ratio": 0.0,
                               "real_noise": True}},
        "model": {"init_args": {"backbone": {"init_args": {
            "img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8}}}},
        "trainer": {"max_epochs": 1, "limit_train_batches": 2, "accelerator": "cpu",
                    "default_root_dir": str(tmp_path / "root"), "enable_progress_bar": False}}))
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", str(CONFIGS / "baseline_clean_sgr_f30k.yaml"), "--config", str(override)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "ncl: error: model.init_args.clean_only" in err and "real noise" in err
    assert "Traceback" not in err and not list(tmp_path.rglob("*.ckpt"))
