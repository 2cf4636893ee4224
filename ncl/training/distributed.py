"""Collectives for per-sample state under DDP (plain ``torch.distributed``, no Lightning).

Every helper is a no-op (or a local computation) when no process group is initialised or
the world has one process, so the same code path serves single-process runs and tests.

Per-sample results are always exchanged together with their **dataset index** and
scattered by it (design notes: "gather per-sample results across ranks by sample index,
never by arrival order"); ranks may contribute different numbers of rows.

Evaluation splits its similarity matrix over ranks with these collectives
(:func:`ncl.evaluation.sharded.rank_sharded_similarity`); nothing here knows about evaluation.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn



def world_size() -> int:
    """Number of processes of the default group (1 without an initialised group)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def rank() -> int:
    """This process's rank in the default group (0 without an initialised group)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0


def _comm_device(device: torch.device) -> torch.device:
    """NCCL only moves CUDA tensors; gloo moves CPU tensors."""
    if dist.get_backend() == "nccl":
        return device if device.type == "cuda" else torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def any_rank(flag: Tensor) -> Tensor:
    """``flag`` (a 0-dim bool) OR-ed over the ranks of the default group.

    One all-reduce of the flag on the backend's device (the flag's own CUDA device under
    NCCL: no host copy); unlike ``strategy.reduce_boolean_decision`` no barrier either.
    Returns a 0-dim bool on the backend's device.
    """
    value = flag.to(device=_comm_device(flag.device), dtype=torch.int32)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value > 0


#: One rank's rows as :func:`all_gather_cat` sees them: (number of rows, shape of a row, dtype).
RowLayout = tuple[int, tuple[int, ...], torch.dtype]


def common_row_layout(layouts: list[RowLayout]) -> tuple[tuple[int, ...], torch.dtype]:
    """The shape of a row and the dtype that every rank's contribution takes.

    A rank without rows cannot know them: a per-sample pass that got no batch holds a
    ``(0,)`` float32 placeholder while the others hold ``(n, 3)`` rows (ReCon) or float64
    ones. Such a rank adopts the layout of the ranks that have rows; those must agree. When
    no rank has rows, rank 0's layout is everybody's.

    Args:
        layouts: every rank's layout, in rank order.

    Raises:
        ValueError: if ranks with rows disagree on the row shape or dtype (the same on every
            rank, which all see the same layouts: none waits for a collective that never comes).
    """
    filled = sorted({(shape, dtype) for rows, shape, dtype in layouts if rows > 0}, key=str)
    if len(filled) > 1:
        raise ValueError(f"ranks contribute rows of different shapes or dtypes: {filled}")
    if filled:
        return filled[0]
    return layouts[0][1], layouts[0][2]


def _row_layouts(values: Tensor) -> list[RowLayout]:
    """Every rank's ``(rows, row shape, dtype)`` of ``values``, in rank order (one small
    object all-gather; with NCCL it needs the rank's CUDA device set, as Lightning does)."""
    layouts: list[Any] = [None] * world_size()  # filled in place, one entry per rank
    dist.all_gather_object(layouts, (int(values.shape[0]), tuple(values.shape[1:]), values.dtype))
    return layouts


def all_gather_cat(values: Tensor) -> Tensor:
    """Concatenate every rank's ``values`` along dim 0, in rank order, on every rank.

    The one ragged all-gather of ncl: the ranks first exchange their layouts (rows, row
    shape, dtype), then every rank pads its rows to the largest count, all ranks gather the
    padded buffers and cut the padding off again. Runs on the backend's device (NCCL moves
    CUDA tensors only). A rank with no rows may hold any empty tensor (a ``(0,)``
    placeholder): it takes the row shape and dtype of the others (:func:`common_row_layout`).

    Args:
        values: ``(n, ...)``, ``n`` may differ between ranks (0 included); ranks with rows
            must agree on the row shape and dtype.

    Returns:
        ``(sum of n, ...)`` on the device of ``values``. Without a process group, ``values``.

    Raises:
        ValueError: if ``values`` is 0-d, or ranks with rows disagree on their layout.
    """
    if values.dim() == 0:
        raise ValueError("values must be (n, ...), got a 0-d tensor")
    if world_size() == 1:
        return values
    layouts = _row_layouts(values)
    shape, dtype = common_row_layout(layouts)
    counts = [rows for rows, _, _ in layouts]
    comm = _comm_device(values.device)
    padded = torch.zeros((max(counts), *shape), dtype=dtype, device=comm)
    if counts[rank()]:  # an empty placeholder has no rows to copy (and maybe not the shape)
        padded[: counts[rank()]] = values.to(comm)
    parts = [torch.empty_like(padded) for _ in counts]
    if max(counts):
        dist.all_gather(parts, padded)
    return torch.cat([part[:n] for part, n in zip(parts, counts)]).to(values.device)


def all_gather_rows(index: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
    """Concatenate ``(index, values)`` rows from every rank, in rank order.

    Args:
        index: ``(n,)`` int64 dataset indices of this rank's rows.
        values: ``(n, ...)`` rows (any float/bool dtype), ``n`` may differ between ranks;
            a rank without rows may pass a ``(0,)`` placeholder (:func:`all_gather_cat`).

    Returns:
        ``(index, values)`` of all ranks (on this rank's device of ``values``), rank 0's
        rows first. Without a process group, the inputs unchanged.
    """
    if index.dim() != 1 or values.shape[0] != index.shape[0]:
        raise ValueError(f"index must be (n,) and values (n, ...); got {tuple(index.shape)} "
                         f"and {tuple(values.shape)}")
    if world_size() == 1:
        return index, values
    return all_gather_cat(index).to(values.device), all_gather_cat(values)


def last_occurrences(index: Tensor) -> Tensor:
    """The position of the last occurrence of every distinct value of ``index``.

    ``out[index] = values`` with a repeated index leaves the winner undefined on CUDA (the
    writes race); scattering only these positions makes "the last one wins" hold on every
    device. A stable sort keeps equal values in their original order, so the last of each
    run of equal sorted values is that value's last occurrence.

    Args:
        index: ``(n,)`` integer indices.

    Returns:
        ``(u,)`` int64 positions into ``index``, one per distinct value, ordered by value.

    Example:
        >>> last_occurrences(torch.tensor([2, 0, 2, 1, 0])).tolist()
        [4, 3, 2]
    """
    ranked, order = torch.sort(index, stable=True)
    last = torch.ones_like(ranked, dtype=torch.bool)
    last[:-1] = ranked[1:] != ranked[:-1]
    return order[last]


def gather_by_index(index: Tensor, values: Tensor, num_samples: int) -> Tensor:
    """Scatter every rank's per-sample values into one full ``(N, ...)`` tensor.

    A sample computed on several ranks (or twice on one) keeps the value of the last
    contribution in rank order, which is the same on every rank and on every device
    (:func:`last_occurrences`). Every sample must be covered at least once. A rank that
    computed nothing may pass ``(0,)`` placeholders (:func:`all_gather_cat`).

    Args:
        index: ``(n,)`` dataset indices in ``[0, num_samples)``.
        values: ``(n, ...)`` the per-sample values.
        num_samples: N, the dataset size.

    Returns:
        ``(N, ...)`` on the device of ``values``, identical on every rank.

    Raises:
        ValueError: if some index lies outside ``[0, N)`` or some sample is missing.
    """
    index, values = all_gather_rows(index.long(), values)
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= num_samples):
        raise ValueError(f"index must lie in [0, {num_samples}), got [{int(index.min())}, "
                         f"{int(index.max())}]")
    index = index.to(values.device)
    out = torch.zeros((num_samples, *values.shape[1:]), dtype=values.dtype, device=values.device)
    seen = torch.zeros(num_samples, dtype=torch.bool, device=values.device)
    last = last_occurrences(index)
    out[index[last]] = values[last]  # unique indices: no write races
    seen[index] = True
    if not bool(seen.all()):
        raise ValueError(f"{int((~seen).sum())} of {num_samples} samples received no value")
    return out


def broadcast_(tensor: Tensor, src: int = 0) -> Tensor:
    """Overwrite ``tensor`` on every rank with rank ``src``'s copy (in place; returned)."""
    if world_size() == 1:
        return tensor
    comm = _comm_device(tensor.device)
    buf = tensor.detach().to(comm).contiguous()
    dist.broadcast(buf, src=src)
    tensor.copy_(buf.to(tensor.device))
    return tensor


def broadcast_buffers_(*modules: nn.Module, src: int = 0) -> None:
    """Give every rank rank ``src``'s buffers (BatchNorm running statistics) of ``modules``.

    DDP broadcasts buffers before a training forward, and each rank then updates them with
    its own batch; NCR's manual ``no_sync`` steps skip even that. Evaluation and per-sample
    passes run in eval mode, where BatchNorm uses these buffers, and each rank scores a
    different part: without this, the parts would come from slightly different networks,
    none of them exactly the checkpoint (which holds rank 0's). A no-op in one process.
    """
    if world_size() == 1:
        return
    for module in modules:
        for buffer in module.buffers():
            broadcast_(buffer, src)


def average_gradients(module: nn.Module) -> None:
    """Average the gradients of ``module``'s parameters over all ranks, like DDP does.

    Used instead of DDP's reducer when only one of several networks is stepped (see
    ``docs/methods/ncr_lnc.md``, "DDP"). A parameter that has a gradient on some rank but
    not on another is treated as zero there; parameters without a gradient anywhere keep
    ``grad = None`` (so the optimiser skips them, as it would in one process).
    """
    if world_size() == 1:
        return
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        return
    comm = _comm_device(params[0].device)
    has_grad = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=comm)
    dist.all_reduce(has_grad, op=dist.ReduceOp.MAX)
    used = [p for p, flag in zip(params, has_grad.tolist()) if flag > 0]
    if not used:
        return
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).to(comm)
                      for p in used])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= world_size()
    offset = 0
    for p in used:
        avg = flat[offset: offset + p.numel()].view_as(p).to(p.device, p.dtype)
        if p.grad is None:
            p.grad = avg.clone()
        else:
            p.grad.copy_(avg)
        offset += p.numel()
