"""How training batches are formed, per process, and what ncl says about them.

Under DDP every process draws its own ``batch_size`` pairs (Lightning's
``DistributedSampler`` deals them out) and computes its loss over them alone; a loader drops
its last batch only when that batch would hold a single pair; loaders pin memory only on
CUDA. The DataModule (:class:`ncl.data.datamodule.PrecompDataModule`) asks these functions;
the warnings they return are printed once, on rank 0, at the start of a fit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def per_device_batch_note(world_size: int, batch_size: int, acknowledged: bool) -> str | None:
    """The start-up warning about batches under DDP, or ``None`` when there is nothing to say.

    Every DDP process draws its own ``batch_size`` pairs and computes its loss over them alone:
    in-batch negatives (the hardest negative, RCL's complementary terms, InfoNCE) come from
    those ``batch_size`` pairs only, and the gradients are averaged over processes. So
    ``--trainer.devices N`` changes the method, not only the speed. Silent once the user says
    so (``data.per_device_batch: true``) and on one process.
    """
    if world_size <= 1 or acknowledged:
        return None
    return (f"{world_size} processes each train on data.batch_size={batch_size} pairs: "
            f"{world_size * batch_size} pairs per optimizer step, but each loss sees only its "
            f"own {batch_size} (in-batch negatives come from those alone; gradients are averaged "
            f"over processes). The papers train on one GPU with batch 128; see the README, "
            f"'Multi-GPU and clusters'. Set data.init_args.per_device_batch: true to confirm this "
            f"and silence the warning")


def pairs_per_rank(n_pairs: int, world_size: int = 1, distributed_sampler: bool = True) -> int:
    """How many training pairs one process batches in an epoch.

    Under DDP Lightning gives each rank a ``DistributedSampler`` (``drop_last`` false, also
    inside :class:`~ncl.data.datasets.EpochBatchSampler`): it pads the order with repeats to
    ``ceil(N / W)`` pairs per rank. Without it (``use_distributed_sampler`` false) every
    rank iterates all ``N``.
    """
    if world_size <= 1 or not distributed_sampler:
        return n_pairs
    return -(-n_pairs // world_size)


def drop_single_pair_batch(pairs_per_process: int, batch_size: int) -> bool:
    """Whether the training loader drops its last batch: only when it would hold one pair.

    A one-pair batch breaks BatchNorm in train mode ("Expected more than 1 value per
    channel", spec 7.2) and leaves a contrastive loss without negatives. What counts is
    the remainder of what *one process* batches (:func:`pairs_per_rank`), not of ``N``.
    """
    return pairs_per_process % batch_size == 1


def pin_memory(trainer: Any) -> bool:
    """Whether loaders pin their batches: only when the trainer runs on CUDA, where
    page-locked host memory lets the copy to the GPU overlap compute. On the CPU pinning
    buys nothing (torch warns), so CPU runs keep unpinned loaders."""
    device = getattr(getattr(trainer, "strategy", None), "root_device", None)
    return isinstance(device, torch.device) and device.type == "cuda"


def uses_distributed_sampler(trainer: Any) -> bool:
    """Whether Lightning swaps a ``DistributedSampler`` into the training loader
    (``Trainer(use_distributed_sampler=...)``, true by default; read where Lightning keeps it)."""
    connector = getattr(trainer, "_accelerator_connector", None)
    return bool(getattr(connector, "use_distributed_sampler", True))


def batch_size_note(batch_size: int, n_pairs: int, path: Path | None, world_size: int = 1) -> str | None:
    """The warning when one batch holds a process's whole training set, else ``None``.

    Allowed (a tiny experiment may want it) but never what a user of the papers' settings
    means: every epoch is one optimizer step over all pairs, with every pair a negative of
    every other; the papers train with 128 pairs per batch.
    """
    per_process = -(-n_pairs // max(1, world_size))
    if batch_size < per_process:
        return None
    where = f" in {path}" if path is not None else ""
    share = "" if world_size <= 1 else f" ({per_process} per process of {world_size})"
    return (f"data.batch_size={batch_size} is not smaller than the training set ({n_pairs} "
            f"pairs{where}{share}): each epoch is one batch of all of them, one optimizer step "
            f"per epoch; the papers use 128")


def pair_floats(net: Any) -> int:
    """Floats a backbone keeps per (image, caption) pair of a batch for the backward pass, at
    least: ``(R + 1) x sim_dim`` for SGR/SAF (a similarity vector per region and a global one,
    :class:`~ncl.models.similarity.EncoderSimilarity`), 1 for a backbone that scores pairs by
    a dot product (one entry of the ``B x B`` similarity matrix)."""
    linear = getattr(getattr(net, "sim_enc", None), "sim_tranloc_w", None)
    sim_dim = getattr(linear, "out_features", None)
    regions = getattr(net, "num_regions", None)
    if isinstance(sim_dim, int) and isinstance(regions, int):
        return (regions + 1) * sim_dim
    return 1


def available_bytes(device: Any) -> int | None:
    """Free memory on ``device``: the GPU's free memory (CUDA), else the system's
    ``MemAvailable`` (Linux); ``None`` when it cannot be read."""
    if isinstance(device, torch.device) and device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except (RuntimeError, AssertionError):
            return None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def batch_memory_error(batch_size: int, n_pairs: int, nets: Any, available: int | None,
                       world_size: int = 1) -> str | None:
    """The error for a batch whose pairwise similarities cannot fit in memory, else ``None``.

    The bound: a batch of ``B`` pairs (``batch_size``, at most a process's training set: a
    loader's batch never holds more) makes the backbone keep at least
    ``B x B x`` :func:`pair_floats` float32 values; more than the free memory
    (:func:`available_bytes`) is refused before the first batch is built. It is a lower
    bound: a batch below it may still not fit, one above it never does (the quickstart with
    ``batch_size 100000``, 5,000 pairs a batch, needed 42 GB and grew until it was killed).
    """
    if available is None:
        return None
    pairs = min(batch_size, -(-n_pairs // max(1, world_size)))
    floats = max((pair_floats(net) for net in nets), default=1)
    need = pairs * pairs * floats * 4
    if need <= available:
        return None
    return (f"data.batch_size={batch_size} makes batches of {pairs} pairs, whose {pairs} x "
            f"{pairs} similarities ({floats} float32 values a pair) need at least "
            f"{need / 2**30:.1f} GiB, more than the {available / 2**30:.1f} GiB free; use a "
            f"smaller batch (the papers use 128)")
