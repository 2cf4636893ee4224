"""MSCN's batch plans and meta sets (``main_MSCN.py`` at hhc1997/MSCN 01febc2), kept apart
from the LightningModule (:mod:`ncl.methods.mscn`).

Everything here is a pure function of ``(seed, epoch, ...)``: a resumed run draws what the
uninterrupted run drew, and every DDP rank draws the same.

* Warm-up epoch: network A makes one pass over its own shuffle of the training pairs at the
  warm-up batch size (official: twice the batch size), then B.
* Co-training epoch: B trains on A's purified (predicted-clean) pairs, then A on B's (the
  official order), each a pass over a shuffle; every ``meta_interval``-th step also gets a
  meta batch.
* Meta batches: the meta set (label 1) followed by as many non-corresponding training pairs
  (label 0, :func:`~ncl.data.meta_split.draw_negatives`), shuffled, cut into batches of the
  training batch size and re-shuffled whenever they run out (the official ``meta_C`` loader,
  whose iterator is re-created on ``StopIteration``).
* Negatives are redrawn at the start of each network's training (``train`` calls
  ``get_add_non_correspondence_idx``); the purification of a network uses the draw in
  effect when it runs: :func:`negative_draw` numbers them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch.utils.data import Dataset

from ncl.data.datasets import collate
from ncl.data.meta_split import MetaPairs, MetaSet, draw_negatives
from ncl.data.precomp import PrecompSplit
from ncl.data.samplers import rng_for
from ncl.streams import declare_stream
from ncl.training.plans import chunk, shard

#: MSCN's random streams (:mod:`ncl.streams`): the training shuffles (warm-up and
#: co-training), the meta batches' shuffles, the non-corresponding meta pairs, the method's own meta set.
TRAIN_STREAM = declare_stream(91, "mscn.train_order")
META_ORDER_STREAM = declare_stream(92, "mscn.meta_order")
NEGATIVE_STREAM = declare_stream(93, "mscn.meta_negatives")
#: The method's own meta set (``model.meta_train_images``).
META_DRAW_STREAM = declare_stream(94, "mscn.meta_draw")

#: Network indices: A trains second in a co-training epoch, on B's purification.
NET_A, NET_B = 0, 1


@dataclass(frozen=True)
class MscnStep:
    """One step: network ``net`` on the training indices ``train`` and, for a meta step, the
    meta-set items ``meta`` (``None``: no meta update in this step)."""

    net: int
    train: np.ndarray
    meta: np.ndarray | None = None


def negative_draw(cotrain_epoch: int, net: int, purpose: str) -> int:
    """The number of the negative draw in effect (the official meta loader's draws in order:
    0 when it is built, then one at the start of each network's training, B before A).

    ``purpose``: ``"train"`` (network ``net`` trains in co-training epoch ``c``: B's draw is
    ``2c + 1``, A's ``2c + 2``) or ``"purify"`` (A's purification of epoch ``c`` sees A's
    previous draw ``2c``; B's, made after its draw, ``2c + 1``).
    """
    if purpose == "train":
        return 2 * cotrain_epoch + (1 if net == NET_B else 2)
    if purpose == "purify":
        return 2 * cotrain_epoch + (1 if net == NET_B else 0)
    raise ValueError(f"purpose must be 'train' or 'purify', got {purpose!r}")


def meta_pairs(meta: MetaSet, train: PrecompSplit, candidates: np.ndarray, written_for: np.ndarray,
               images: np.ndarray, seed: int, draw: int) -> MetaPairs:
    """The meta set with draw ``draw``'s non-corresponding pairs (as many as meta pairs):
    captions from ``candidates``, images from ``images``, never a caption's ``written_for``."""
    caps, imgs = draw_negatives(candidates, written_for, images, len(meta),
                                rng_for(seed, draw, NEGATIVE_STREAM, 0))
    return MetaPairs(meta, train, caps, imgs)


def warmup_steps(pool: np.ndarray, batch_size: int, seed: int, epoch: int, rank: int,
                 world: int) -> list[MscnStep]:
    """A's pass over its shuffle of ``pool``, then B's."""
    steps: list[MscnStep] = []
    for net in (NET_A, NET_B):
        order = rng_for(seed, epoch, TRAIN_STREAM, net).permutation(pool)
        steps += [MscnStep(net, b) for b in chunk(shard(order, rank, world), batch_size)]
    return steps


def meta_batches(n_items: int, count: int, batch_size: int, seed: int, epoch: int, net: int,
                 rank: int, world: int) -> list[np.ndarray]:
    """``count`` batches of meta-set items, re-shuffled whenever a pass runs out."""
    out: list[np.ndarray] = []
    cycle = 0
    while len(out) < count:
        order = rng_for(seed, epoch, META_ORDER_STREAM, net, cycle).permutation(n_items)
        batches = chunk(shard(order, rank, world), batch_size)
        if not batches:
            raise ValueError(f"a meta set of {n_items} items gives no batch of two on this rank")
        out += batches
        cycle += 1
    return out[:count]


def cotrain_steps(clean: tuple[np.ndarray, np.ndarray], n_meta_items: tuple[int, int],
                  batch_size: int, meta_interval: int, seed: int, epoch: int, rank: int,
                  world: int) -> list[MscnStep]:
    """B's pass over A's purified pairs, then A's over B's, with a meta batch every
    ``meta_interval``-th step (the official ``(iteration + 1) % meta_interval == 0``).

    Args:
        clean: per network, the ``(N,)`` bool mask of the pairs *its* purification keeps.
        n_meta_items: per network, the size of the meta set it trains with this epoch.
    """
    steps: list[MscnStep] = []
    for net in (NET_B, NET_A):
        pool = np.flatnonzero(clean[1 - net])
        order = rng_for(seed, epoch, TRAIN_STREAM, net).permutation(pool)
        batches = chunk(shard(order, rank, world), batch_size)
        due = [(t + 1) % meta_interval == 0 for t in range(len(batches))]
        metas = iter(meta_batches(n_meta_items[net], sum(due), batch_size, seed, epoch, net,
                                  rank, world))
        steps += [MscnStep(net, b, next(metas) if d else None) for b, d in zip(batches, due)]
    return steps


class MscnStepDataset(Dataset):
    """Item ``k`` = step ``k``: ``{"net", "train": Batch, "meta": Batch with "label"}``."""

    def __init__(self, pairs: Dataset, metas: dict[int, MetaPairs], steps: list[MscnStep]) -> None:
        self.pairs, self.metas, self.steps = pairs, metas, steps

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, k: int) -> dict[str, object]:
        step = self.steps[k]
        item: dict[str, object] = {"net": step.net,
                                   "train": collate([self.pairs[int(i)] for i in step.train])}
        if step.meta is not None:
            metas = self.metas[step.net]
            batch = collate([metas[int(i)] for i in step.meta])
            batch["label"] = metas.labels(batch["index"])
            item["meta"] = batch
        return item
