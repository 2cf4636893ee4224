"""IN2R's queues under DDP and in checkpoints, its augmented pairs, its optimisers' and its
backbone's checks, kept apart from :mod:`ncl.methods.in2r` so that the method reads as its
algorithm.

The queues are **the same on every rank**: a push all-gathers the ranks' queued rows in rank
order (:func:`gathered_push`), so each queue holds what one process would hold with the global
batch (docs/methods/in2r.md, "The queue under DDP"); that costs ``2 x B x E`` floats per rank
and step. A checkpoint holds the one pair of queues (:func:`queue_states`);
:func:`restored_queues` also reads the per-rank lists of checkpoints written before.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn
from torch.utils.data import Dataset

from ncl.data.augment import CaptionRegionAugment
from ncl.data.datasets import PairDataset
from ncl.division.in2r_queue import EmbeddingQueue
from ncl.errors import ConfigError, NclWarning
from ncl.models.vse_infinity import VSEInfinity
from ncl.training.distributed import all_gather_cat


def check_pooled_backbone(net: nn.Module) -> int:
    """The embedding size of a VSE-infinity-like backbone (pooled ``(B, E)`` embeddings, the
    queue's rows); anything else is refused with one line."""
    if not isinstance(net, VSEInfinity):
        raise ConfigError(f"IN2R needs a backbone with pooled embeddings (model.backbone "
                          f"ncl.models.in2r_vse.In2rVSE or ncl.models.VSEInfinity), got "
                          f"{type(net).__name__}")
    return int(net.embed_size)


def queue_states(queues: list[EmbeddingQueue | None]) -> list[dict[str, Any] | None]:
    """The queues as checkpoint entries (``None`` for a queue not made yet)."""
    return [None if q is None else q.state() for q in queues]


def gathered_push(images: Tensor, captions: Tensor) -> tuple[Tensor, Tensor]:
    """Every rank's ``(n_r, E)`` rows to push, concatenated in rank order (a collective under
    DDP: every rank calls it at the same step; ``n_r`` may differ, 0 included)."""
    return all_gather_cat(images), all_gather_cat(captions)


def restored_queues(saved: list | None, device: torch.device) -> list[EmbeddingQueue | None] | None:
    """The queues of a checkpoint: ``[A's, B's]``; a checkpoint written before the queues were
    shared holds one such list per rank: one process's is taken, several start empty (with a
    warning: they differed)."""
    if not saved:
        return None
    if isinstance(saved[0], list):  # the per-rank layout of earlier checkpoints
        if len(saved) != 1:
            warnings.warn(f"IN2R: the checkpoint holds the per-process queues of {len(saved)} "
                          f"processes (written before the queues were shared); the queues start "
                          f"empty", NclWarning, stacklevel=3)
            return None
        saved = saved[0]
    return [None if s is None else EmbeddingQueue.from_state(s, device) for s in saved]


def load_word_vectors(nets: nn.ModuleList, vocab: Any) -> int | None:
    """The official initialisation of the word embeddings: every network's ``glove_path``
    vectors for the vocabulary words it holds (:meth:`~ncl.models.in2r_vse.In2rVSE.load_glove`);
    without a path, one warning that the official code starts from GloVe 840B.

    Args:
        nets: the networks (the same ``glove_path`` each, from one backbone factory).
        vocab: the DataModule's :class:`~ncl.data.vocab.Vocabulary` (its ``words`` in id
            order); ``<mask>`` is added when the embeddings have its row.

    Returns:
        Vocabulary words found in the file (read once for every network), ``None`` without GloVe.
    """
    paths = {getattr(net, "glove_path", None) for net in nets}
    if paths == {None}:
        rank_zero_warn("IN2R: the official text encoder starts from GloVe 840B vectors; these word "
                       "embeddings start from U(-0.1, 0.1) only (set "
                       "model.backbone.init_args.glove_path to a GloVe text file to load them)",
                       category=NclWarning, stacklevel=3)
        return None
    if vocab is None:
        raise ConfigError("model.backbone.init_args.glove_path needs the DataModule's vocabulary "
                          "(data.vocab: ncl's DataModules have it)")
    if len(paths) > 1:
        raise ConfigError(f"model.backbone.init_args.glove_path: the networks name different files "
                          f"({', '.join(sorted(map(str, paths)))})")
    words = list(vocab.words) + ["<mask>"] * (int(nets[0].vocab_size) - len(vocab.words))
    rows = nets[0].glove_rows(words)  # the file is read once for every network
    found = None
    for net in nets:
        found = net.load_glove(words, rows)
    return found


def check_queue_fits(queue_size: int, k: int, batch_size: int, world: int = 1) -> None:
    """A push takes up to a whole global labelled batch (``batch_size`` per process times
    ``world`` processes); retrieval needs ``k`` entries."""
    if queue_size < max(batch_size * world, k):
        raise ConfigError(f"model.queue_size ({queue_size}) must be at least the global batch "
                          f"(data.batch_size {batch_size} x {world} processes) and model.k ({k})")


class EpochKeyed(Dataset):
    """``pairs`` (an augmented :class:`~ncl.data.datasets.PairDataset`) read with ``(epoch, i)``
    keys, so that a plan's integer indices get the epoch's augmentation draw
    (:func:`~ncl.data.augment.sample_rng` of ``(seed, epoch, i)``)."""

    def __init__(self, pairs: PairDataset, epoch: int) -> None:
        self.pairs, self.epoch = pairs, epoch

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> dict[str, object]:
        return self.pairs[(self.epoch, int(i))]


def augmented(pairs: PairDataset, epoch: int, seed: int, vocab_size: int) -> EpochKeyed:
    """The training pairs with the official loader's augmentation (CRCL's / VSE-infinity's:
    20 % of caption tokens masked, replaced or deleted, 20 % of regions removed;
    :class:`~ncl.data.augment.CaptionRegionAugment` with ``region_mode="remove"``) for
    ``epoch``."""
    augment = CaptionRegionAugment(region_mode="remove")
    return EpochKeyed(PairDataset(pairs.split, pairs.cap2img, augment, seed, vocab_size), epoch)
