"""L2RM's image queue (its first filling and its copy in checkpoints), its epoch plans (idle ones
included), options and the rematching's diagnostic, kept apart from :mod:`ncl.methods.l2rm` so
that the method reads as its three phases.

The queue is **per rank** under DDP: it holds this rank's last noisy batches, as it would in a
single process of the rank's batch size (the transport is between a rank's own noisy captions
and its own queue). A checkpoint keeps every rank's queue as pair indices
(:func:`gather_queue_indices`), and a resumed rank refills its own from them
(:func:`restored_queue_row`).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import Tensor

from ncl.data.contracts import RetrievalData, clean_mask_known
from ncl.data.datasets import Batch, PairDataset, collate
from ncl.division.co_divide import Division
from ncl.errors import ConfigError, NclWarning
from ncl.training.plans import Step, rematch_plan, warmup_plan
from ncl.training.distributed import rank as process_rank
from ncl.training.distributed import world_size
from ncl.transport.cost import ImageQueue


def gather_queue_indices(queue: ImageQueue, length: int, device: torch.device) -> Tensor:
    """``(world, Q)`` int64: every rank's queue pair indices on CPU (-1 rows for an empty
    queue), in rank order; a collective under DDP (all ranks call it)."""
    local = queue.indices if queue.ready else torch.full((length,), -1, dtype=torch.int64)
    local = local.to(torch.int64).reshape(1, -1)
    if world_size() == 1:
        return local.cpu()
    from ncl.training.distributed import all_gather_cat  # collective, only under DDP

    return all_gather_cat(local.to(device)).cpu()


def restored_queue_row(saved: Tensor | None) -> Tensor | None:
    """This rank's ``(Q,)`` queue indices from a checkpoint's ``(world, Q)`` ones, when it has
    a full queue for every rank of this world (else ``None``: the queue starts again)."""
    if saved is None or bool((saved < 0).any()):
        return None
    if saved.shape[0] != world_size():
        warnings.warn(f"L2RM: the checkpoint holds the image queues of {saved.shape[0]} "
                      f"processes, this run has {world_size()}; the queues start again from "
                      "random training images", NclWarning, stacklevel=3)
        return None
    return saved[process_rank()].clone()


def fill_queue(queue: ImageQueue, pairs: PairDataset, saved: Tensor | None,
               rng: np.random.Generator, device: torch.device) -> None:
    """The queue's features before the first rematching step: the images of this rank's pairs
    in a checkpoint's ``(world, Q)`` indices (:func:`restored_queue_row`), else of ``Q``
    training pairs drawn by ``rng`` without replacement."""
    indices = restored_queue_row(saved)
    if indices is None:
        indices = torch.from_numpy(rng.choice(len(pairs), queue.length, replace=False))
    images = collate([pairs[int(i)] for i in indices])["images"].to(device)
    queue.fill(images, indices.to(torch.int64))


def epoch_plan(num_pairs: int, clean: Tensor | None, batch_size: int, seed: int, epoch: int,
               rank: int, world: int, warn: bool) -> list[Step]:
    """One L2RM epoch's steps: a shuffled pass over all ``num_pairs`` pairs in the warm-up
    (``clean`` is ``None``), else :func:`~ncl.training.plans.rematch_plan` of the division's
    ``(N,)`` bool ``clean`` mask, or :func:`idle_plan` when that leaves no full batch (``warn``:
    rank 0 says why)."""
    if clean is None:
        return warmup_plan([np.arange(num_pairs)], batch_size, seed, epoch, rank, world)
    steps = rematch_plan(clean.numpy(), batch_size, seed, epoch, rank, world)
    if not steps:  # nothing trains (official); one step that the rematching step skips
        steps = idle_plan(clean, epoch, batch_size, world, warn)
    return steps


def idle_plan(clean: Tensor, epoch: int, batch_size: int, world: int, warn: bool) -> list[Step]:
    """The plan of an epoch whose division (``(N,)`` bool ``clean``) leaves no full batch of
    clean pairs: the official code trains nothing that epoch (its clean loader is empty) and
    divides again before the next. Lightning cannot run an epoch without batches, so the epoch
    gets one short step that the rematching step skips (``train/idle``); ``warn`` (rank 0)
    says why."""
    if warn:  # stacklevel 4: past epoch_plan and L2RM.l2rm_dataloader, to the loader's caller
        warnings.warn(f"L2RM epoch {epoch}: the Beta-mixture division called {int(clean.sum())} "
                      f"of {clean.numel()} pairs clean, fewer than one batch of {batch_size} per "
                      f"process ({world} process(es)); as the official code, nothing trains this "
                      "epoch and the next epoch divides again (see l2rm/* in metrics.csv)",
                      NclWarning, stacklevel=4)
    return [Step(0, np.zeros(1, dtype=np.int64))]


def legacy_division(state: dict) -> Division | None:
    """The division of a checkpoint written before L2RM kept a :class:`Division` record: its
    ``division_epoch`` and ``(N,)`` ``clean_prob`` and ``division_losses`` (none: ``None``)."""
    if state.get("clean_prob") is None:
        return None
    prob = state["clean_prob"].reshape(1, -1)
    return Division(int(state["division_epoch"]), state["division_losses"].reshape(1, -1), prob,
                    prob > 0.5)


def rematch_accuracy(data: RetrievalData, queued_pairs: Tensor, index: Tensor,
                     plan: Tensor) -> dict[str, float]:
    """``rematch_true_image``: of a batch's truly mismatched noisy captions whose true image is
    in the queue, the share whose plan column puts most mass on it.

    Args:
        data: the DataModule (its pairing and ground truth, :meth:`RetrievalData.train_images`).
        queued_pairs: ``(Q,)`` training pair of each queue slot.
        index: ``(B,)`` the noisy captions.
        plan: ``(Q, B)`` the transport plan.

    Returns:
        ``{}`` when the ground truth is unknown (real noise) or no caption qualifies.
    """
    if not clean_mask_known(data):
        return {}
    paired, written_for = data.train_images()
    captions = index.cpu().numpy()
    truth = written_for[captions]
    queued = paired[queued_pairs.cpu().numpy()]  # image of each slot
    wrong = paired[captions] != truth
    present = np.isin(truth, queued)
    chosen = queued[plan.argmax(dim=0).cpu().numpy()]
    eligible = wrong & present
    if not eligible.any():
        return {}
    return {"rematch_true_image": float((chosen[eligible] == truth[eligible]).mean())}


def other_cost_width(checkpoint: dict, width: int | None, fitting: bool) -> int | None:
    """The width of a checkpoint's cost network (its run's per-process batch size) when it is
    not ``width``, for evaluation to rebuild it (``None``: the same, or no cost network).

    Raises:
        ConfigError: when ``fitting``: a resumed fit must keep the run's batch size.
    """
    weight = checkpoint.get("state_dict", {}).get("cost_net.weight")
    if weight is None or int(weight.shape[0]) == width:
        return None
    if fitting:
        raise ConfigError(f"cannot resume L2RM with data.batch_size {width}: the checkpoint's "
                          f"cost network is {weight.shape[0]} wide (its run's per-process batch "
                          "size); resume with that batch size")
    return int(weight.shape[0])


def masks_own_image(choice: str, data: RetrievalData) -> bool:
    """The ``mask_own_image`` option: ``on``, ``off``, or ``auto``, the official rule: on when
    the data's :attr:`~ncl.data.contracts.RetrievalData.noise_ratio` is not 0 (CC152K runs
    with 0)."""
    if choice != "auto":
        return choice == "on"
    return float(data.noise_ratio or 0.0) != 0.0


def check_queue_fits(queue_length: int, batch_size: int) -> None:
    """The queue takes a whole noisy batch every step: ``queue_length >= batch_size``."""
    if queue_length < batch_size:
        raise ConfigError(f"model.queue_length ({queue_length}) must be at least the per-process "
                          f"batch size data.batch_size ({batch_size}): the queue takes a whole "
                          "noisy batch every step")


def no_region_lengths(*batches: Batch) -> None:
    """The queue holds whole feature tensors; images with different region counts (padded,
    with ``image_lengths``) would need their lengths queued too."""
    if any("image_lengths" in b for b in batches):
        raise ConfigError("L2RM needs images with one region count (the image queue holds raw "
                          "region features); this data pads images to different counts")
