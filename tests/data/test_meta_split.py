"""Meta splits (ncl.data.meta_split): the seeded draws, the non-corresponding pairs, the
DataModules' options and errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ncl.data.meta_split import (MetaPairs, MetaSplitPrecompDataModule, MetaSplitSyntheticDataModule,
                                 draw_dev_pairs, draw_negatives, draw_train_pairs)
from ncl.errors import ConfigError, DataError


def test_dev_pairs_are_seeded_distinct_and_paired_with_their_image() -> None:
    caps, imgs = draw_dev_pairs(50, 5, 12, np.random.default_rng(3))
    again, _ = draw_dev_pairs(50, 5, 12, np.random.default_rng(3))
    assert caps.tolist() == again.tolist() and len(set(caps.tolist())) == 12
    assert (imgs == caps // 5).all()
    all_caps, _ = draw_dev_pairs(50, 5, None, np.random.default_rng(3))
    assert all_caps.tolist() == list(range(50))
    with pytest.raises(ConfigError, match="meta_size"):
        draw_dev_pairs(50, 5, 51, np.random.default_rng(0))


def test_train_pairs_remove_every_caption_of_their_images() -> None:
    caps, imgs, removed = draw_train_pairs(10, 5, 3, np.random.default_rng(0))
    assert (caps // 5 == imgs).all() and len(set(imgs.tolist())) == 3
    assert removed.sum() == 15
    assert set(np.flatnonzero(removed) // 5) == set(imgs.tolist())


def test_negatives_never_pair_a_caption_with_its_own_image() -> None:
    written_for = np.arange(40) // 4  # 10 images
    caps, imgs = draw_negatives(np.arange(40), written_for, np.arange(10), 30, np.random.default_rng(0))
    assert len(set(caps.tolist())) == 30  # without replacement
    assert (imgs != written_for[caps]).all()
    # two images: every negative takes the other one
    caps, imgs = draw_negatives(np.arange(8), np.arange(8) // 4, np.arange(2), 8, np.random.default_rng(1))
    assert (imgs == 1 - caps // 4).all()
    with pytest.raises(ConfigError):
        draw_negatives(np.arange(4), np.arange(4), np.arange(4), 5, np.random.default_rng(0))


def test_synthetic_meta_split_and_its_items(tmp_path: Path) -> None:
    dm = MetaSplitSyntheticDataModule(preset="tiny", cache_dir=str(tmp_path), meta_size=10,
                                      noise_type="caption", noise_ratio=0.4)
    dm.setup("fit")
    meta = dm.meta_set()
    assert len(meta) == 10 and meta.train_removed is None
    dev = meta.splits[0]
    train = dm.train_pairs().split
    negs = draw_negatives(np.arange(train.n_captions), np.arange(train.n_captions) // train.im_div,
                          np.arange(train.n_images), 10, np.random.default_rng(0))
    pairs = MetaPairs(meta, train, *negs)
    assert len(pairs) == 20
    first, last = pairs[0], pairs[19]
    assert np.array_equal(first["tokens"].numpy(), dev.tokens(int(meta.captions[0])))
    assert np.array_equal(last["image"].numpy(), np.asarray(train.features[negs[1][9]], np.float32))
    import torch
    assert pairs.labels(torch.tensor([0, 9, 10, 19])).tolist() == [1, 1, 0, 0]


def test_options_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="meta_source"):
        MetaSplitSyntheticDataModule(preset="tiny", cache_dir=str(tmp_path), meta_source="other")
    with pytest.raises(ConfigError, match="meta_train_size"):
        MetaSplitSyntheticDataModule(preset="tiny", cache_dir=str(tmp_path), meta_source="dev+train")
    with pytest.raises(ConfigError, match="files"):
        MetaSplitSyntheticDataModule(preset="tiny", cache_dir=str(tmp_path), meta_source="files")


def test_files_source_without_files_is_one_data_error(tmp_path: Path) -> None:
    dm = MetaSplitSyntheticDataModule(preset="tiny", cache_dir=str(tmp_path))
    root = dm.data_dir.parent
    with pytest.raises(DataError, match="meta_ims.npy"):
        MetaSplitPrecompDataModule(data_root=str(root), data_name="synthetic_precomp",
                                   meta_source="files")


def test_dev_plus_train_source(tmp_path: Path) -> None:
    dm = MetaSplitSyntheticDataModule(preset="tiny", cache_dir=str(tmp_path), meta_source="dev+train",
                                      meta_size=None, meta_train_size=4)
    dm.setup("fit")
    meta = dm.meta_set()
    n_dev = meta.splits[0].n_captions
    assert len(meta) == n_dev + 4 and meta.source.tolist() == [0] * n_dev + [1] * 4
    assert meta.train_removed.sum() == 4 * dm.train_pairs().split.im_div


def test_files_source_reads_the_meta_files(tmp_path: Path) -> None:
    import shutil

    dm = MetaSplitSyntheticDataModule(preset="tiny", cache_dir=str(tmp_path / "cache"))
    root = tmp_path / "data"
    shutil.copytree(dm.data_dir.parent, root)
    folder = root / "synthetic_precomp"
    features = np.load(folder / "test_ims.npy")[:4]  # 4 meta images, one caption each
    np.save(folder / "meta_ims.npy", features)
    captions = (folder / "test_caps.txt").read_text().splitlines()[:20:5]
    (folder / "meta_caps.txt").write_text("\n".join(captions) + "\n")
    files = MetaSplitPrecompDataModule(data_root=str(root), data_name="synthetic_precomp",
                                       meta_source="files")
    meta = files.meta_set()
    assert len(meta) == 4 and meta.captions.tolist() == meta.images.tolist() == [0, 1, 2, 3]
    split = meta.splits[0]
    assert split.im_div == 1 and np.array_equal(np.asarray(split.features[2]), features[2])
    assert split.captions[1] == captions[1]
