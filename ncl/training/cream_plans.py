"""CREAM's (TIP 2024) batches of an epoch as a plan: a pure function of ``(seed, epoch,
division, rank, world)``, so the same after a resume and on every rank.

The official code warms up network A for one pass over a shuffled loader of every pair, then
B over another shuffle. A co-training epoch trains A, then B, each on three loaders built
anew for the network (new shuffles) over the *one* split both use:

* the **clean** loader drives the epoch: one iteration per clean batch (a last batch of one
  pair ends the epoch, the official ``break``);
* the **hard** loader is advanced once per iteration and never restarted: once exhausted,
  its last batch stays (the official ``except`` keeps the stale variables), it is still
  predicted (its targets enter the filter) but no longer trained on (``hard_fresh`` false);
* the **noisy** loader is advanced once per iteration and re-shuffled when exhausted.

DDP: each shuffled list is sharded as ``DistributedSampler(shuffle=False)`` does
(:func:`~ncl.training.plans.shard`) before it is cut into per-process batches, so every rank
has the same number of steps, batch sizes and hard exhaustion.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch.utils.data import Dataset

from ncl.data.datasets import collate
from ncl.data.samplers import rng_for
from ncl.streams import declare_stream
from ncl.training.plans import chunk, limit_steps, shard

#: Stream ids of CREAM's shuffles (:mod:`ncl.streams`); 71-79 are CREAM's.
WARMUP_STREAM = declare_stream(71, "cream.warmup")
CLEAN_STREAM = declare_stream(72, "cream.clean")
HARD_STREAM = declare_stream(73, "cream.hard")
NOISY_STREAM = declare_stream(74, "cream.noisy")


@dataclass(frozen=True)
class PlanStreams:
    """The stream ids of a plan's four shuffles (SPS, which reuses the plan, has its own)."""

    warmup: int = WARMUP_STREAM
    driving: int = CLEAN_STREAM  # the loader that drives the epoch (CREAM's clean)
    held: int = HARD_STREAM  # the loader that is never restarted (CREAM's hard)
    cycled: int = NOISY_STREAM  # the loader re-shuffled when exhausted (the noisy one)


CREAM_STREAMS = PlanStreams()


@dataclass(frozen=True)
class CreamStep:
    """One iteration of one network.

    Attributes:
        net: the network trained (0 = A, 1 = B).
        clean: ``(B_c,)`` dataset indices of the clean (or warm-up) batch.
        hard: ``(B_h,)`` indices of the hard batch, or ``None`` (no hard pair, or warm-up).
        hard_fresh: whether ``hard`` is a new batch (trained on) or the stale last one.
        noisy: ``(B_n,)`` indices of the noisy batch, or ``None``.
    """

    net: int
    clean: np.ndarray
    hard: np.ndarray | None = None
    hard_fresh: bool = False
    noisy: np.ndarray | None = None


def warmup_steps(num_pairs: int, batch_size: int, seed: int, epoch: int, rank: int = 0,
                 world: int = 1, stream: int = WARMUP_STREAM) -> list[CreamStep]:
    """A's pass over its own shuffle of every pair, then B's (a last batch of one dropped)."""
    steps: list[CreamStep] = []
    for net in (0, 1):
        order = rng_for(seed, epoch, stream, net).permutation(num_pairs)
        steps += [CreamStep(net, b) for b in chunk(shard(order, rank, world), batch_size)]
    return steps


def cycled(pool: np.ndarray, count: int, batch_size: int, seed: int, epoch: int, net: int,
           stream: int, rank: int = 0, world: int = 1) -> list[np.ndarray | None]:
    """``count`` batches of ``pool`` (every batch kept, a last short one too), re-shuffled
    whenever a pass is exhausted; all ``None`` when this rank's share is empty."""
    if count == 0 or len(shard(pool, rank, world)) == 0:
        return [None] * count
    out: list[np.ndarray | None] = []
    cycle = 0
    while len(out) < count:
        order = rng_for(seed, epoch, stream, net, cycle).permutation(pool)
        out += chunk(shard(order, rank, world), batch_size, min_size=1)
        cycle += 1
    return out[:count]


def held(pool: np.ndarray, count: int, batch_size: int, seed: int, epoch: int, net: int,
         rank: int = 0, world: int = 1, stream: int = HARD_STREAM) -> list[tuple[np.ndarray | None, bool]]:
    """``count`` (batch, fresh) pairs of a loader that is never restarted: one pass over a
    shuffle of ``pool``, then its last batch again, stale (``fresh`` false)."""
    if count == 0 or len(shard(pool, rank, world)) == 0:
        return [(None, False)] * count
    order = rng_for(seed, epoch, stream, net).permutation(pool)
    batches = chunk(shard(order, rank, world), batch_size, min_size=1)
    return [(batches[i], True) if i < len(batches) else (batches[-1], False) for i in range(count)]


def cotrain_steps(subset: np.ndarray, batch_size: int, seed: int, epoch: int, rank: int = 0,
                  world: int = 1, codes: tuple[int, int, int] = (0, 1, 2),
                  streams: PlanStreams = CREAM_STREAMS) -> list[CreamStep]:
    """A co-training epoch: A's iterations, then B's, each over its own shuffles of the subsets.

    Args:
        subset: ``(N,)`` subset codes both networks train on
            (:func:`~ncl.division.cream.agreement_split`), or ``(2, N)``: network ``k`` trains
            on row ``1 - k`` (SPS: each network on its peer's split).
        batch_size: per-process batch size of the three loaders.
        seed, epoch, rank, world: the plan's seed and DDP position.
        codes: the codes of the driving (clean), held (hard) and cycled (noisy) subsets.
        streams: the stream ids of the shuffles.
    """
    steps: list[CreamStep] = []
    for net in (0, 1):
        codes_of = subset if subset.ndim == 1 else subset[1 - net]
        driving, kept, cycling = (np.flatnonzero(codes_of == code) for code in codes)
        order = rng_for(seed, epoch, streams.driving, net).permutation(driving)
        batches = chunk(shard(order, rank, world), batch_size)
        hards = held(kept, len(batches), batch_size, seed, epoch, net, rank, world, streams.held)
        noisies = cycled(cycling, len(batches), batch_size, seed, epoch, net, streams.cycled, rank, world)
        steps += [CreamStep(net, c, h, fresh, n) for c, (h, fresh), n in zip(batches, hards, noisies)]
    return steps


def cream_plan(num_pairs: int, batch_size: int, seed: int, epoch: int, *, subset: np.ndarray | None,
               limit: int | float = 1.0, rank: int = 0, world: int = 1,
               codes: tuple[int, int, int] = (0, 1, 2),
               streams: PlanStreams = CREAM_STREAMS) -> list[CreamStep]:
    """One epoch's steps: the warm-up (``subset`` ``None``) or a co-training epoch
    (:func:`cotrain_steps`), then ``trainer.limit_train_batches`` shared between A and B
    (:func:`~ncl.training.plans.limit_steps`)."""
    if subset is None:
        steps = warmup_steps(num_pairs, batch_size, seed, epoch, rank, world, streams.warmup)
    else:
        steps = cotrain_steps(subset, batch_size, seed, epoch, rank, world, codes, streams)
    return limit_steps(steps, limit)  # type: ignore[arg-type]


class CreamStepDataset(Dataset):
    """Item ``k``: step ``k`` collated, ``{"net", "clean"[, "hard", "hard_fresh"][, "noisy"]}``
    (batches as :func:`ncl.data.datasets.collate` builds them)."""

    def __init__(self, pairs: Dataset, steps: list[CreamStep]) -> None:
        self.pairs, self.steps = pairs, steps

    def __len__(self) -> int:
        return len(self.steps)

    def _batch(self, indices: np.ndarray) -> object:
        return collate([self.pairs[int(i)] for i in indices])

    def __getitem__(self, k: int) -> dict[str, object]:
        step = self.steps[k]
        item: dict[str, object] = {"net": step.net, "clean": self._batch(step.clean)}
        if step.hard is not None:
            item["hard"], item["hard_fresh"] = self._batch(step.hard), step.hard_fresh
        if step.noisy is not None:
            item["noisy"] = self._batch(step.noisy)
        return item
