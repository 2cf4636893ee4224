"""Torch datasets over a :class:`~ncl.data.precomp.PrecompSplit` and their collate function.

Training batches are dicts::

    images   (B, R, D) float32   features of the image each caption is paired with (noisy)
    tokens   (B, L)    int64     caption ids, zero-padded (<pad> = 0)
    lengths  (B,)      int64     true lengths, <start>/<end> included
    index    (B,)      int64     the caption's index in the training split

``index`` lets methods keep per-sample state (clean probabilities, soft labels). The
ground-truth clean flag is deliberately *not* in the batch.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from ncl.data.precomp import PrecompSplit

Batch = dict[str, Tensor]


def _image(split: PrecompSplit, image: int) -> Tensor:
    # np.array copies the memory-mapped rows into RAM (one image, R x D floats).
    return torch.from_numpy(np.array(split.features[image], dtype=np.float32))


class PairDataset(Dataset):
    """Caption ``c`` with the image ``cap2img[c]`` it is (possibly wrongly) paired with."""

    def __init__(self, split: PrecompSplit, cap2img: np.ndarray) -> None:
        if len(cap2img) != split.n_captions:
            raise ValueError(f"cap2img has {len(cap2img)} entries for {split.n_captions} captions")
        self.split, self.cap2img = split, cap2img

    def __len__(self) -> int:
        return self.split.n_captions

    def __getitem__(self, c: int) -> dict[str, object]:
        return {"image": _image(self.split, int(self.cap2img[c])),
                "tokens": torch.from_numpy(self.split.tokens(c).astype(np.int64)), "index": c}


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
    """Stack images, zero-pad tokens to the batch's longest caption, keep indices."""
    batch: Batch = {"index": torch.tensor([int(it["index"]) for it in items], dtype=torch.long)}
    if "image" in items[0]:
        batch["images"] = torch.stack([it["image"] for it in items])  # (B, R, D)
    if "tokens" in items[0]:
        seqs = [it["tokens"] for it in items]
        lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
        tokens = torch.zeros(len(seqs), int(lengths.max()), dtype=torch.long)  # (B, L)
        for row, seq in enumerate(seqs):
            tokens[row, : len(seq)] = seq
        batch["tokens"], batch["lengths"] = tokens, lengths
    return batch
