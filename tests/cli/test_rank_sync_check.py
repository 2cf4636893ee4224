"""The comparison behind the two-process tests' ``RankSyncCheck`` (tests/tiny_runs.py): which
entries of the ranks' state differ, from their digests, in one process."""

from __future__ import annotations

import numpy as np
import torch

from tiny_runs import diverged, flat_state, leaf_digest


def test_a_digest_sees_one_bit_dtype_and_shape() -> None:
    x = torch.arange(6, dtype=torch.float32)
    flipped = x.clone()
    flipped.view(torch.int32)[5] ^= 1  # the last bit of 5.0
    assert leaf_digest(x) == leaf_digest(x.clone())
    assert leaf_digest(x) != leaf_digest(flipped)
    assert leaf_digest(x) != leaf_digest(x.double())
    assert leaf_digest(x) != leaf_digest(x.reshape(2, 3))
    assert leaf_digest(x.reshape(2, 3).t()) == leaf_digest(x.reshape(2, 3).t().contiguous())
    assert leaf_digest(np.arange(3)) == leaf_digest(torch.arange(3))
    assert leaf_digest(torch.tensor(True)) != leaf_digest(torch.tensor(False))
    assert leaf_digest(torch.zeros(2, dtype=torch.bfloat16)) != leaf_digest(torch.zeros(2))
    assert [leaf_digest(v) for v in (3, 3.0, None)] == ["3", "3.0", "None"]


def test_diverged_names_what_differs_or_is_missing() -> None:
    rank0 = {k: leaf_digest(v) for k, v in flat_state(
        {"division": {"epoch": 1, "prob": torch.ones(2, 3)}, "steps": 7}).items()}
    assert sorted(rank0) == ["division.epoch", "division.prob", "steps"]
    assert diverged([rank0, dict(rank0)]) == []
    rank1 = {**rank0, "steps": leaf_digest(8), "extra": leaf_digest(None)}
    assert diverged([rank0, rank1]) == ["extra", "steps"]
    rank1 = {**rank0, "division.prob": leaf_digest(torch.ones(2, 3).index_fill(1, torch.tensor([2]), 0.5))}
    assert diverged([rank0, rank0, rank1]) == ["division.prob"]
