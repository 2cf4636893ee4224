"""Cross-modal retrieval metrics: ranks, Recall@K, median/mean rank, rSum (spec section 5.3).

Every similarity matrix here has rows = images and columns = captions; caption ``c`` belongs
to image ``c // captions_per_image`` (spec section 1.3). Ranks are 0-based internally and
computed without a Python loop per query (spec section 6 item 9).

Ties: the official code orders tied scores by an unstable ``argsort``, so their order is
arbitrary. ncl is PESSIMISTIC instead: every tie counts against the ground truth. A model
that has collapsed to constant similarities therefore gets the worst possible ranks rather
than a perfect score, and the result no longer depends on the sorting algorithm.
"""

from __future__ import annotations

import torch
from torch import Tensor

RECALL_KS: tuple[int, ...] = (1, 5, 10)
"""The K of Recall@K reported by every paper (spec section 5.3)."""

RETRIEVAL_KEYS: tuple[str, ...] = (
    "i2t_r1",
    "i2t_r5",
    "i2t_r10",
    "i2t_medr",
    "i2t_meanr",
    "t2i_r1",
    "t2i_r5",
    "t2i_r10",
    "t2i_medr",
    "t2i_meanr",
    "rsum",
)
"""Keys of the dictionaries returned by :func:`retrieval_metrics` and :func:`fold5_metrics`."""

# Upper bound on the elements of one (queries x candidates) comparison block. 2**24 booleans
# are 16 MiB, so 5K COCO (5,000 x 25,000) needs about 8 blocks per direction and never
# materialises a second full-size matrix.
_CHUNK_ELEMENTS: int = 1 << 24


def _check_sims(sims: Tensor, captions_per_image: int) -> None:
    """Raise ValueError unless ``sims`` is an (N_img, N_img * captions_per_image) score matrix.

    Args:
        sims: Similarity matrix, shape (N_img, N_cap).
        captions_per_image: Captions per image (5 for COCO/F30K, 1 for CC152K).
    """
    if isinstance(captions_per_image, bool) or not isinstance(captions_per_image, int):
        raise ValueError(f"captions_per_image must be an int, got {captions_per_image!r}")
    if captions_per_image < 1:
        raise ValueError(f"captions_per_image must be >= 1, got {captions_per_image}")
    if not isinstance(sims, Tensor) or sims.dim() != 2:
        shape = tuple(sims.shape) if isinstance(sims, Tensor) else type(sims).__name__
        raise ValueError(f"sims must be a 2-D tensor (N_img, N_cap), got {shape}")
    if sims.dtype == torch.bool or sims.is_complex():
        raise ValueError(f"sims must hold real scores, got dtype {sims.dtype}")
    n_img, n_cap = sims.shape
    if n_img == 0:
        raise ValueError("sims must contain at least one image row, got N_img = 0")
    if n_cap != n_img * captions_per_image:
        raise ValueError(
            f"sims has shape {tuple(sims.shape)}: expected N_cap == N_img * captions_per_image"
            f" = {n_img} * {captions_per_image} = {n_img * captions_per_image}"
        )
    if _has_nan(sims):
        # NaN compares False with everything, which would silently rank the ground truth first.
        raise ValueError("sims contains NaN; ranks are undefined")


def _rows_per_chunk(n_candidates: int) -> int:
    """Number of queries per block so that a block holds at most ``_CHUNK_ELEMENTS`` entries."""
    return max(1, _CHUNK_ELEMENTS // max(1, n_candidates))


def _has_nan(sims: Tensor) -> bool:
    """Whether a (N, M) matrix holds a NaN, checked in row blocks to bound temporary memory."""
    if not sims.is_floating_point():
        return False
    step = _rows_per_chunk(sims.shape[1])
    return any(bool(sims[s : s + step].isnan().any()) for s in range(0, sims.shape[0], step))


def i2t_ranks(sims: Tensor, captions_per_image: int) -> Tensor:
    """0-based image-to-text rank of each image's best ground-truth caption (spec section 5.3).

    With pessimistic ties, ``rank_i = #{c' not in gt(i) : s[i, c'] >= max_{c in gt(i)} s[i, c]}``
    where ``gt(i) = {i * per, ..., i * per + per - 1}``.

    Args:
        sims: Similarity matrix, shape (N_img, N_cap) with N_cap = N_img * captions_per_image.
        captions_per_image: Captions per image.

    Returns:
        Ranks, shape (N_img,), dtype int64, on the device of ``sims``.

    Raises:
        ValueError: If the shape does not match ``captions_per_image`` or ``sims`` has NaN.

    Example:
        >>> i2t_ranks(torch.tensor([[0.9, 0.1], [0.8, 0.2]]), 1).tolist()
        [0, 1]
    """
    _check_sims(sims, captions_per_image)
    n_img, n_cap = sims.shape
    ranks = torch.empty(n_img, dtype=torch.long, device=sims.device)
    step = _rows_per_chunk(n_cap)
    for start in range(0, n_img, step):
        block = sims[start : start + step]  # (B, N_cap)
        b = block.shape[0]
        images = torch.arange(start, start + b, device=sims.device)  # (B,)
        offsets = torch.arange(captions_per_image, device=sims.device)  # (per,)
        gt_cols = images[:, None] * captions_per_image + offsets  # (B, per)
        gt = block.gather(1, gt_cols)  # (B, per)
        best = gt.amax(dim=1, keepdim=True)  # (B, 1)
        # int32 counts: enough for any N_cap and faster to reduce than the default int64.
        at_least_best = (block >= best).sum(dim=1, dtype=torch.int32)  # (B,) incl. >= 1 gt
        gt_at_least_best = (gt >= best).sum(dim=1, dtype=torch.int32)  # (B,)
        ranks[start : start + b] = at_least_best - gt_at_least_best
    return ranks


def t2i_ranks(sims: Tensor, captions_per_image: int) -> Tensor:
    """0-based text-to-image rank of each caption's own image (spec section 5.3).

    With pessimistic ties, ``rank_c = #{i' != img(c) : s[i', c] >= s[img(c), c]}`` where
    ``img(c) = c // captions_per_image``.

    Args:
        sims: Similarity matrix, shape (N_img, N_cap) with N_cap = N_img * captions_per_image.
        captions_per_image: Captions per image.

    Returns:
        Ranks, shape (N_cap,), dtype int64, on the device of ``sims``.

    Raises:
        ValueError: If the shape does not match ``captions_per_image`` or ``sims`` has NaN.

    Example:
        >>> t2i_ranks(torch.tensor([[0.9, 0.1], [0.8, 0.2]]), 1).tolist()
        [0, 0]
    """
    _check_sims(sims, captions_per_image)
    n_img, n_cap = sims.shape
    ranks = torch.empty(n_cap, dtype=torch.long, device=sims.device)
    step = _rows_per_chunk(n_img)
    for start in range(0, n_cap, step):
        block = sims[:, start : start + step]  # (N_img, B)
        caps = torch.arange(start, start + block.shape[1], device=sims.device)  # (B,)
        own = block[caps // captions_per_image, caps - start]  # (B,)
        # The own image always satisfies >= itself, hence the - 1.
        ranks[start : start + block.shape[1]] = (block >= own).sum(dim=0, dtype=torch.int32) - 1
    return ranks


def _median_rank(ranks: Tensor) -> float:
    """``floor(median(ranks)) + 1`` with numpy's median (mean of the two middle values)."""
    ordered = ranks.sort().values
    n = ordered.numel()
    median = (ordered[(n - 1) // 2] + ordered[n // 2]).item() / 2.0
    return float(int(median) + 1)  # ranks are >= 0, so int() is floor


def _direction_metrics(ranks: Tensor, prefix: str) -> dict[str, float]:
    """Recall@K (percent), medr and meanr (1-based) of one direction.

    Args:
        ranks: 0-based ranks, shape (N_queries,).
        prefix: ``"i2t"`` or ``"t2i"``.

    Returns:
        ``{prefix_r1, prefix_r5, prefix_r10, prefix_medr, prefix_meanr}``.
    """
    out = {f"{prefix}_r{k}": 100.0 * (ranks < k).double().mean().item() for k in RECALL_KS}
    out[f"{prefix}_medr"] = _median_rank(ranks)
    out[f"{prefix}_meanr"] = ranks.double().mean().item() + 1.0
    return out


def retrieval_metrics(sims: Tensor, captions_per_image: int) -> dict[str, float]:
    """Recall@1/5/10, medr, meanr in both directions and rSum (spec section 5.3).

    ``R@K = 100 * #{queries with rank < K} / #queries``; ``medr = floor(median(rank)) + 1``;
    ``meanr = mean(rank) + 1``; ``rsum`` is the sum of the six recalls. Ties are pessimistic
    (see :func:`i2t_ranks`, :func:`t2i_ranks`).

    Args:
        sims: Similarity matrix, shape (N_img, N_cap) with N_cap = N_img * captions_per_image.
        captions_per_image: Captions per image (5 for COCO/F30K, 1 for CC152K).

    Returns:
        Dictionary with the keys of :data:`RETRIEVAL_KEYS`, recalls in percent.

    Raises:
        ValueError: If ``N_cap != N_img * captions_per_image`` or ``sims`` has NaN.
    """
    out = _direction_metrics(i2t_ranks(sims, captions_per_image), "i2t")
    out.update(_direction_metrics(t2i_ranks(sims, captions_per_image), "t2i"))
    out["rsum"] = sum(out[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in RECALL_KS)
    return {key: out[key] for key in RETRIEVAL_KEYS}


def fold5_metrics(sims: Tensor, captions_per_image: int, n_folds: int = 5) -> dict[str, float]:
    """COCO "1K" protocol: metrics on contiguous image folds, averaged (spec section 5.3).

    Fold ``f`` takes images ``f * F ... (f + 1) * F - 1`` with ``F = N_img / n_folds`` (1,000 on
    COCO 5K) and their captions. Every metric, medr and meanr included, is averaged over the
    folds; ``rsum`` is the mean of the fold rSums, which equals the sum of the mean recalls
    (not the "6 x mean i2t recall" printed by NCR/RCL).

    Args:
        sims: Similarity matrix, shape (N_img, N_cap) with N_cap = N_img * captions_per_image.
        captions_per_image: Captions per image.
        n_folds: Number of folds; must divide N_img.

    Returns:
        Dictionary with the keys of :data:`RETRIEVAL_KEYS`, each averaged over folds.

    Raises:
        ValueError: If ``n_folds`` is not a positive divisor of N_img, or ``sims`` is invalid.
    """
    _check_sims(sims, captions_per_image)
    if isinstance(n_folds, bool) or not isinstance(n_folds, int) or n_folds < 1:
        raise ValueError(f"n_folds must be a positive int, got {n_folds!r}")
    n_img = sims.shape[0]
    if n_img % n_folds != 0:
        raise ValueError(f"n_folds={n_folds} must divide the number of images N_img={n_img}")
    fold = n_img // n_folds
    totals = dict.fromkeys(RETRIEVAL_KEYS, 0.0)
    for f in range(n_folds):
        caps = fold * captions_per_image
        block = sims[f * fold : (f + 1) * fold, f * caps : (f + 1) * caps]  # (F, F * per)
        for key, value in retrieval_metrics(block, captions_per_image).items():
            totals[key] += value
    return {key: value / n_folds for key, value in totals.items()}
