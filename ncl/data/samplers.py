"""Random streams that are a function of ``(seed, epoch)``, so that a resumed run draws
exactly what the uninterrupted run drew.

PyTorch's ``RandomSampler`` and a DataLoader without a generator seed their shuffles from
torch's global random state, which moves with everything else that draws from it (dropout,
the sanity-check loaders) and is not in a Lightning checkpoint: after a resume the shuffle
of the next epoch differs. :class:`EpochShuffleSampler` instead derives each epoch's
permutation from ``(seed, epoch)`` (Lightning calls ``set_epoch`` before every epoch, as for
``DistributedSampler``), and :func:`epoch_seed` gives the seed with which methods reseed
torch's global stream at the start of every training epoch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import Sampler

from ncl.streams import declare_stream

# Stream identifiers: every consumer of (seed, epoch) gets an independent stream (declared in
# ncl.streams, which keeps them unique).
SHUFFLE_STREAM = declare_stream(11, "samplers.shuffle")
GLOBAL_TORCH_STREAM = declare_stream(12, "samplers.global_torch")
METHOD_STREAM = declare_stream(13, "samplers.method")
# The training passes' streams (ncl.training.plans); ncl predict replays DIVISION_STREAM's
# shuffle (ncl.data.predict_split).
WARMUP_STREAM = declare_stream(1, "plans.warmup")
LABELLED_STREAM = declare_stream(2, "plans.labelled")
UNLABELLED_STREAM = declare_stream(3, "plans.unlabelled")
DIVISION_STREAM = declare_stream(4, "plans.division")


def rng_for(seed: int, epoch: int, stream: int, net: int, cycle: int = 0) -> np.random.Generator:
    """An independent numpy generator for one shuffle, identical on every rank."""
    return np.random.default_rng([seed, epoch, stream, net, cycle])


def deal_batches(order: np.ndarray, batch_size: int, rank: int = 0, world: int = 1) -> list[np.ndarray]:
    """This rank's batches of a pass over ``order`` (all sample indices, in pass order).

    ``order`` is cut into ``batch_size`` batches; a last batch of one pair joins the batch
    before it (alone it would have no in-batch negative: a loss of exactly 0, a softmax of
    exactly 1). Batch ``b`` goes to rank ``b % world``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    batches = [order[i: i + batch_size] for i in range(0, len(order), batch_size)]
    if len(batches) > 1 and len(batches[-1]) == 1:
        batches = [*batches[:-2], np.concatenate(batches[-2:])]
    return batches[rank::world]


def global_seed(default: int = 0) -> int:
    """The run's seed: ``seed_everything``'s value (``PL_GLOBAL_SEED``), else ``default``."""
    value = os.environ.get("PL_GLOBAL_SEED")
    return int(value) if value not in (None, "") else default


def epoch_seed(seed: int, epoch: int, stream: int, rank: int = 0) -> int:
    """A 63-bit seed for one ``(seed, epoch, stream, rank)``, well mixed (numpy SeedSequence)."""
    state = np.random.SeedSequence([seed, epoch, stream, rank]).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1]))


class EpochShuffleSampler(Sampler[int]):
    """A fresh permutation of ``range(num_samples)`` every epoch, fixed by ``(seed, epoch)``.

    The permutation is drawn lazily when iteration starts, so ``set_epoch`` may be called
    after the iterator was created (Lightning does so for the first epoch of a run).

    Args:
        num_samples: dataset length.
        seed: base seed of the stream.
    """

    def __init__(self, num_samples: int, seed: int) -> None:
        self.num_samples, self.seed, self.epoch = num_samples, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch, SHUFFLE_STREAM))
        yield from torch.randperm(self.num_samples, generator=generator).tolist()


def loader_generator(seed: int) -> torch.Generator:
    """A private generator for a DataLoader: its worker base seeds then never draw from (and
    never move) torch's global stream."""
    return torch.Generator().manual_seed(epoch_seed(seed, 0, SHUFFLE_STREAM, rank=1))
