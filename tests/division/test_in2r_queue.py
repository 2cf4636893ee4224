"""IN2R's queue: the update rule (which pairs enter, first in first out with wrap-around, as the
official ``MemoryQueue.enqueue``), the neighbour retrieval by value and the mean fallback of the
rectified targets."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.division.in2r_queue import (
    EmbeddingQueue,
    enqueue_mask,
    mean_clean_probability,
    nearest_neighbours,
    rectified_targets,
)


def rows(*values: float) -> torch.Tensor:
    """``(n, 2)`` rows ``(v, -v)``: each row tells which push wrote it."""
    return torch.tensor([[v, -v] for v in values]).reshape(-1, 2)


def test_enqueue_rule_is_strictly_above_the_mean_clean_probability() -> None:
    prob = torch.tensor([0.875, 0.25, 0.625, 0.75])  # exact in binary
    clean = torch.tensor([True, False, True, False])
    mean = mean_clean_probability(prob, clean)
    assert mean == 0.75  # (0.875 + 0.625) / 2: the predicted-clean pairs only, not 0.625
    assert enqueue_mask(torch.tensor([0.8, 0.75, 0.7, 1.0]), mean).tolist() == [True, False, False, True]
    assert mean_clean_probability(prob, torch.zeros(4, dtype=torch.bool)) == 0.0  # official 0.0


def test_push_fills_then_wraps_first_in_first_out() -> None:
    queue = EmbeddingQueue.empty(5, 2)
    assert queue.filled == 0 and not queue.full
    queue.push(rows(1, 2, 3), rows(10, 20, 30))
    assert (queue.ptr, queue.full, queue.filled) == (3, False, 3)
    assert queue.images[:3, 0].tolist() == [1, 2, 3] and queue.images[3:].abs().sum() == 0
    queue.push(rows(4, 5, 6), rows(40, 50, 60))  # 4, 5 at the end, 6 over the oldest (1)
    assert (queue.ptr, queue.full, queue.filled) == (1, True, 5)
    assert queue.images[:, 0].tolist() == [6, 2, 3, 4, 5]
    assert queue.captions[:, 0].tolist() == [60, 20, 30, 40, 50]  # pairs stay aligned
    queue.push(rows(7, 8, 9, 10), rows(70, 80, 90, 100))
    assert queue.images[:, 0].tolist() == [6, 7, 8, 9, 10] and queue.ptr == 0
    queue.push(rows(), rows())  # an empty push (no confident pair in the batch) changes nothing
    assert queue.ptr == 0 and queue.images[:, 0].tolist() == [6, 7, 8, 9, 10]
    with pytest.raises(ValueError, match="cannot push 6"):
        queue.push(rows(*range(6)), rows(*range(6)))


def test_exactly_full_then_wrap_as_officially() -> None:
    """Officially a push that ends exactly at the end leaves ``ptr == Q`` (not full yet); the
    next push writes at slot 0 on. Here ``ptr`` wraps to 0 at once: the same slots."""
    queue = EmbeddingQueue.empty(4, 2)
    queue.push(rows(1, 2, 3, 4), rows(1, 2, 3, 4))
    assert queue.filled == 4
    queue.push(rows(5), rows(5))
    assert queue.images[:, 0].tolist() == [5, 2, 3, 4]


def test_state_round_trip_keeps_the_valid_part() -> None:
    queue = EmbeddingQueue.empty(6, 2)
    queue.push(rows(1, 2), rows(3, 4))
    state = queue.state()
    assert state["images"].shape == (2, 2)  # only what was written
    back = EmbeddingQueue.from_state(state)
    assert (back.size, back.ptr, back.full) == (6, 2, False)
    assert torch.equal(back.images, queue.images) and torch.equal(back.captions, queue.captions)


def test_nearest_neighbours_by_value() -> None:
    keys = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.6, 0.8]])
    values = torch.tensor([[10.0, 0.0], [20.0, 0.0], [30.0, 0.0], [40.0, 0.0]])
    queries = torch.tensor([[0.8, 0.6], [0.0, -1.0]])
    # inner products: query 0 -> [0.8, 0.6, -0.8, 0.96]; query 1 -> [0, -1, 0, -0.8]
    got = nearest_neighbours(queries, keys, values, k=2)
    assert got.shape == (2, 2, 2)
    assert got[0, :, 0].tolist() == [40.0, 10.0]
    assert sorted(got[1, :, 0].tolist()) == [10.0, 30.0]  # the two zeros (a tie) beat -0.8
    assert nearest_neighbours(queries, keys[:1], values[:1], k=2) is None  # too few entries


def test_rectified_targets_mean_fallback_and_refiner() -> None:
    neighbours = torch.tensor([[[3.0, 0.0], [1.0, 2.0]]])
    got = rectified_targets(neighbours, None)
    assert got[0].tolist() == pytest.approx([2 / math.sqrt(5), 1 / math.sqrt(5)])
    assert rectified_targets(neighbours, lambda n: n[:, 0]).tolist() == [[3.0, 0.0]]
