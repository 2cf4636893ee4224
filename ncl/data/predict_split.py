"""The split ``ncl predict`` scores, in the batches it is scored in.

The DataModule serves the chosen split (``train``, ``dev`` or ``test``) through
:class:`ScoringBatchSampler`: the pairs are shuffled as NCR's co-divide shuffles its pass of
epoch 0 and cut into batches of the training batch size. A pair's mean hinge depends on the
other pairs of its batch, so these batches are part of what ``ncl predict``'s numbers mean
(:mod:`ncl.evaluation.ranking`).

:class:`PredictSplit` is the part of :class:`ncl.data.datamodule.PrecompDataModule` that serves
it; ``ncl predict``'s writer chooses the split (``--split``, ``--batch_size``) in its ``setup``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
from torch.utils.data import BatchSampler, DataLoader, Sampler, SequentialSampler

from ncl.data.datasets import PairDataset
from ncl.data.precomp import PrecompSplit
from ncl.data.samplers import DIVISION_STREAM, deal_batches, rng_for
from ncl.errors import ConfigError

SPLITS = ("train", "dev", "test")
SCORING_SEED = 0  # seed of the scoring pass's shuffle (the co-divide's stream, epoch 0)


def scoring_batches(indices: np.ndarray, batch_size: int, seed: int = SCORING_SEED) -> list[np.ndarray]:
    """The scoring pass's batches over ``indices`` ``(N,)``: shuffled as the co-divide's pass
    of epoch 0 (:func:`ncl.data.samplers.rng_for`, ``DIVISION_STREAM``), cut into
    ``batch_size`` batches, a last batch of one joining the one before
    (:func:`ncl.data.samplers.deal_batches`). The mean hinge depends on the in-batch
    negatives, so these batches are part of what a pair's loss means."""
    order = np.asarray(indices, dtype=np.int64)
    order = order[rng_for(seed, 0, DIVISION_STREAM, 0).permutation(len(order))]
    return deal_batches(order, batch_size)


class ScoringBatchSampler(BatchSampler):
    """:func:`scoring_batches` over the indices of ``sampler``, as a batch sampler.

    Lightning re-creates a prediction loader's batch sampler (to record the indices it
    yields) with the ``sampler`` and ``drop_last`` replaced by the loader's sequential sampler
    and ``False``; the shuffle is therefore drawn here from ``seed``, not by the sampler, and
    no pair is ever dropped (``drop_last`` must be false).

    Args:
        sampler: the dataset's indices, in order (a ``SequentialSampler``).
        batch_size: pairs per batch (the last batch may hold one more).
        drop_last: accepted for Lightning; must be false.
        seed: seed of the shuffle.
    """

    def __init__(self, sampler: Sampler[int] | Iterable[int], batch_size: int,
                 drop_last: bool = False, seed: int = SCORING_SEED) -> None:
        if drop_last:
            raise ValueError("the scoring pass scores every pair: drop_last must be false")
        super().__init__(sampler, batch_size, drop_last)
        self.seed = seed

    def __iter__(self) -> Iterator[list[int]]:
        indices = np.fromiter(iter(self.sampler), dtype=np.int64)
        for batch in scoring_batches(indices, self.batch_size, self.seed):
            yield batch.tolist()

    def __len__(self) -> int:
        n = len(self.sampler)
        count = -(-n // self.batch_size)
        return count - 1 if count > 1 and n % self.batch_size == 1 else count  # merged tail


class PredictSplit:
    """What a DataModule's ``predict_dataloader`` serves (a mixin of
    :class:`~ncl.data.datamodule.PrecompDataModule`, which sets the attributes below and
    provides ``_load``, ``_load_noisy_train``, ``train_pairs`` and ``_worker_options``)."""

    predict_split: str
    predict_batch_size: int | None
    predict_data: PrecompSplit | None
    _predict_pairs: PairDataset | None
    batch_size: int
    val_split: str
    test_split: str
    train_split: PrecompSplit | None
    clean_mask: np.ndarray
    clean_mask_known: bool

    # Provided by the DataModule.
    _load: Any
    _load_noisy_train: Any
    train_pairs: Any
    _worker_options: Any

    def use_predict_split(self, split: str = "train", batch_size: int | None = None) -> None:
        """Choose what :meth:`predict_dataloader` serves (``ncl predict``'s ``--split`` and
        ``--batch_size``; the writer calls this in its ``setup``).

        Args:
            split: ``train`` (the noisy training pairs), ``dev`` or ``test`` (the stored pairs
                of :attr:`val_split` / :attr:`test_split`, every image).
            batch_size: pairs per batch; ``None``: :attr:`batch_size`, the co-divide's.
        """
        if split not in SPLITS:
            raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
        if split != self.predict_split:
            self._predict_pairs = None
        self.predict_split, self.predict_batch_size = split, batch_size

    def predict_pairs(self) -> PairDataset:
        """The pairs of the predict split, read once: the training split with its noise, or
        an evaluation split as stored (caption ``c`` with image ``c // im_div``)."""
        if self._predict_pairs is None:
            if self.predict_split == "train":
                if self.train_split is None:
                    self._load_noisy_train()
                self._predict_pairs = self.train_pairs()
            else:
                name = self.val_split if self.predict_split == "dev" else self.test_split
                data = self._load(name)  # the whole split, dev_max_images not applied
                self._predict_pairs = PairDataset(data, np.arange(data.n_captions) // data.im_div)
            self.predict_data = self._predict_pairs.split
        return self._predict_pairs

    def predict_clean_mask(self) -> np.ndarray | None:
        """``(N,)`` bool ground truth of :meth:`predict_pairs`, or ``None`` where nobody knows
        which pairs are mismatched (real noise; the evaluation splits are taken as stored)."""
        if self.predict_split != "train" or not self.clean_mask_known:
            return None
        self.predict_pairs()
        return np.asarray(self.clean_mask, dtype=bool)

    def predict_dataloader(self) -> DataLoader:
        """The predict split in the scoring pass's batches
        (:class:`ScoringBatchSampler`: shuffled as NCR's co-divide,
        ``predict_batch_size`` or :attr:`batch_size` pairs), never augmented."""
        pairs = self.predict_pairs()
        size = self.predict_batch_size or self.batch_size
        batches = ScoringBatchSampler(SequentialSampler(pairs), size)
        return DataLoader(pairs, batch_sampler=batches, **self._worker_options())
