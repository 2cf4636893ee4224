"""IN2R's memory of confident pairs (``MemoryQueue`` of ``co_train.py`` at 909e532): the queue
update rule, the neighbour retrieval and the rectified targets, as pure functions and a small
state record.

* :func:`enqueue_mask` - which labelled pairs enter a network's queue: clean probability of
  the division it trains on above a mean clean probability (the official rule compares the
  *peer's* ``w`` of the pair with the network's *own* mean over its predicted-clean pairs).
* :class:`EmbeddingQueue` - a ring buffer of ``(image, caption)`` embedding pairs:
  :meth:`EmbeddingQueue.push` writes at the pointer and wraps around (first in, first out).
* :func:`nearest_neighbours` - for each query, the k queue entries whose *same-modality*
  embedding is most similar (inner product), and their *other-modality* embeddings.
* :func:`rectified_targets` - those neighbours through a refiner (``GraphRefiner``) or, without
  one, their normalised mean.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor


def mean_clean_probability(prob: Tensor, clean: Tensor) -> float:
    """The mean of ``(N,)`` ``prob`` over the ``(N,)`` bool ``clean`` pairs, 0 when none is
    clean (official ``avg_clean_prob``)."""
    return float(prob[clean].mean()) if bool(clean.any()) else 0.0


def enqueue_mask(prob: Tensor, threshold: float) -> Tensor:
    """``(B,)`` bool: the labelled pairs whose clean probability ``prob`` (``(B,)``) is strictly
    above ``threshold`` (official ``batch_prob_l > net.avg_clean_prob``)."""
    return prob > threshold


@dataclass
class EmbeddingQueue:
    """A ring buffer of ``Q`` embedding pairs, empty until the first :meth:`push`.

    Attributes:
        images, captions: ``(Q, E)`` stored embeddings (zeros where never written).
        ptr: the next slot written.
        full: whether the buffer has wrapped around once (then every slot is valid).
    """

    images: Tensor
    captions: Tensor
    ptr: int = 0
    full: bool = False

    @classmethod
    def empty(cls, size: int, dim: int, device: torch.device | str = "cpu") -> EmbeddingQueue:
        if size < 1 or dim < 1:
            raise ValueError(f"an EmbeddingQueue needs size >= 1 and dim >= 1, got {size}, {dim}")
        return cls(torch.zeros(size, dim, device=device), torch.zeros(size, dim, device=device))

    @property
    def size(self) -> int:
        return int(self.images.shape[0])

    @property
    def filled(self) -> int:
        """Valid entries: ``Q`` once full, else ``ptr``."""
        return self.size if self.full else self.ptr

    def push(self, images: Tensor, captions: Tensor) -> None:
        """Write ``(n, E)`` pairs at the pointer, wrapping to the start (official ``enqueue``).

        The official code writes ``n`` rows from ``ptr`` on and, when they do not fit, the rest
        from slot 0; ``n`` beyond ``Q`` is refused here (its second copy would overflow too)."""
        n = int(images.shape[0])
        if n > self.size:
            raise ValueError(f"cannot push {n} pairs into a queue of {self.size}")
        slots = (self.ptr + torch.arange(n, device=self.images.device)) % self.size
        self.images[slots] = images.detach().to(self.images.dtype)
        self.captions[slots] = captions.detach().to(self.captions.dtype)
        self.full = self.full or self.ptr + n >= self.size
        self.ptr = (self.ptr + n) % self.size

    def state(self) -> dict[str, Any]:
        """The valid part only (a checkpoint of an unfilled queue stays small)."""
        n = self.filled
        return {"images": self.images[:n].cpu(), "captions": self.captions[:n].cpu(),
                "size": self.size, "ptr": self.ptr, "full": self.full}

    @classmethod
    def from_state(cls, saved: dict[str, Any], device: torch.device | str = "cpu") -> EmbeddingQueue:
        queue = cls.empty(int(saved["size"]), int(saved["images"].shape[1]), device)
        n = int(saved["images"].shape[0])
        queue.images[:n] = saved["images"].to(device)
        queue.captions[:n] = saved["captions"].to(device)
        queue.ptr, queue.full = int(saved["ptr"]), bool(saved["full"])
        return queue


def nearest_neighbours(queries: Tensor, keys: Tensor, values: Tensor, k: int) -> Tensor | None:
    """The ``values`` of each query's ``k`` most similar ``keys`` (official
    ``retrieve_nearest_text``/``_img``): ``idx_b = topk_j <q_b, key_j>``, returns
    ``values[idx_b]``.

    Args:
        queries: ``(B, E)`` (an image's embedding to search images, a caption's for captions).
        keys: ``(n, E)`` the queue's same-modality embeddings (its valid part).
        values: ``(n, E)`` the queue's other-modality embeddings.
        k: neighbours per query.

    Returns:
        ``(B, k, E)``, or ``None`` when the queue holds fewer than ``k`` entries (official: no
        correction then).
    """
    if keys.shape[0] < k:
        return None
    sims = queries @ keys.to(queries.dtype).t()  # (B, n)
    index = sims.topk(k, dim=1).indices  # (B, k)
    return values[index]  # (B, k, E)


def rectified_targets(neighbours: Tensor, refiner: Callable[[Tensor], Tensor] | None) -> Tensor:
    """``(B, k, E)`` neighbours -> ``(B, E)`` unit targets: ``refiner(neighbours)``, or without
    one ``mean_j n_j / max(|mean_j n_j|, 1e-12)`` (the official fallback)."""
    if refiner is not None:
        return refiner(neighbours)
    return F.normalize(neighbours.mean(dim=1), dim=-1)
