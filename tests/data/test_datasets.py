"""``collate`` with fixed and variable region counts; ``PairDataset`` keys; ``EpochBatchSampler``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ncl.data.augment import CaptionRegionAugment
from ncl.data.datasets import EpochBatchSampler, PairDataset, collate
from ncl.data.precomp import PrecompSplit
from ncl.data.samplers import EpochShuffleSampler
from ncl.errors import ConfigError


def _item(index: int, regions: int, length: int, dim: int = 3) -> dict[str, object]:
    g = torch.Generator().manual_seed(index)
    return {"image": torch.randn(regions, dim, generator=g),
            "tokens": torch.randint(1, 9, (length,), generator=g), "index": index}


def test_equal_region_counts_are_stacked_as_before() -> None:
    items = [_item(i, regions=4, length=3 + i) for i in range(3)]
    batch = collate(items)
    assert set(batch) == {"images", "tokens", "lengths", "index"}  # no image_lengths
    assert torch.equal(batch["images"], torch.stack([it["image"] for it in items]))
    assert batch["lengths"].tolist() == [3, 4, 5] and batch["tokens"].shape == (3, 5)


def test_variable_region_counts_are_padded_with_lengths() -> None:
    items = [_item(0, regions=2, length=3), _item(1, regions=5, length=4), _item(2, regions=1, length=2)]
    batch = collate(items)
    images, counts = batch["images"], batch["image_lengths"]
    assert images.shape == (3, 5, 3) and images.dtype == torch.float32
    assert counts.dtype == torch.int64 and counts.tolist() == [2, 5, 1]
    for row, item in enumerate(items):
        r = int(counts[row])
        assert torch.equal(images[row, :r], item["image"])
        assert not images[row, r:].any()  # zero padding
    assert batch["index"].tolist() == [0, 1, 2] and batch["lengths"].tolist() == [3, 4, 2]


def test_captions_only_and_images_only_batches() -> None:
    caps = collate([{"tokens": torch.tensor([1, 5, 2]), "index": 7}])
    assert set(caps) == {"tokens", "lengths", "index"}
    ims = collate([{"image": torch.ones(2, 3), "index": 0}, {"image": torch.ones(3, 3), "index": 1}])
    assert set(ims) == {"images", "image_lengths", "index"}


def _split(n_images: int = 4, per: int = 2, regions: int = 3, dim: int = 2) -> PrecompSplit:
    feats = np.arange(n_images * regions * dim, dtype=np.float32).reshape(n_images, regions, dim)
    n_cap = n_images * per
    ids = np.concatenate([[1, 4 + c % 5, 5, 6, 2] for c in range(n_cap)]).astype(np.int32)
    offsets = np.arange(0, 5 * n_cap + 1, 5, dtype=np.int64)
    return PrecompSplit("train", feats, ["x"] * n_cap, per, ids, offsets, None)  # type: ignore[arg-type]


def test_pair_dataset_keys() -> None:
    split = _split()
    plain = PairDataset(split, np.arange(8) // 2)
    a, b = plain[3], plain[(5, 3)]  # an (epoch, index) key reads the same pair when not augmented
    assert a["index"] == b["index"] == 3 and torch.equal(a["tokens"], b["tokens"])
    augmented = PairDataset(split, np.arange(8) // 2, CaptionRegionAugment(), seed=0, vocab_size=10)
    with pytest.raises(KeyError, match=r"\(epoch, index\) keys"):
        augmented[3]
    with pytest.raises(ValueError, match="vocab_size"):
        PairDataset(split, np.arange(8) // 2, CaptionRegionAugment())


def test_epoch_batch_sampler_tags_the_sampler_epoch() -> None:
    sampler = EpochShuffleSampler(10, seed=3)
    batches = EpochBatchSampler(sampler, batch_size=4, drop_last=False)
    sampler.set_epoch(2)
    keys = list(batches)
    assert len(batches) == 3 and [len(b) for b in keys] == [4, 4, 2]
    assert {e for b in keys for e, _ in b} == {2}
    assert [i for b in keys for _, i in b] == list(sampler)  # the epoch-2 permutation
    with pytest.raises(ConfigError, match="no epoch"):
        list(EpochBatchSampler(torch.utils.data.RandomSampler(range(4)), 2, False))
