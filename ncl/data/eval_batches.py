"""Evaluation in batches of pairs: what a backbone whose embeddings depend on their batch asks
for (:func:`ncl.models.contracts.eval_batching` ``pairs``; IN2R's centred VSE).

IN2R's official ``encode_data`` reads the evaluation split as (image, caption) pairs in
caption order, ``batch_size`` at a time, caption ``c`` with its image ``c // im_div`` (each
image once per caption), and keeps image ``i``'s embedding from the batch of its first caption
``i * im_div``. :class:`PairBatches` serves exactly those batches, each one collated whole, so
that under DDP every process encodes whole batches: Lightning's ``DistributedSampler`` deals
the *batches* (batch ``b`` to rank ``b % W``, the share padded with repeats of whole batches),
and an embedding is the same whatever the number of processes. A last batch of one pair joins
the batch before it (:func:`~ncl.data.samplers.deal_batches`; the official code would centre
it into the zero vector).

A batch holds ``images (B, R, D)``, ``tokens``, ``lengths``, ``index`` (the caption's) and
``image_index (B,)`` with ``-1`` where the caption is not its image's first (that row's image
embedding is not kept).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from ncl.data.datasets import Batch, PairDataset, collate
from ncl.data.precomp import PrecompSplit
from ncl.data.samplers import deal_batches


class PairBatches(Dataset):
    """Item ``k``: the ``k``-th batch of ``batch_size`` stored pairs in caption order.

    Args:
        split: an evaluation split (pairs as stored: caption ``c``, image ``c // im_div``).
        batch_size: pairs per batch (``data.eval_batch_size``).
    """

    def __init__(self, split: PrecompSplit, batch_size: int) -> None:
        im_div = int(split.im_div)
        self.im_div = im_div
        self.pairs = PairDataset(split, np.arange(split.n_captions) // im_div)
        self.batches = deal_batches(np.arange(split.n_captions), batch_size)

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, k: int) -> Batch:
        captions = self.batches[k]
        batch = collate([self.pairs[int(c)] for c in captions])
        first = torch.from_numpy(captions % self.im_div == 0)
        image = torch.from_numpy(captions // self.im_div)
        batch["image_index"] = torch.where(first, image, torch.full_like(image, -1))
        return batch


def is_pair_batch(batch: Batch) -> bool:
    """Whether an evaluation batch is a :class:`PairBatches` item."""
    return "image_index" in batch


def whole_batch(batch: Batch) -> Batch:
    """The collate function of a loader of :class:`PairBatches` (items are batches already)."""
    return batch
