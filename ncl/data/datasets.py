"""Torch datasets over a :class:`~ncl.data.precomp.PrecompSplit` and their collate function.

Training batches are dicts::

    images         (B, R, D) float32   features of the image each caption is paired with (noisy)
    image_lengths  (B,)      int64     only when the batch's images have different region
                                       counts R_i (region-removing augmentation): the true
                                       counts; ``images`` is then zero-padded to R = max R_i
    tokens         (B, L)    int64     caption ids, zero-padded (<pad> = 0)
    lengths        (B,)      int64     true lengths, <start>/<end> included
    index          (B,)      int64     the caption's index in the training split

``index`` lets methods keep per-sample state (clean probabilities, soft labels). The
ground-truth clean flag is deliberately *not* in the batch. Without ``image_lengths`` every
image has all R rows (the official precomputed features: always).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import BatchSampler, Dataset

from ncl.data.augment import Augmentation, sample_rng
from ncl.data.precomp import PrecompSplit
from ncl.errors import ConfigError

#: An item key: a caption index, or ``(epoch, caption index)`` from :class:`EpochBatchSampler`.
PairKey = int | tuple[int, int]

Batch = dict[str, Tensor]


def _image(split: PrecompSplit, image: int) -> Tensor:
    # np.array copies the memory-mapped rows into RAM (one image, R x D floats).
    return torch.from_numpy(np.array(split.features[image], dtype=np.float32))


class PairDataset(Dataset):
    """Caption ``c`` with the image ``cap2img[c]`` it is (possibly wrongly) paired with.

    With an ``augment``ation, items must be read with ``(epoch, c)`` keys (as
    :class:`EpochBatchSampler` yields them): the augmentation of caption ``c`` in ``epoch``
    draws from :func:`~ncl.data.augment.sample_rng` ``(seed, epoch, c)`` only, so it does not
    depend on the DataLoader worker that reads it, nor on whether the run was resumed.

    Args:
        split: the training split.
        cap2img: ``(N_cap,)`` image of every caption (the noisy pairing).
        augment: training augmentation (``None``: the pairs as stored).
        seed: base seed of the augmentation.
        vocab_size: V, handed to the augmentation (``<mask>`` is id V); required with ``augment``.
    """

    def __init__(self, split: PrecompSplit, cap2img: np.ndarray, augment: Augmentation | None = None,
                 seed: int = 0, vocab_size: int | None = None) -> None:
        if len(cap2img) != split.n_captions:
            raise ValueError(f"cap2img has {len(cap2img)} entries for {split.n_captions} captions")
        if augment is not None and vocab_size is None:
            raise ValueError("an augmented PairDataset needs vocab_size (the <mask> id)")
        self.split, self.cap2img = split, cap2img
        self.augment, self.seed, self.vocab_size = augment, seed, vocab_size

    def __len__(self) -> int:
        return self.split.n_captions

    def __getitem__(self, key: PairKey) -> dict[str, object]:
        epoch, c = (int(key[0]), int(key[1])) if isinstance(key, tuple) else (None, int(key))
        item: dict[str, object] = {"image": _image(self.split, int(self.cap2img[c])),
                                   "tokens": torch.from_numpy(self.split.tokens(c).astype(np.int64)),
                                   "index": c}
        if self.augment is None:
            return item
        if epoch is None:
            raise KeyError(f"an augmented PairDataset is read with (epoch, index) keys "
                           f"(EpochBatchSampler), got {key!r}")
        return self.augment(item, sample_rng(self.seed, epoch, c), self.vocab_size)


class EpochBatchSampler(BatchSampler):
    """Batches of ``(epoch, index)`` keys: ``sampler``'s indices tagged with its epoch.

    The epoch is read from ``sampler.epoch`` (:class:`~ncl.data.samplers.EpochShuffleSampler`,
    :class:`~torch.utils.data.distributed.DistributedSampler`; Lightning calls their
    ``set_epoch``) when an epoch's first batch is drawn, which is the moment the sampler
    draws that epoch's order: the keys carry the epoch of the very permutation they come
    from, into whichever worker process reads them. A dataset copied into persistent
    workers therefore needs no epoch of its own.

    Under DDP Lightning re-creates it around its ``DistributedSampler`` (a ``BatchSampler``
    subclass with a ``sampler`` argument), with the other arguments as first given.

    Args:
        sampler: a sampler with an ``epoch`` attribute.
        batch_size: keys per batch.
        drop_last: drop a final incomplete batch.
        start_epoch: when given, ``sampler.set_epoch(start_epoch)`` is called here. Lightning
            creates a run's first iterator (which, with workers, draws the first batches)
            before it calls ``set_epoch``; starting at the right epoch keeps a resumed run
            exact, and survives Lightning's re-creation around its ``DistributedSampler``.
    """

    def __init__(self, sampler: torch.utils.data.Sampler[int], batch_size: int, drop_last: bool,
                 start_epoch: int | None = None) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.start_epoch = start_epoch
        set_epoch = getattr(sampler, "set_epoch", None)
        if start_epoch is not None and callable(set_epoch):
            set_epoch(start_epoch)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        epoch = getattr(self.sampler, "epoch", None)
        if epoch is None:
            raise ConfigError(f"data.augment needs an epoch-aware training sampler; "
                              f"{type(self.sampler).__name__} has no epoch (under DDP, keep "
                              f"trainer.use_distributed_sampler true)")
        for batch in super().__iter__():
            yield [(int(epoch), int(i)) for i in batch]


class ImageDataset(Dataset):
    """Every image of a split once (evaluation encodes each image once, spec 6.4)."""

    def __init__(self, split: PrecompSplit) -> None:
        self.split = split

    def __len__(self) -> int:
        return self.split.n_images

    def __getitem__(self, i: int) -> dict[str, object]:
        return {"image": _image(self.split, i), "index": i}


class CaptionDataset(Dataset):
    """Every caption of a split (evaluation)."""

    def __init__(self, split: PrecompSplit) -> None:
        self.split = split

    def __len__(self) -> int:
        return self.split.n_captions

    def __getitem__(self, c: int) -> dict[str, object]:
        return {"tokens": torch.from_numpy(self.split.tokens(c).astype(np.int64)), "index": c}


def collate(items: list[dict[str, object]]) -> Batch:
    """Stack images, zero-pad tokens to the batch's longest caption, keep indices.

    Images with different region counts ``R_i`` are zero-padded to ``max R_i`` and the batch
    gains ``image_lengths (B,)``; when all counts are equal the images are stacked as they
    are and there is no ``image_lengths`` key (SGRAF's fixed-R batches are unchanged).
    """
    batch: Batch = {"index": torch.tensor([int(it["index"]) for it in items], dtype=torch.long)}
    if "image" in items[0]:
        images = [it["image"] for it in items]
        counts = [int(im.shape[0]) for im in images]
        if min(counts) == max(counts):
            batch["images"] = torch.stack(images)  # (B, R, D)
        else:
            padded = images[0].new_zeros((len(images), max(counts), *images[0].shape[1:]))
            for row, image in enumerate(images):
                padded[row, : counts[row]] = image
            batch["images"] = padded  # (B, max R_i, D), zero rows beyond R_i
            batch["image_lengths"] = torch.tensor(counts, dtype=torch.long)  # (B,)
    if "tokens" in items[0]:
        seqs = [it["tokens"] for it in items]
        lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
        tokens = torch.zeros(len(seqs), int(lengths.max()), dtype=torch.long)  # (B, L)
        for row, seq in enumerate(seqs):
            tokens[row, : len(seq)] = seq
        batch["tokens"], batch["lengths"] = tokens, lengths
    return batch
