"""IN2R's per-rank queues in checkpoints, its optimisers and its backbone check, kept apart from
:mod:`ncl.methods.in2r` so that the method reads as its algorithm.

The queues are **per rank** under DDP: each rank pushes the embeddings of its own labelled
batches and retrieves its own unlabelled batches' neighbours from them, as one process with the
rank's batch would (docs/methods/in2r.md, "The queue under DDP"). Keeping them identical would
all-gather ``2 x B x E`` embeddings every step for a memory the method only samples. A
checkpoint holds every rank's queues (:func:`gather_queues`, a collective) and a resumed rank
takes its own (:func:`own_queues`).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from ncl.data.augment import CaptionRegionAugment
from ncl.data.datasets import PairDataset
from ncl.division.in2r_queue import EmbeddingQueue
from ncl.errors import ConfigError, NclWarning
from ncl.models.vse_infinity import VSEInfinity
from ncl.training.distributed import rank as process_rank
from ncl.training.distributed import world_size


def check_pooled_backbone(net: nn.Module) -> int:
    """The embedding size of a VSE-infinity-like backbone (pooled ``(B, E)`` embeddings, the
    queue's rows); anything else is refused with one line."""
    if not isinstance(net, VSEInfinity):
        raise ConfigError(f"IN2R needs a backbone with pooled embeddings (model.backbone "
                          f"ncl.models.in2r_vse.In2rVSE or ncl.models.VSEInfinity), got "
                          f"{type(net).__name__}")
    return int(net.embed_size)


def queue_states(queues: list[EmbeddingQueue | None]) -> list[dict[str, Any] | None]:
    """This rank's queues as checkpoint entries (``None`` for a queue not made yet)."""
    return [None if q is None else q.state() for q in queues]


def gather_queues(queues: list[EmbeddingQueue | None]) -> list[list[dict[str, Any] | None]]:
    """Every rank's :func:`queue_states`, in rank order (a collective under DDP: every rank
    calls it)."""
    local = queue_states(queues)
    if world_size() == 1:
        return [local]
    gathered: list[Any] = [None] * world_size()
    torch.distributed.all_gather_object(gathered, local)
    return gathered


def own_queues(saved: list | None, device: torch.device) -> list[EmbeddingQueue | None] | None:
    """This rank's queues from a checkpoint's per-rank list; ``None`` (and a warning) when the
    checkpoint was written by another number of processes: the queues start empty again."""
    if saved is None:
        return None
    if len(saved) != world_size():
        warnings.warn(f"IN2R: the checkpoint holds the queues of {len(saved)} processes, this run "
                      f"has {world_size()}; the queues start empty", NclWarning, stacklevel=3)
        return None
    return [None if s is None else EmbeddingQueue.from_state(s, device)
            for s in saved[process_rank()]]


def check_queue_fits(queue_size: int, k: int, batch_size: int) -> None:
    """A push takes up to a whole labelled batch; retrieval needs ``k`` entries."""
    if queue_size < max(batch_size, k):
        raise ConfigError(f"model.queue_size ({queue_size}) must be at least the per-process batch "
                          f"size data.batch_size ({batch_size}) and model.k ({k})")


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
