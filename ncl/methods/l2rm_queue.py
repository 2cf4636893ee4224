"""L2RM's image queue across checkpoints and its rematching diagnostic, kept apart from
:mod:`ncl.methods.l2rm` so that the method reads as its three phases.

The queue is **per rank** under DDP (each rank's last noisy batches); a checkpoint keeps every
rank's queue as pair indices (:func:`gather_queue_indices`), and a resumed rank refills its own
from them (:func:`restored_queue_row`).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import Tensor

from ncl.data.contracts import RetrievalData, clean_mask_known
from ncl.data.datasets import Batch
from ncl.errors import ConfigError, NclWarning
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


def no_region_lengths(*batches: Batch) -> None:
    """The queue holds whole feature tensors; images with different region counts (padded,
    with ``image_lengths``) would need their lengths queued too."""
    if any("image_lengths" in b for b in batches):
        raise ConfigError("L2RM needs images with one region count (the image queue holds raw "
                          "region features); this data pads images to different counts")
