"""Similarity matrices in shards with bounded memory, and ensembles (spec sections 5.2, 5.4).

Unlike the official ``encode_data`` (spec section 6 item 4), images are stored once (not once
per caption), in float32, and each caption shard is trimmed to its own longest caption.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch
from torch import Tensor

SimFn = Callable[[Tensor, Tensor, Tensor], Tensor]
"""``sim_fn(img_block (a, R, E), cap_block (b, L, E), lens_block (b,)) -> (a, b) scores``."""

EnsembleMode = Literal["mean"]


def _check_embeddings(
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


@torch.no_grad()
def sharded_similarity(
    sim_fn: SimFn,
    img_emb: Tensor,
    cap_emb: Tensor,
    cap_lens: Tensor,
    shard_size: int = 1000,
    device: torch.device | str | None = None,
) -> Tensor:
    """Fill the (N_img, N_cap) similarity matrix block by block (spec section 5.2).

    For every caption shard (trimmed to its longest caption) and image shard, both blocks are
    moved to ``device`` and ``sim_fn`` is called once; the block result goes straight to a CPU
    matrix. Only one image block and one caption block are on the device at a time, so device
    memory is bounded by ``shard_size`` whatever N. Runs under ``torch.no_grad``.

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

    Returns:
        Similarities, shape (N_img, N_cap), float32, on the CPU.

    Raises:
        ValueError: On inconsistent shapes or lengths, a bad ``shard_size``, or a ``sim_fn``
            result of the wrong shape.
    """
    _check_embeddings(img_emb, cap_emb, cap_lens, shard_size)
    target = torch.device(device) if device is not None else img_emb.device
    n_img, n_cap = img_emb.shape[0], cap_emb.shape[0]
    sims = torch.empty(n_img, n_cap, dtype=torch.float32)  # (N_img, N_cap) on CPU
    for c0 in range(0, n_cap, shard_size):
        c1 = min(c0 + shard_size, n_cap)
        caps, lens = _caption_shard(cap_emb, cap_lens, c0, c1)
        caps, lens = caps.to(target), lens.to(target)
        for i0 in range(0, n_img, shard_size):
            i1 = min(i0 + shard_size, n_img)
            block = sim_fn(img_emb[i0:i1].to(target), caps, lens)
            if block.shape != (i1 - i0, c1 - c0):
                raise ValueError(
                    f"sim_fn must return shape (n_img_block, n_cap_block) = ({i1 - i0}, "
                    f"{c1 - c0}), got {tuple(block.shape)}"
                )
            sims[i0:i1, c0:c1] = block.float().cpu()
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
