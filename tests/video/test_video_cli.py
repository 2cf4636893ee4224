"""The synthetic video configs train and test through the real CLI (tiny preset, 2 epochs).

tests/cli/test_configs.py already fits every config for two steps with *image* data swapped
in; here the video configs run as shipped on video data (two experts of different sizes,
clips without motion), only shrunk to the tiny preset, and ``ncl test`` reports the median
rank the video tables use.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ncl.cli import main
from ncl.compose import merged
from ncl.evaluation.report import read_results

REPO = Path(__file__).resolve().parents[2]


def shrink(tmp_path: Path, config: Path) -> Path:
    """Tiny video data (12-d appearance, 8-d motion), 2 epochs, LNC warm-up of 1."""
    data = {"preset": "tiny", "cache_dir": str(tmp_path / "cache"), "batch_size": 32,
            "eval_batch_size": 64}
    backbone = {"img_dim": 12, "num_regions": 2, "word_dim": 8, "text_dim": 16, "embed_size": 16}
    model: dict = {"backbone": {"init_args": backbone}}
    if merged(config)["model"]["class_path"].endswith("NCR"):
        model["warmup_epochs"] = 1
    override = {"data": {"init_args": data}, "model": {"init_args": model},
                "trainer": {"max_epochs": 2, "default_root_dir": str(tmp_path / "root"),
                            "enable_progress_bar": False}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(override))
    return path


@pytest.mark.parametrize("name", ["lnc_video_synthetic", "rcl_video_synthetic"])
def test_video_config_fits_and_tests_with_median_rank(name: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = REPO / "configs" / f"{name}.yaml"
    override = shrink(tmp_path, config)
    main(["fit", "--config", str(config), "--config", str(override)])
    best = sorted(tmp_path.rglob("best-*.ckpt"))
    assert best, "a best checkpoint was written"
    noise = json.loads(next(tmp_path.rglob("noise.json")).read_text())
    assert noise["n_noisy_captions"] > 0  # the config's noise reached the video pairs
    main(["test", "--config", str(config), "--config", str(override), f"--ckpt_path={best[-1]}"])
    results, trained = read_results(json.loads(next(tmp_path.rglob("test_results.json")).read_text()))
    metrics = list(results.values())[-1]["1k"]
    assert trained["noise_pairing"] == "new"  # the video pairs' drawn noise, from the checkpoint
    n_test = 20  # the tiny preset's test clips
    assert 1 <= metrics["t2i_medr"] <= n_test and 1 <= metrics["i2t_medr"] <= 4 * n_test
    assert 0 <= metrics["t2i_r1"] <= metrics["t2i_r5"] <= metrics["t2i_r10"] <= 100
