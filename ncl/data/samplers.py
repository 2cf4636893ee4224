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

from ncl.training.streams import declare_stream

# Stream identifiers: every consumer of (seed, epoch) gets an independent stream
# (declared in ncl.training.streams, which keeps them unique).
SHUFFLE_STREAM = declare_stream(11, "samplers.shuffle")
GLOBAL_TORCH_STREAM = declare_stream(12, "samplers.global_torch")
METHOD_STREAM = declare_stream(13, "samplers.method")


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
