"""``ncl.datatools.layout_check``: a good synthetic layout passes; each kind of damage is named."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from ncl.data.facts import SPLIT_COUNTS
from ncl.data.synthetic import generate, preset
from ncl.datatools.layout_check import check_layout, sample_rows

NAME = "synthetic_precomp"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny synthetic dataset (60/30/30 images, 5 captions each), generated once."""
    root = tmp_path_factory.mktemp("layout_pristine")
    generate(root, preset("tiny"), name=NAME)
    return root


@pytest.fixture
def root(pristine: Path, tmp_path: Path) -> Path:
    """A private copy of the synthetic dataset that a test may damage."""
    shutil.copytree(pristine, tmp_path / "root")
    return tmp_path / "root"


def as_official(root: Path, dataset: str = "f30k_precomp") -> None:
    """Lay the synthetic files out under an official name (its counts are checked then)."""
    shutil.copytree(root / NAME, root / dataset)
    shutil.copy(root / "vocab" / f"{NAME}_vocab.json", root / "vocab" / f"{dataset}_vocab.json")


def features(root: Path, split: str) -> Path:
    return root / NAME / f"{split}_ims.npy"


def test_good_layout_has_no_problems_and_a_row_per_split(root: Path) -> None:
    report = check_layout(root, NAME)
    assert report.ok and report.problems == [] and report.warnings == []
    assert [r.split for r in report.rows] == ["train", "dev", "test"]
    train = report.rows[0]
    assert (train.images, train.captions, train.captions_per_image) == (60, 300, 5)
    assert train.feature_shape == (60, 6, 16) and train.dtype == "float32"
    assert train.unk_share is not None and train.unk_share < 0.05
    table = report.table().splitlines()
    assert len(table) == 2 + 3 and table[0].split()[:3] == ["split", "images", "captions"]
    assert len({len(line) for line in table[:2]}) == 1  # header and rule aligned


def test_official_name_gives_count_warnings_only(root: Path) -> None:
    as_official(root)
    report = check_layout(root, "f30k_precomp")
    assert report.problems == []
    count_warnings = [w for w in report.warnings if "official f30k_precomp" in w]
    assert len(count_warnings) == 6  # images and captions of train, dev and test
    assert any("train_ims.npy: 60 images" in w and "29,000" in w for w in count_warnings)
    assert SPLIT_COUNTS["f30k_precomp"]["dev"] == (1_014, 5_070)


def test_missing_captions_file_is_a_problem(root: Path) -> None:
    (root / NAME / "dev_caps.txt").unlink()
    report = check_layout(root, NAME)
    assert len(report.problems) == 1 and "dev_caps.txt" in report.problems[0]
    assert len(report.rows) == 3 and report.rows[1].captions is None


def test_missing_vocabulary_is_a_problem(root: Path) -> None:
    (root / "vocab" / f"{NAME}_vocab.json").unlink()
    report = check_layout(root, NAME)
    assert any("vocabulary file not found" in p for p in report.problems)
    assert all(r.unk_share is None for r in report.rows)


def test_features_of_wrong_rank_are_a_problem(root: Path) -> None:
    np.save(features(root, "test"), np.zeros((30, 96), dtype=np.float32))
    report = check_layout(root, NAME)
    assert len(report.problems) == 1
    assert "test_ims.npy" in report.problems[0] and "rank 2" in report.problems[0]


def test_features_of_other_dim_than_other_splits_are_a_problem(root: Path) -> None:
    np.save(features(root, "dev"), np.zeros((30, 6, 8), dtype=np.float32))
    report = check_layout(root, NAME)
    assert len(report.problems) == 1 and "dev_ims.npy" in report.problems[0]


def test_unreadable_features_are_a_problem(root: Path) -> None:
    features(root, "train").write_bytes(b"not a numpy file")
    report = check_layout(root, NAME)
    assert len(report.problems) == 1 and "train_ims.npy: not a readable" in report.problems[0]


def test_captions_not_a_multiple_of_images_are_a_problem(root: Path) -> None:
    caps = root / NAME / "train_caps.txt"
    caps.write_text("".join(caps.read_text().splitlines(keepends=True)[:-1]))  # 299 captions
    report = check_layout(root, NAME)
    assert len(report.problems) == 1 and "299 captions" in report.problems[0]


def test_nan_in_a_sampled_row_is_found(root: Path) -> None:
    feats = np.load(features(root, "train"))
    feats[59, 2, 3] = np.nan  # the last row is always in the sample
    np.save(features(root, "train"), feats)
    report = check_layout(root, NAME, sample=4)
    assert len(report.problems) == 1 and "train_ims.npy: NaN or Inf in 1 image(s): 59" in report.problems[0]
    assert report.rows[0].scanned == 4


def test_nan_outside_the_sample_needs_a_full_scan(root: Path) -> None:
    assert 30 not in sample_rows(60, 4)
    feats = np.load(features(root, "train"))
    feats[30, 0, 0] = np.inf
    np.save(features(root, "train"), feats)
    assert check_layout(root, NAME, sample=4).ok
    seen: list[int] = []
    report = check_layout(root, NAME, full_scan=True, on_rows=seen.append)
    assert len(report.problems) == 1 and "1 image(s): 30 (full scan)" in report.problems[0]
    assert report.rows[0].scanned == 60 and sum(seen) == 60 + 30 + 30


def test_float64_features_are_a_warning(root: Path) -> None:
    np.save(features(root, "dev"), np.load(features(root, "dev")).astype(np.float64))
    report = check_layout(root, NAME)
    assert report.ok and len(report.warnings) == 1 and "float64" in report.warnings[0]
    assert report.rows[1].dtype == "float64"


def test_high_unk_share_is_a_warning(root: Path) -> None:
    (root / NAME / "test_caps.txt").write_text("zzz qqq xxx\n" * 150)
    report = check_layout(root, NAME)
    assert report.ok and report.rows[2].unk_share == 1.0
    assert len(report.warnings) == 1 and "<unk>" in report.warnings[0]


def test_missing_dataset_folder(tmp_path: Path) -> None:
    report = check_layout(tmp_path, "coco_precomp")
    assert report.problems == [f"{tmp_path / 'coco_precomp'}: dataset folder missing"]


def test_coco_requires_testall(root: Path) -> None:
    as_official(root, "coco_precomp")
    report = check_layout(root, "coco_precomp")
    assert [r.split for r in report.rows] == ["train", "dev", "testall", "test"]
    assert any("testall_ims.npy: feature file missing" in p for p in report.problems)
