"""Similarity matrices in shards with bounded memory, and ensembles (spec sections 5.2, 5.4).

Unlike the official ``encode_data`` (spec section 6 item 4), images are stored once (not once
per caption), in float32, and each caption shard is trimmed to its own longest caption.

The matrix is a grid of blocks (:func:`similarity_blocks`, ``shard_size`` images x
``shard_size`` captions, caption shards in the outer loop). Under DDP the ranks split this
same grid into contiguous runs of blocks (:func:`rank_block_range`), each computes its own
run exactly as one process would (:func:`iter_block_scores`), and
:func:`ncl.evaluation.sharded.rank_sharded_similarity` gathers the runs and puts them in
place (:func:`place_blocks`). Every score is thus produced by the same ``sim_fn`` call on the
same inputs whatever the number of processes, so the matrix is bit-identical to one
process's: no assumption that ``sim_fn`` gives the same bits for a pair in another block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from ncl.progress import track

SimFn = Callable[[Tensor, Tensor, Tensor], Tensor]
"""``sim_fn(img_block (a, R, E), cap_block (b, L, E), lens_block (b,)) -> (a, b) scores``."""

EnsembleMode = Literal["mean"]


def check_embeddings(
    img_emb: Tensor, cap_emb: Tensor, cap_lens: Tensor, shard_size: int
) -> None:
    """Raise ValueError on inconsistent shapes, lengths or shard size (see sharded_similarity)."""
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise ValueError(f"shard_size must be a positive int, got {shard_size!r}")
    if img_emb.dim() < 2 or img_emb.shape[0] == 0:
        raise ValueError(
            f"img_emb must be (N_img, R, E) with N_img >= 1, got {tuple(img_emb.shape)}"
        )
    if cap_emb.dim() not in (2, 3) or cap_emb.shape[0] == 0:
        raise ValueError(
            f"cap_emb must be (N_cap, L, E) or pooled (N_cap, E) with N_cap >= 1, "
            f"got {tuple(cap_emb.shape)}"
        )
    if cap_lens.dim() != 1 or cap_lens.shape[0] != cap_emb.shape[0]:
        raise ValueError(
            f"cap_lens must have shape (N_cap,) = ({cap_emb.shape[0]},), "
            f"got {tuple(cap_lens.shape)}"
        )
    if cap_lens.dtype.is_floating_point or cap_lens.dtype == torch.bool:
        raise ValueError(f"cap_lens must hold integer lengths, got dtype {cap_lens.dtype}")
    if cap_emb.dim() == 3 and (cap_lens.min() < 1 or cap_lens.max() > cap_emb.shape[1]):
        raise ValueError(
            f"cap_lens must lie in [1, L={cap_emb.shape[1]}], got range "
            f"[{int(cap_lens.min())}, {int(cap_lens.max())}]"
        )


def _caption_shard(
    cap_emb: Tensor, cap_lens: Tensor, start: int, stop: int
) -> tuple[Tensor, Tensor]:
    """Captions ``start:stop`` with padding trimmed to the shard's longest caption.

    Exact as long as ``sim_fn`` ignores positions beyond each caption's length, which any
    length-masked similarity does; it saves the compute spent on padding.
    """
    lens = cap_lens[start:stop]  # (b,)
    caps = cap_emb[start:stop]  # (b, L, E) or (b, E)
    if caps.dim() == 3:
        caps = caps[:, : int(lens.max())]  # (b, L_shard, E)
    return caps, lens


class Block(NamedTuple):
    """One block of the similarity matrix: images ``img_start:img_stop`` x captions
    ``cap_start:cap_stop``."""

    img_start: int
    img_stop: int
    cap_start: int
    cap_stop: int

    @property
    def size(self) -> int:
        """Number of (image, caption) pairs in the block."""
        return (self.img_stop - self.img_start) * (self.cap_stop - self.cap_start)


def similarity_blocks(n_img: int, n_cap: int, shard_size: int) -> list[Block]:
    """The blocks of an ``(n_img, n_cap)`` matrix in computation order.

    Caption shards form the outer loop (a caption shard is trimmed and moved to the device
    once for all image shards), image shards the inner one; edge blocks are smaller.

    Example:
        >>> [tuple(b) for b in similarity_blocks(3, 4, 2)]  # (img0, img1, cap0, cap1)
        [(0, 2, 0, 2), (2, 3, 0, 2), (0, 2, 2, 4), (2, 3, 2, 4)]
    """
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise ValueError(f"shard_size must be a positive int, got {shard_size!r}")
    if n_img < 0 or n_cap < 0:
        raise ValueError(f"n_img and n_cap must be >= 0, got {n_img} and {n_cap}")
    return [Block(i0, min(i0 + shard_size, n_img), c0, min(c0 + shard_size, n_cap))
            for c0 in range(0, n_cap, shard_size) for i0 in range(0, n_img, shard_size)]


def rank_block_range(n_blocks: int, rank: int, world: int) -> range:
    """The contiguous run of block numbers that ``rank`` of ``world`` computes.

    Runs are consecutive in rank order and cover ``range(n_blocks)`` exactly once; their
    lengths differ by at most one (``floor`` / ``ceil`` of ``n_blocks / world``). With fewer
    blocks than ranks, some ranks get an empty run: the unit of work is a whole block, so
    that every score comes from the same ``sim_fn`` call as in one process.

    Example:
        >>> [rank_block_range(5, r, 2) for r in range(2)]
        [range(0, 2), range(2, 5)]
    """
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank must lie in [0, world) with world >= 1, got rank={rank}, "
                         f"world={world}")
    if n_blocks < 0:
        raise ValueError(f"n_blocks must be >= 0, got {n_blocks}")
    return range(n_blocks * rank // world, n_blocks * (rank + 1) // world)


def block_scores(sim_fn: SimFn, img_emb: Tensor, caps: Tensor, lens: Tensor, block: Block,
                 device: torch.device) -> Tensor:
    """``sim_fn`` on one block; ``caps``/``lens`` are the block's caption shard (already
    trimmed by :func:`_caption_shard` and on ``device``).

    Returns:
        ``(img_stop - img_start, cap_stop - cap_start)`` float32 scores on the CPU.

    Raises:
        ValueError: If ``sim_fn`` returns another shape.
    """
    a, b = block.img_stop - block.img_start, block.cap_stop - block.cap_start
    scores = sim_fn(img_emb[block.img_start:block.img_stop].to(device), caps, lens)
    if scores.shape != (a, b):
        raise ValueError(f"sim_fn must return shape (n_img_block, n_cap_block) = ({a}, {b}), "
                         f"got {tuple(scores.shape)}")
    return scores.float().cpu()


@torch.no_grad()
def iter_block_scores(sim_fn: SimFn, img_emb: Tensor, cap_emb: Tensor, cap_lens: Tensor,
                      blocks: Sequence[Block], device: torch.device,
                      description: str = "similarity") -> Iterator[tuple[Block, Tensor]]:
    """``(block, scores)`` for each of ``blocks`` in order, one block on the device at a time.

    A caption shard is trimmed and moved to ``device`` once for a run of consecutive blocks
    that share it (all image shards of a caption shard, in :func:`similarity_blocks` order).
    Shows a progress bar (:func:`ncl.progress.track`) on rank 0 of a terminal.

    Args:
        sim_fn, img_emb, cap_emb, cap_lens: as :func:`sharded_similarity` (not re-checked).
        blocks: the blocks to compute, e.g. one rank's run of :func:`similarity_blocks`.
        device: where ``sim_fn`` runs.
        description: the progress bar's label.

    Yields:
        The block and its ``(a, b)`` float32 CPU scores (see :func:`block_scores`).
    """
    shard: tuple[int, int] | None = None
    caps = lens = cap_emb  # placeholders, set at the first block
    for block in track(blocks, description, total=len(blocks)):
        if shard != (block.cap_start, block.cap_stop):
            shard = (block.cap_start, block.cap_stop)
            caps, lens = _caption_shard(cap_emb, cap_lens, *shard)
            caps, lens = caps.to(device), lens.to(device)
        yield block, block_scores(sim_fn, img_emb, caps, lens, block, device)


def place_blocks(blocks: Sequence[Block], flat: Tensor, n_img: int, n_cap: int) -> Tensor:
    """Assemble the ``(n_img, n_cap)`` matrix from the blocks' scores laid end to end.

    Args:
        blocks: every block of the matrix (:func:`similarity_blocks`), in the order of ``flat``.
        flat: ``(sum of block sizes,)`` each block's row-major scores, one after the other.
        n_img, n_cap: the matrix shape.

    Returns:
        ``(n_img, n_cap)`` with the dtype and device of ``flat``.

    Raises:
        ValueError: If ``flat`` does not hold exactly the blocks' scores.
    """
    expected = sum(b.size for b in blocks)
    if flat.dim() != 1 or flat.numel() != expected:
        raise ValueError(f"flat must be 1-D with {expected} scores (the blocks' sizes), got "
                         f"shape {tuple(flat.shape)}")
    out = flat.new_empty((n_img, n_cap))
    offset = 0
    for b in blocks:
        rows, cols = b.img_stop - b.img_start, b.cap_stop - b.cap_start
        block = flat[offset:offset + b.size].view(rows, cols)
        out[b.img_start:b.img_stop, b.cap_start:b.cap_stop] = block
        offset += b.size
    return out


@torch.no_grad()
def sharded_similarity(
    sim_fn: SimFn,
    img_emb: Tensor,
    cap_emb: Tensor,
    cap_lens: Tensor,
    shard_size: int = 1000,
    device: torch.device | str | None = None,
    description: str = "similarity",
) -> Tensor:
    """Fill the (N_img, N_cap) similarity matrix block by block (spec section 5.2).

    For every caption shard (trimmed to its longest caption) and image shard, both blocks are
    moved to ``device`` and ``sim_fn`` is called once; the block result goes straight to a CPU
    matrix. Only one image block and one caption block are on the device at a time, so device
    memory is bounded by ``shard_size`` whatever N. Runs under ``torch.no_grad``. This process
    computes every block; :func:`ncl.evaluation.sharded.rank_sharded_similarity` splits
    them over DDP ranks.

    Args:
        sim_fn: ``(img_block (a, R, E), cap_block (b, L_shard, E), lens_block (b,)) -> (a, b)``,
            e.g. an SGR/SAF similarity head in eval mode.
        img_emb: Image embeddings, shape (N_img, R, E), one entry per image (not per caption),
            float32.
        cap_emb: Caption word embeddings, shape (N_cap, L, E) padded, float32; a pooled
            (N_cap, E) tensor (VSE-infinity) is also accepted and is not trimmed.
        cap_lens: True caption lengths, shape (N_cap,), integers in [1, L].
        shard_size: Images and captions per block (official test value: 1000).
        device: Where ``sim_fn`` runs; defaults to the device of ``img_emb``.
        description: Label of the progress bar (shown on rank 0 of a terminal only).

    Returns:
        Similarities, shape (N_img, N_cap), float32, on the CPU.

    Raises:
        ValueError: On inconsistent shapes or lengths, a bad ``shard_size``, or a ``sim_fn``
            result of the wrong shape.
    """
    check_embeddings(img_emb, cap_emb, cap_lens, shard_size)
    target = torch.device(device) if device is not None else img_emb.device
    n_img, n_cap = img_emb.shape[0], cap_emb.shape[0]
    sims = torch.empty(n_img, n_cap, dtype=torch.float32)  # (N_img, N_cap) on CPU
    blocks = similarity_blocks(n_img, n_cap, shard_size)
    for b, scores in iter_block_scores(sim_fn, img_emb, cap_emb, cap_lens, blocks, target,
                                       description):
        sims[b.img_start:b.img_stop, b.cap_start:b.cap_stop] = scores
    return sims


def ensemble(sims: Sequence[Tensor], mode: EnsembleMode = "mean",
             dtype: torch.dtype | None = None) -> Tensor:
    """Combine the similarity matrices of several systems (spec section 5.4).

    ``"mean"`` averages them: NCR's two co-trained networks, or "SGRAF" = SGR + SAF trained
    separately. Accumulates in place, so peak memory is one extra matrix whatever the count.
    What is averaged (sigmoid scores, or DECL's evidence) is the caller's choice: see
    :mod:`ncl.evaluation.combine`.

    Args:
        sims: Matrices of identical shape, e.g. (N_img, N_cap) each.
        mode: Combination rule; only ``"mean"`` for now.
        dtype: Accumulate and return in this floating dtype (e.g. ``torch.float64``, as the
            official numpy code sums); default the promoted dtype of the inputs.

    Returns:
        The combined matrix, same shape; dtype ``dtype`` or the promoted dtype of the inputs.

    Raises:
        ValueError: If ``sims`` is empty, the shapes differ, ``mode`` is unknown or
            ``dtype`` is not floating.

    Example:
        >>> ensemble([torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 0.0]])])
        tensor([[2., 1.]])
    """
    if mode != "mean":
        raise ValueError(f"mode must be 'mean', got {mode!r}")
    if len(sims) == 0:
        raise ValueError("sims must contain at least one similarity matrix")
    shapes = {tuple(s.shape) for s in sims}
    if len(shapes) != 1:
        raise ValueError(f"all similarity matrices must have the same shape, got {sorted(shapes)}")
    if dtype is not None and not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating dtype, got {dtype}")
    if dtype is None:
        dtype = sims[0].dtype
        for s in sims[1:]:
            dtype = torch.promote_types(dtype, s.dtype)
        if not dtype.is_floating_point:
            dtype = torch.get_default_dtype()  # integer scores would truncate the mean
    out = sims[0].to(dtype=dtype, copy=True)
    for s in sims[1:]:
        out.add_(s.to(device=out.device, dtype=dtype))
    return out.div_(len(sims))
