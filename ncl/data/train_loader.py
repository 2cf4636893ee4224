"""The training loader of a DataModule, and the hook through which a method supplies its own.

By default the training pairs are shuffled as a function of ``(seed, epoch)`` (so that a
resumed run sees the batches the uninterrupted run saw), optionally augmented, and batched
as :mod:`ncl.data.batch_policy` says (per process under DDP; a last batch of one pair is
dropped). A method whose batches depend on per-epoch state (NCR's co-divided
labelled/unlabelled plan) registers a plan instead (:meth:`TrainLoader.use_train_plan`); the
DataModule still owns the data.

:class:`TrainLoader` is a part of :class:`ncl.data.datamodule.PrecompDataModule`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils.data import DataLoader, RandomSampler

from ncl.data.batch_policy import drop_single_pair_batch, pairs_per_rank, uses_distributed_sampler
from ncl.data.datasets import EpochBatchSampler, PairDataset
from ncl.data.samplers import EpochShuffleSampler, global_seed, loader_generator
from ncl.errors import ConfigError

#: A method-supplied training loader: the (noisy) training pairs -> an iterable of batches.
TrainPlan = Callable[[PairDataset], Iterable]


class TrainLoader:
    """The training loader (a mixin of :class:`~ncl.data.datamodule.PrecompDataModule`, which
    sets the attributes below and provides ``train_pairs``, ``_loader`` and
    ``_worker_options``)."""

    batch_size: int
    vocab_size: int
    augment: Any
    _train_plan: TrainPlan | None
    #: ``seed_everything``'s value at the first epoch, kept in the checkpoint.
    shuffle_seed: int | None

    def _augmented_pairs(self, seed: int) -> PairDataset:
        """The training pairs with ``self.augment``, keyed by ``(epoch, index)``."""
        pairs = self.train_pairs()
        return PairDataset(pairs.split, pairs.cap2img, self.augment, seed, self.vocab_size)

    def _upcoming_epoch(self) -> int:
        """The epoch the training loader is built for: the value Lightning passes to
        ``set_epoch`` (``epoch_progress.current.processed``; restored on resume).

        Lightning creates the first iterator of a run, and of a resumed run, *before* it calls
        ``set_epoch``; with ``num_workers > 0`` that iterator already draws the first batches.
        A sampler that starts at this epoch makes those batches the ones the uninterrupted run
        drew.
        """
        trainer = getattr(self, "trainer", None)
        if trainer is None:
            return 0
        return int(trainer.fit_loop.epoch_progress.current.processed)

    def use_train_plan(self, plan: TrainPlan | None) -> None:
        """Let a method build the training loader from the pairs (``None`` restores the default).

        Methods whose batches depend on per-epoch state (NCR's co-divided labelled/unlabelled
        plan) register ``plan(pairs) -> iterable of batches`` in their ``setup("fit")``; the
        DataModule still owns the data. ``reload_dataloaders_every_n_epochs=1`` makes Lightning
        ask again every epoch. A plan receives the pairs without ``data.augment``; asking for
        both is an error.
        """
        if plan is not None and self.augment is not None:
            raise ConfigError("data.augment applies to the DataModule's own training loader, but "
                              "this method supplies its own training batches (use_train_plan); "
                              "remove data.init_args.augment")
        self._train_plan = plan

    def train_dataloader(self) -> Iterable:
        pairs = self.train_pairs()
        if self._train_plan is not None:
            return self._train_plan(pairs)
        trainer = getattr(self, "trainer", None)
        distributed = trainer is not None and trainer.world_size > 1
        world = trainer.world_size if distributed else 1
        per_rank = pairs_per_rank(len(pairs), world, uses_distributed_sampler(trainer))
        drop_last = drop_single_pair_batch(per_rank, self.batch_size)
        if distributed and self.augment is None:
            # Lightning swaps in a DistributedSampler, itself seeded by (seed, epoch).
            return self._loader(pairs, self.batch_size, shuffle=True, drop_last=drop_last)
        # The shuffle is a function of (seed, epoch) so that a resumed run sees the batches
        # the uninterrupted run saw (torch's RandomSampler draws from the global stream).
        seed = self.shuffle_seed if self.shuffle_seed is not None else global_seed()
        self.shuffle_seed = seed  # kept in the checkpoint (state_dict)
        epoch = self._upcoming_epoch()
        if distributed:  # Lightning swaps its DistributedSampler into the EpochBatchSampler
            sampler: torch.utils.data.Sampler[int] = RandomSampler(pairs)
        else:
            sampler = EpochShuffleSampler(len(pairs), seed)
            sampler.set_epoch(epoch)
        common: dict[str, Any] = dict(self._worker_options(), generator=loader_generator(seed))
        if self.augment is None:
            return DataLoader(pairs, batch_size=self.batch_size, sampler=sampler,
                              drop_last=drop_last, **common)
        # Items are read by (epoch, index) keys, so the augmentation knows its epoch in any
        # worker process (ncl.data.datasets.EpochBatchSampler).
        return DataLoader(self._augmented_pairs(seed), **common,
                          batch_sampler=EpochBatchSampler(sampler, self.batch_size, drop_last, epoch))
