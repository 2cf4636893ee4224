"""Per-epoch batch plans for co-teaching (NCR/LNC; spec 4.2.3, 4.2.5-4.2.6).

The official NCR code trains network A for one pass over its own shuffled loader, then B
(warm-up), and in co-training iterates a shuffled *labelled* loader over the peer's clean
set with a shuffled *unlabelled* loader over the peer's noisy set that is re-created
(re-shuffled) whenever it runs out. Here one epoch is a flat list of :class:`Step`\\ s that
reproduces exactly that sampling: first all of A's steps, then all of B's, each step
holding the dataset indices of one labelled batch (and one unlabelled batch when the step
needs it). The plan is a pure function of ``(seed, epoch, division, rank, world)``, so it
is the same after a resume and consistent across DDP ranks.

DDP: each rank gets the :class:`~torch.utils.data.DistributedSampler` share of every
shuffled index list (padded with repeats to a multiple of the world size, then
``rank::world``), cut into per-process batches. All ranks therefore get the same number of
steps, the same batch sizes and the same network per step, which keeps the manual
gradient all-reduce in lock step.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from ncl.data.datasets import Batch, collate
# The training streams and their generator live with the other streams (ncl.data.samplers),
# where ncl predict's scoring batches, which replay the co-divide's shuffle, read them too.
from ncl.data.samplers import (  # noqa: F401 - the stream names are imported from here as well
    DIVISION_STREAM,
    LABELLED_STREAM,
    UNLABELLED_STREAM,
    WARMUP_STREAM,
    rng_for,
)
from ncl.errors import ConfigError, TrainingError


@dataclass(frozen=True)
class Step:
    """One training step: which network is trained and on which dataset indices.

    Attributes:
        net: index of the network trained in this step (0 = A, 1 = B).
        labelled: ``(B_l,)`` indices of the labelled (or warm-up) batch.
        unlabelled: ``(B_u,)`` indices of the unlabelled batch, or ``None``.
    """

    net: int
    labelled: np.ndarray
    unlabelled: np.ndarray | None = None


def shard(indices: np.ndarray, rank: int, world: int) -> np.ndarray:
    """This rank's share of ``indices`` exactly as ``DistributedSampler(shuffle=False)``.

    The list is padded by cycling from its start to a multiple of ``world``; rank ``r``
    takes positions ``r, r + world, ...``.
    """
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank must lie in [0, world) with world >= 1, got rank={rank}, world={world}")
    if world == 1 or len(indices) == 0:
        return indices
    total = math.ceil(len(indices) / world) * world
    return np.resize(indices, total)[rank::world]


def chunk(indices: np.ndarray, batch_size: int, min_size: int = 2) -> list[np.ndarray]:
    """Consecutive batches of ``batch_size``; a last batch smaller than ``min_size`` is dropped.

    The official loops ``break`` on a batch of one (BatchNorm in train mode and in-batch
    negatives need two pairs, spec 4.1); dropping it is the same for the last batch.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    batches = [indices[i: i + batch_size] for i in range(0, len(indices), batch_size)]
    return [b for b in batches if len(b) >= min_size]


def warmup_plan(pools: Sequence[np.ndarray], batch_size: int, seed: int, epoch: int,
                rank: int = 0, world: int = 1) -> list[Step]:
    """Warm-up epoch: one pass of each network over its own shuffle of its pool.

    Args:
        pools: per network, the indices it warms up on (all pairs, or the pairs kept by
            Randomly Noise Abandon).
        batch_size: per-process batch size.
        seed, epoch: seed of the shuffles.
        rank, world: DDP position.

    Returns:
        Network 0's steps, then network 1's (spec 4.2.3 step 2).
    """
    steps: list[Step] = []
    for net, pool in enumerate(pools):
        order = rng_for(seed, epoch, WARMUP_STREAM, net).permutation(pool)
        steps += [Step(net, b) for b in chunk(shard(order, rank, world), batch_size)]
    return steps


def cycled_batches(pool: np.ndarray, count: int, batch_size: int, seed: int, epoch: int,
                   net: int, rank: int = 0, world: int = 1,
                   min_size: int = 2) -> list[np.ndarray | None]:
    """``count`` batches from ``pool``, re-shuffled whenever a pass is exhausted.

    This is the official unlabelled loader, which is re-created when it runs out (spec
    4.2.5). A last batch smaller than ``min_size`` is dropped (``min_size = batch_size``:
    ``drop_last``, L2RM's noisy loader). When this rank's share holds fewer than
    ``min_size`` samples, every entry is ``None`` (no unlabelled batch; shares have equal
    sizes on all ranks, so all ranks agree).
    """
    if count == 0 or len(shard(pool, rank, world)) < min_size:
        return [None] * count
    out: list[np.ndarray | None] = []
    cycle = 0
    while len(out) < count:
        order = rng_for(seed, epoch, UNLABELLED_STREAM, net, cycle).permutation(pool)
        out += chunk(shard(order, rank, world), batch_size, min_size)
        cycle += 1
    return out[:count]


def rematch_plan(clean: np.ndarray, batch_size: int, seed: int, epoch: int, rank: int = 0,
                 world: int = 1) -> list[Step]:
    """An L2RM epoch after the warm-up: one pass over a shuffle of the predicted-clean pairs,
    each step with a batch of the predicted-noisy pairs drawn from a loader that is re-shuffled
    whenever it runs out (the official ``train``: the epoch is the clean loader's length, the
    noisy iterator is re-created on ``StopIteration``). Both loaders drop their last
    incomplete batch, as the official ones do: every batch has exactly ``batch_size`` pairs,
    the width of L2RM's cost network.

    Args:
        clean: ``(N,)`` bool, the division's predicted-clean pairs.
        batch_size: per-process batch size.
        seed, epoch: seed of the shuffles.
        rank, world: DDP position.

    Returns:
        Steps of network 0 with ``labelled`` = clean and ``unlabelled`` = noisy indices; the
        noisy batch is ``None`` on every step when this rank's share of the noisy pairs is
        smaller than a batch (the official code crashes there; the method then trains the
        clean pairs alone, docs/methods/l2rm.md).
    """
    labelled, unlabelled = np.flatnonzero(clean), np.flatnonzero(~clean)
    order = rng_for(seed, epoch, LABELLED_STREAM, 0).permutation(labelled)
    batches = chunk(shard(order, rank, world), batch_size, min_size=batch_size)
    noisy = cycled_batches(unlabelled, len(batches), batch_size, seed, epoch, 0, rank, world,
                           min_size=batch_size)
    return [Step(0, b, u) for b, u in zip(batches, noisy)]


def cotrain_plan(clean: Sequence[np.ndarray], batch_size: int, seed: int, epoch: int,
                 rank: int = 0, world: int = 1, with_unlabelled: bool = True) -> list[Step]:
    """Co-training epoch: network ``k`` trains on its **peer's** division (co-divide).

    Args:
        clean: two ``(N,)`` bool masks; ``clean[j]`` is the division made from network
            ``j``'s losses. Network A (0) uses ``clean[1]``, B (1) uses ``clean[0]``.
        batch_size: per-process batch size of both the labelled and unlabelled batches.
        seed, epoch: seed of the shuffles.
        rank, world: DDP position.
        with_unlabelled: attach an unlabelled batch to every step (the official code
            always draws one; skip it when the unlabelled loss is off and no target needs it).

    Returns:
        A's steps (one pass over ``clean[1]``'s labelled set), then B's.
    """
    if len(clean) != 2:
        raise ValueError(f"co-teaching needs two division masks, got {len(clean)}")
    steps: list[Step] = []
    for net in (0, 1):
        peer = clean[1 - net]
        labelled, unlabelled = np.flatnonzero(peer), np.flatnonzero(~peer)
        order = rng_for(seed, epoch, LABELLED_STREAM, net).permutation(labelled)
        batches = chunk(shard(order, rank, world), batch_size)
        extra = (cycled_batches(unlabelled, len(batches), batch_size, seed, epoch, net, rank, world)
                 if with_unlabelled else [None] * len(batches))
        steps += [Step(net, b, u) for b, u in zip(batches, extra)]
    return steps


def limit_steps(steps: list[Step], limit: int | float) -> list[Step]:
    """Share an integer ``trainer.limit_train_batches`` evenly between networks A and B.

    The plan runs all of A's steps before B's, so Lightning's own cut would otherwise leave B
    untrained. A fractional limit is left to Lightning (it truncates B first).
    """
    if not isinstance(limit, int) or limit >= len(steps):
        return steps
    per_net, taken, kept = math.ceil(limit / 2), [0, 0], []
    for step in steps:
        if taken[step.net] < per_net:
            kept.append(step)
            taken[step.net] += 1
    return kept


def check_cotraining_possible(clean: Tensor, epoch: int) -> None:
    """Raise one clear error when the co-divide left no network a batch to train on.

    Args:
        clean: ``(K, N)`` bool, network ``k``'s clean pairs (trained on by its peer).
        epoch: the epoch, for the message.

    Without this Lightning would end ``fit`` quietly ("no training batches", exit 0), which
    looks like a finished run.
    """
    counts = [int(c.sum()) for c in clean]
    if all(n < 2 for n in counts):
        kept = ", ".join(f"{n}" for n in counts)
        raise TrainingError(
            f"NCR/LNC epoch {epoch}: the co-divide called {kept} of {clean.shape[1]} pairs clean "
            f"(per network); co-training needs at least 2 to form a batch. The division has "
            f"collapsed (see division/* in metrics.csv): more warm-up epochs, a lower learning "
            f"rate or a larger training set usually help.")


def unlabelled_loss_active(epoch: int, warmup_epochs: int, start: int | None,
                           max_epochs: int | None) -> bool:
    """Whether NCR/LNC's noisy-subset loss is used in (Lightning) epoch ``epoch``: from
    co-training epoch ``start`` on (``0``: from the start, LNC Alg. 1), or with ``start=None``
    from the official ``num_epochs // 2``, ``num_epochs = max_epochs - warmup_epochs``.

    Raises:
        ConfigError: ``start`` is ``None`` and ``max_epochs`` is unbounded (``None`` or < 0).
    """
    if start is None:
        if max_epochs is None or max_epochs < 0:
            raise ConfigError("model.unlabelled_start=null needs trainer.max_epochs "
                              "(the official start is num_epochs // 2)")
        start = (max_epochs - warmup_epochs) // 2
    return epoch - warmup_epochs >= start


def co_teaching_plan(num_pairs: int, batch_size: int, seed: int, epoch: int, *,
                     keep: Tensor | None = None, clean: Tensor | None = None,
                     with_unlabelled: bool = True, limit: int | float = 1.0, rank: int = 0,
                     world: int = 1) -> list[Step]:
    """One NCR/LNC epoch's steps from the method's state: a warm-up epoch when ``clean`` is
    ``None`` (:func:`warmup_plan`, both networks over the same pool), else a co-training epoch
    on the co-divide (:func:`cotrain_plan`); then :func:`limit_steps`.

    Args:
        num_pairs: N, the training pairs.
        batch_size, seed, epoch, rank, world: as :func:`warmup_plan`.
        keep: ``(N,)`` bool, the pairs Randomly Noise Abandon keeps (LNC Alg. 1 l. 6-9): the
            warm-up pool; ``None``: every pair.
        clean: ``(2, N)`` bool, the co-divide's clean masks (a co-training epoch), or ``None``.
        with_unlabelled: as :func:`cotrain_plan`.
        limit: ``trainer.limit_train_batches``.

    Raises:
        TrainingError: the co-divide left no network a batch (:func:`check_cotraining_possible`).
    """
    if clean is None:
        pool = np.arange(num_pairs) if keep is None else np.flatnonzero(keep.numpy())
        steps = warmup_plan([pool, pool], batch_size, seed, epoch, rank, world)
    else:
        check_cotraining_possible(clean, epoch)
        steps = cotrain_plan([c.numpy() for c in clean], batch_size, seed, epoch, rank, world,
                             with_unlabelled)
    return limit_steps(steps, limit)


class IndexBatches(Dataset):
    """Dataset whose item ``k`` is the collated batch of ``pairs`` at ``batches[k]``."""

    def __init__(self, pairs: Dataset, batches: Sequence[np.ndarray]) -> None:
        self.pairs, self.batches = pairs, list(batches)

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, k: int) -> Batch:
        return collate([self.pairs[int(i)] for i in self.batches[k]])


class StepDataset(Dataset):
    """Dataset whose item ``k`` is step ``k`` of a plan, collated.

    Item: ``{"net": int, "labelled": Batch, "unlabelled": Batch}`` (``unlabelled`` only
    when the step has one); batches as :func:`ncl.data.datasets.collate` builds them.
    """

    def __init__(self, pairs: Dataset, steps: Sequence[Step]) -> None:
        self.pairs, self.steps = pairs, list(steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, k: int) -> dict[str, object]:
        step = self.steps[k]
        item: dict[str, object] = {"net": step.net,
                                   "labelled": collate([self.pairs[int(i)] for i in step.labelled])}
        if step.unlabelled is not None:
            item["unlabelled"] = collate([self.pairs[int(i)] for i in step.unlabelled])
        return item


def _identity(item: object) -> object:
    return item


def iterate(dataset: Dataset, num_workers: int = 0, pin_memory: bool = False) -> DataLoader:
    """A loader that yields ``dataset``'s items in order (each item is already a batch);
    ``pin_memory`` for CUDA (page-locked batches copy to the GPU asynchronously)."""
    return DataLoader(dataset, batch_size=None, shuffle=False, num_workers=num_workers,
                      collate_fn=_identity, pin_memory=pin_memory)


class PlanLoader:
    """The training "dataloader" of one co-teaching epoch: sized, iterable, lazy.

    It is deliberately not a :class:`~torch.utils.data.DataLoader`: Lightning would inject
    a ``DistributedSampler`` into one, but the plan is already sharded per rank. Iteration
    starts worker processes only when the first batch is requested.
    """

    def __init__(self, dataset: StepDataset, num_workers: int = 0, pin_memory: bool = False) -> None:
        self.dataset, self.num_workers, self.pin_memory = dataset, num_workers, pin_memory

    def __len__(self) -> int:
        return len(self.dataset)

    def __iter__(self) -> Iterator[dict[str, object]]:
        yield from iterate(self.dataset, self.num_workers, self.pin_memory)
