"""L2RM's learned cost function, its key-point supervision and the image queue (notes 4.1-4.5, 5).

Convention: similarity and cost matrices are (Q, B), rows = (queue) images, columns = captions.

One training iteration of L2RM uses these pieces in this order (notes 10):

1. cost step: :func:`draw_key_points` picks k clean pairs, :func:`insert_key_points` writes
   their images into a *copy* of the queue, the caller computes the similarities S_key of
   that copy against the B clean captions (no gradient), and :func:`key_point_cost_loss` of
   ``CostNetwork(S_key)`` is minimised;
2. queue step: :meth:`ImageQueue.push` of the noisy batch's raw image features;
3. model step: ``CostNetwork(sim(queue, noisy captions))`` (no gradient) feeds the partial OT
   of :mod:`ncl.transport.partial_ot`, with :func:`own_image_mask` when the data are noisy
   (:func:`learned_cost_plan`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedParameter, is_lazy

from ncl.transport.partial_ot import PartialPlan, partial_ot


class CostNetwork(LazyModuleMixin, nn.Module):
    """Learned cost ``C = relu(S W^T + b)``: one ``width x width`` linear map on the caption axis.

    ``C_i. = relu(W S_i. + b)`` for every image row ``i`` of a (Q, width) similarity matrix:
    the layer mixes the similarities of one image to the ``width`` captions. It is
    initialised with ``W = -I`` and ``b = 1``, so that at the start ``C = relu(1 - S)``
    elementwise.

    Why ``width`` is the per-process batch size: the official layer is
    ``Linear(batch_size, batch_size)`` and is applied to (queue images x batch captions)
    matrices, i.e. it mixes the B captions of the current (clean or noisy) batch. Its weights
    are therefore tied to the caption *positions* of a batch, and the number of captions must
    equal ``width`` exactly (the loaders drop the last incomplete batch); the number of image
    rows Q is free. Under data parallelism each process sees its own B captions, so ``width``
    is the per-process batch size.

    The width may be left open (``width=None``): the parameters are then *lazy*
    (``UninitializedParameter``) until :meth:`materialize` sets them to ``-I`` and ``1``, or
    ``load_state_dict`` gives them a checkpoint's shape and values. A method can so be built
    before its batch size is known and load a checkpoint of any width for evaluation.

    Attributes:
        weight: ``(width, width)``; bias: ``(width,)``.
    """

    def __init__(self, width: int | None = None) -> None:
        super().__init__()
        self.weight = UninitializedParameter()
        self.bias = UninitializedParameter()
        if width is not None:
            self.materialize(width)

    @property
    def width(self) -> int | None:
        """Captions (columns) the layer expects; ``None`` while the parameters are lazy."""
        return None if is_lazy(self.weight) else int(self.weight.shape[0])

    def materialize(self, width: int) -> None:
        """Create the parameters at ``width`` and set ``W = -I``, ``b = 1`` (the official start)."""
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise ValueError(f"`width` must be an int >= 1, got {width}")
        if not self.has_uninitialized_params():
            raise ValueError(f"the cost network already has width {self.width}")
        self.weight.materialize((width, width))
        self.bias.materialize((width,))
        with torch.no_grad():
            self.weight.copy_(-torch.eye(width))
            self.bias.fill_(1.0)

    def initialize_parameters(self, sims: Tensor) -> None:
        """LazyModuleMixin's hook before the first forward (kept until then even after
        :meth:`materialize`): the width of the first similarities, if still open."""
        if self.has_uninitialized_params():
            self.materialize(int(sims.shape[-1]))

    def forward(self, sims: Tensor) -> Tensor:
        """Costs of a (Q, width) similarity matrix.

        Args:
            sims: (Q, width) similarities, rows = images, columns = the ``width`` captions.

        Returns:
            (Q, width) non-negative costs ``relu(sims @ W^T + b)``.

        Raises:
            ValueError: if ``sims`` is not 2-D with ``width`` columns.
        """
        if not isinstance(sims, Tensor) or sims.dim() != 2 or sims.shape[1] != self.width:
            shape = tuple(sims.shape) if isinstance(sims, Tensor) else type(sims).__name__
            raise ValueError(
                f"`sims` must be a (Q, {self.width}) matrix (columns = the {self.width} "
                f"captions of a batch, the cost network's width), got {shape}"
            )
        return torch.relu(torch.nn.functional.linear(sims, self.weight, self.bias))


def _check_index_vectors(rows: Tensor, cols: Tensor, names: tuple[str, str]) -> None:
    for value, name in zip((rows, cols), names):
        if not isinstance(value, Tensor) or value.dim() != 1:
            raise ValueError(f"`{name}` must be a 1-D tensor of indices")
        if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
            raise ValueError(f"`{name}` must hold integer indices, got dtype {value.dtype}")
    if rows.shape != cols.shape:
        raise ValueError(
            f"`{names[0]}` and `{names[1]}` must have the same length, got "
            f"{rows.shape[0]} and {cols.shape[0]}"
        )


def key_point_cost_loss(costs: Tensor, rows: Tensor, cols: Tensor) -> Tensor:
    """Cost-network loss of L2RM: ``L = sum_t C[rows_t, cols_t]`` (notes 4.1, 5).

    The sum of the costs at the k key pairs (key image in queue slot ``rows_t``, its caption at
    batch position ``cols_t``), with no normalisation, negatives or margin. Minimising it lowers
    the cost of known-matched pairs; an entry whose ReLU cost reaches 0 stops giving gradient.

    Args:
        costs: (Q, B) costs, e.g. ``CostNetwork(S_key)``.
        rows: (k,) integer queue slots (the ``slots`` of :func:`draw_key_points`).
        cols: (k,) integer caption positions (the ``positions`` of :func:`draw_key_points`).

    Returns:
        0-d tensor, differentiable with respect to ``costs``.

    Raises:
        ValueError: on a non-2-D ``costs``, bad index vectors or out-of-range indices.
    """
    if not isinstance(costs, Tensor) or costs.dim() != 2:
        raise ValueError("`costs` must be a (Q, B) tensor")
    _check_index_vectors(rows, cols, ("rows", "cols"))
    for value, size, name in ((rows, costs.shape[0], "rows"), (cols, costs.shape[1], "cols")):
        if value.numel() and bool((value < 0).any() | (value >= size).any()):
            raise ValueError(f"`{name}` must lie in [0, {size}), got {value.tolist()}")
    rows = rows.to(device=costs.device, dtype=torch.long)
    cols = cols.to(device=costs.device, dtype=torch.long)
    return costs[rows, cols].sum()


def max_key_points(batch_size: int, fraction: float = 0.1) -> int:
    """Largest key-point count ``max(1, floor(fraction * batch_size))`` (official: 12 at B = 128).

    ``floor`` is taken of the float product, as the official ``int(0.1 * batch_size)``. The
    official code would fail for ``0.1 * B < 1`` (an empty range); here at least one key point
    is drawn, so tiny batches still train the cost network.
    """
    return max(1, math.floor(fraction * batch_size))


def draw_key_points(
    batch_size: int,
    queue_length: int,
    generator: np.random.Generator | torch.Generator,
    fraction: float = 0.1,
) -> tuple[Tensor, Tensor]:
    """Draw L2RM's key points: ``k ~ U{1..max(1, floor(fraction B))}`` clean pairs (notes 5).

    Draws k distinct clean-batch positions J (their images and captions are the key pairs) and
    k distinct queue slots I (where the key images are written), both without replacement.
    The key pairs are then (queue slot ``I_t``, caption ``J_t``).

    With a ``np.random.Generator`` (preferred; e.g. ``np.random.default_rng([seed, epoch,
    step, rank])``) the draw is a pure function of the seed: ``k = integers(1, k_max + 1)``,
    then ``J = choice(B, k, replace=False)``, then ``I = choice(Q, k, replace=False)``. A
    ``torch.Generator`` (CPU) is accepted too: ``randint`` then two ``randperm`` prefixes. The
    official code uses Python's global ``random`` instead, so its draws are not reproduced
    bit for bit, only in distribution.

    Args:
        batch_size: B, clean captions per batch (>= 1).
        queue_length: Q, queue slots (>= 1).
        generator: the random source (consumed).
        fraction: ``k_max = max(1, floor(fraction * B))``; official 0.1; in (0, 1].

    Returns:
        ``(slots, positions)``: two (k,) int64 CPU tensors, ``slots`` in [0, Q) and
        ``positions`` in [0, B), each without repeats.

    Raises:
        ValueError: on bad sizes, a ``fraction`` outside (0, 1], ``k_max > queue_length`` or
            an unsupported ``generator``.
    """
    for value, name in ((batch_size, "batch_size"), (queue_length, "queue_length")):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"`{name}` must be an int >= 1, got {value}")
    if isinstance(fraction, bool) or not (0.0 < float(fraction) <= 1.0):
        raise ValueError(f"`fraction` must be a number in (0, 1], got {fraction}")
    k_max = max_key_points(int(batch_size), float(fraction))
    if k_max > queue_length:
        raise ValueError(
            f"`queue_length` ({queue_length}) must be at least the largest key-point count "
            f"max(1, floor(fraction * batch_size)) = {k_max}"
        )
    if isinstance(generator, np.random.Generator):
        k = int(generator.integers(1, k_max + 1))
        positions = generator.choice(int(batch_size), size=k, replace=False)
        slots = generator.choice(int(queue_length), size=k, replace=False)
        return (
            torch.as_tensor(slots, dtype=torch.int64),
            torch.as_tensor(positions, dtype=torch.int64),
        )
    if isinstance(generator, torch.Generator):
        if generator.device.type != "cpu":
            raise ValueError("`generator` must be a CPU torch.Generator")
        k = int(torch.randint(1, k_max + 1, (1,), generator=generator))
        positions = torch.randperm(int(batch_size), generator=generator)[:k]
        slots = torch.randperm(int(queue_length), generator=generator)[:k]
        return slots.to(torch.int64), positions.to(torch.int64)
    raise ValueError(
        "`generator` must be a np.random.Generator or a torch.Generator, "
        f"got {type(generator).__name__}"
    )


def insert_key_points(queue: Tensor, images: Tensor, slots: Tensor, positions: Tensor) -> Tensor:
    """A copy of ``queue`` with ``copy[slots[t]] = images[positions[t]]`` (notes 4.1).

    The official cost step writes the key images into a clone of the queue, so the queue
    itself is unchanged (the input is never modified here either).

    Args:
        queue: (Q, R, D) raw image features (any trailing shape).
        images: (B, R, D) raw image features of the clean batch (same trailing shape).
        slots: (k,) distinct integer queue slots in [0, Q).
        positions: (k,) integer clean-batch positions in [0, B).

    Returns:
        (Q, R, D) tensor, dtype and device of ``queue``, without gradient history from
        ``images`` (key images are data, not parameters).

    Raises:
        ValueError: on mismatched shapes, bad or repeated slots, out-of-range indices.
    """
    if not isinstance(queue, Tensor) or not isinstance(images, Tensor) or queue.dim() < 1:
        raise ValueError("`queue` and `images` must be tensors of shape (Q, ...) and (B, ...)")
    if queue.shape[1:] != images.shape[1:]:
        raise ValueError(
            f"`images` must have the per-image shape of `queue` {tuple(queue.shape[1:])}, "
            f"got {tuple(images.shape[1:])}"
        )
    _check_index_vectors(slots, positions, ("slots", "positions"))
    for value, size, name in (
        (slots, queue.shape[0], "slots"),
        (positions, images.shape[0], "positions"),
    ):
        if value.numel() and bool((value < 0).any() | (value >= size).any()):
            raise ValueError(f"`{name}` must lie in [0, {size}), got {value.tolist()}")
    if torch.unique(slots).numel() != slots.numel():
        # duplicate targets of an index_put have an unspecified winner
        raise ValueError(f"`slots` must be distinct, got {slots.tolist()}")
    out = queue.detach().clone()
    src = images.detach().to(device=out.device, dtype=out.dtype)
    out[slots.to(device=out.device, dtype=torch.long)] = src[
        positions.to(device=out.device, dtype=torch.long)
    ]
    return out


class ImageQueue:
    """FIFO of the raw image features of the last noisy batches, with their pair indices.

    Each slot holds the raw (region) features of an image and the training-pair (caption)
    index it came with. :meth:`push` is the official shift (notes 4.2): ``queue[B:] <- old
    queue[:Q - B]`` and ``queue[:B] <- new``; with Q = B the queue simply becomes the new
    batch. Slots ``0..B-1`` therefore hold the current noisy batch in order, which is what
    :func:`own_image_mask` relies on.

    A plain Python object rather than an ``nn.Module`` with buffers: the features are data,
    not model state, and buffers would put Q x R x D floats (about 37 MB at Q = 128, 36 x 2048)
    into every checkpoint and let ``Module.to`` move them. Here the features stay on the
    device (and dtype) they were given, and the checkpointed state is only the indices: on
    resume the caller re-reads the features of :attr:`indices` from the dataset and calls
    :meth:`fill`.

    Args:
        length: Q, the number of slots (>= 1).
    """

    def __init__(self, length: int) -> None:
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ValueError(f"`length` must be an int >= 1, got {length}")
        self.length = length
        self._features: Tensor | None = None
        self._indices: Tensor | None = None

    @property
    def features(self) -> Tensor:
        """(Q, R, D) raw features, slot 0 the newest; ValueError before :meth:`fill`."""
        if self._features is None:
            raise ValueError("the image queue holds no features yet: call `fill` first")
        return self._features

    @property
    def indices(self) -> Tensor:
        """(Q,) int64 pair index of each slot (also available right after a state load)."""
        if self._indices is None:
            raise ValueError("the image queue holds no indices yet: call `fill` first")
        return self._indices

    @property
    def ready(self) -> bool:
        """Whether the queue holds features (after :meth:`fill`, not after a state load)."""
        return self._features is not None

    def _check(self, features: Tensor, indices: Tensor, count: int | None, what: str) -> None:
        if not isinstance(features, Tensor) or features.dim() < 1:
            raise ValueError("`features` must be a tensor of shape (N, ...)")
        if not isinstance(indices, Tensor) or indices.dim() != 1:
            raise ValueError("`indices` must be a 1-D tensor of pair indices")
        if indices.is_floating_point() or indices.is_complex() or indices.dtype == torch.bool:
            raise ValueError(f"`indices` must hold integers, got dtype {indices.dtype}")
        if indices.shape[0] != features.shape[0]:
            raise ValueError(
                f"`indices` must have one entry per image, got {indices.shape[0]} for "
                f"{features.shape[0]} images"
            )
        if count is not None and features.shape[0] != count:
            raise ValueError(f"`features` must have {count} {what}, got {features.shape[0]}")

    def fill(self, features: Tensor, indices: Tensor) -> None:
        """Set the whole queue (initial fill, or re-fill after :meth:`load_state_dict`).

        Args:
            features: (Q, R, D) raw image features.
            indices: (Q,) integer pair indices of those images.
        """
        self._check(features, indices, self.length, "rows (the queue length)")
        self._features = features.detach().clone()
        self._indices = indices.detach().to(torch.int64).clone()

    def push(self, features: Tensor, indices: Tensor) -> None:
        """Official FIFO shift: ``q[B:] <- q[:Q-B]``, then ``q[:B] <- features``.

        Args:
            features: (B, R, D) raw features of the noisy batch, B <= Q, same per-image
                shape as the queue; moved to the queue's device and dtype.
            indices: (B,) integer pair indices of those images.

        Raises:
            ValueError: before :meth:`fill`, if B > Q, or on mismatched shapes.
        """
        old = self.features  # raises before fill
        self._check(features, indices, None, "")
        batch = features.shape[0]
        if batch > self.length:
            raise ValueError(
                f"the queue length ({self.length}) must be >= the batch size, got a batch of "
                f"{batch}"
            )
        if features.shape[1:] != old.shape[1:]:
            raise ValueError(
                f"`features` must have the per-image shape {tuple(old.shape[1:])}, got "
                f"{tuple(features.shape[1:])}"
            )
        new = features.detach().to(device=old.device, dtype=old.dtype)
        new_idx = indices.detach().to(device=self.indices.device, dtype=torch.int64)
        keep = self.length - batch
        # new tensors (no in-place write): a previous queue tensor may still be in use
        self._features = torch.cat([new, old[:keep]])
        self._indices = torch.cat([new_idx, self.indices[:keep]])

    def state_dict(self) -> dict[str, Any]:
        """``{"length": Q, "indices": (Q,) int64 CPU tensor or None}``; features are not saved."""
        idx = None if self._indices is None else self._indices.detach().cpu().clone()
        return {"length": self.length, "indices": idx}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the indices; the features are dropped until the caller :meth:`fill` s them.

        Raises:
            ValueError: if the saved length differs from this queue's or the indices are bad.
        """
        if not isinstance(state, dict) or "length" not in state or "indices" not in state:
            raise ValueError("`state` must be a dict with keys 'length' and 'indices'")
        if int(state["length"]) != self.length:
            raise ValueError(
                f"`state` is for a queue of length {state['length']}, this one has {self.length}"
            )
        idx = state["indices"]
        if idx is not None:
            idx = torch.as_tensor(idx)
            if idx.dim() != 1 or idx.shape[0] != self.length or idx.is_floating_point():
                raise ValueError(f"`state['indices']` must be ({self.length},) integers")
            idx = idx.to(torch.int64).clone()
        self._indices = idx
        self._features = None


def own_image_mask(queue_length: int, batch_size: int, device: torch.device | str | None = None
                   ) -> Tensor:
    """(Q, B) bool OT mask, True = allowed, with the own pairs ``(i, i)``, i < B, forbidden.

    Right after :meth:`ImageQueue.push`, queue slot ``i`` holds the image noisy caption ``i``
    is currently paired with, so the partial OT may not send caption ``i`` back to it (notes
    4.5). The official code applies it only when the noise ratio is not 0.

    Raises:
        ValueError: unless ``queue_length >= batch_size >= 1``.
    """
    for value, name in ((queue_length, "queue_length"), (batch_size, "batch_size")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be an int >= 1, got {value}")
    if queue_length < batch_size:
        raise ValueError(
            f"`queue_length` ({queue_length}) must be >= `batch_size` ({batch_size})"
        )
    mask = torch.ones((queue_length, batch_size), dtype=torch.bool, device=device)
    diag = torch.arange(batch_size, device=device)
    mask[diag, diag] = False
    return mask


def learned_cost_plan(cost_net: CostNetwork, sims: Tensor, mask_own_image: bool, rho: float,
                      reg: float, max_iter: int, threshold: float, dummy_scale: float) -> PartialPlan:
    """The rematching plan of L2RM's model step: :func:`~ncl.transport.partial_ot.partial_ot` of
    the learned cost ``max(f(S), 1e-10)`` (no gradient), each noisy caption's own image masked
    (:func:`own_image_mask`) when ``mask_own_image``.

    Args:
        cost_net: the cost network ``f``.
        sims: ``(Q, B)`` similarities of the queue's images to the noisy captions (detached).
        mask_own_image: forbid the pairs ``(i, i)``, i < B (the official rule: noisy data).
        rho, reg, max_iter, threshold, dummy_scale: as :func:`~ncl.transport.partial_ot.partial_ot`.

    Returns:
        The ``(Q, B)`` plan and its diagnostics.
    """
    with torch.no_grad():
        cost = cost_net(sims).clamp_min(1e-10)
    mask = own_image_mask(cost.shape[0], cost.shape[1], cost.device) if mask_own_image else None
    return partial_ot(cost, rho, reg, mask, max_iter, threshold, dummy_scale)
