"""RCL with the VSE-infinity backbone through the real CLI, with variable region counts.

``configs/rcl_vse_synthetic.yaml`` removes about 20% of every training image's regions, so
training batches are zero-padded and carry ``image_lengths``; evaluation uses every region.
A spy on :meth:`VSEInfinity.encode_images` records what the backbone was really given.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from ncl.cli import main
from ncl.models.vse_infinity import VSEInfinity

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "rcl_vse_synthetic.yaml"
TINY_REGIONS = 6  # the tiny synthetic preset: 6 regions x 16 dims


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, int, list[int] | None]]:
    """``(training, R, image_lengths or None)`` of every ``encode_images`` call."""
    seen: list[tuple[bool, int, list[int] | None]] = []
    original = VSEInfinity.encode_images

    def spy(self: VSEInfinity, images: torch.Tensor, image_lengths: torch.Tensor | None = None):
        lengths = None if image_lengths is None else [int(n) for n in image_lengths]
        seen.append((self.training, images.shape[1], lengths))
        return original(self, images, image_lengths)

    monkeypatch.setattr(VSEInfinity, "encode_images", spy)
    return seen


def override(tmp_path: Path, cache: Path) -> Path:
    """Tiny data and dimensions, two short epochs, outputs in ``tmp_path``."""
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({
        "data": {"init_args": {"preset": "tiny", "n_train": None, "cache_dir": str(cache),
                               "batch_size": 16, "eval_batch_size": 32}},
        "model": {"init_args": {"backbone": {"init_args": {"img_dim": 16, "word_dim": 8,
                                                           "embed_size": 16}}}},
        "trainer": {"max_epochs": 2, "limit_train_batches": 3, "enable_progress_bar": False,
                    "default_root_dir": str(tmp_path / "root")},
    }))
    return path


def test_rcl_vse_fits_with_variable_regions_and_tests(tmp_path: Path, synthetic_cache: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      calls: list) -> None:
    monkeypatch.chdir(tmp_path)
    tiny = override(tmp_path, synthetic_cache)
    main(["fit", "--config", str(CONFIG), "--config", str(tiny)])

    train = [c for c in calls if c[0]]
    assert len(train) == 2 * 3, "one encode_images per training step"
    for _, regions, lengths in train:  # every batch was padded and carried its counts
        assert lengths is not None and regions == max(lengths)
        assert min(lengths) < TINY_REGIONS and min(lengths) >= 1
    evaluation = [c for c in calls if not c[0]]
    assert evaluation and all(lengths is None and regions == TINY_REGIONS
                              for _, regions, lengths in evaluation)

    ckpt = sorted(tmp_path.rglob("best-*.ckpt"))
    assert ckpt, "a best checkpoint was written"
    calls.clear()
    main(["test", "--config", str(CONFIG), "--config", str(tiny), f"--ckpt_path={ckpt[0]}"])
    assert calls and all(not training for training, _, _ in calls)
    results = json.loads(next(tmp_path.rglob("test_results.json")).read_text())
    metrics = results["net"]["1k"]
    assert math.isfinite(metrics["rsum"]) and 0 <= metrics["rsum"] <= 600
