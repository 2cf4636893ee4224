"""PerSampleState (ncl.training.state) and the generic per-sample pass (ncl.training.passes).

The two-process case (gloo, padded repeats on both ranks) is in
tests/training/test_distributed.py: LNC's momentum update scattered into a PerSampleState.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from ncl.training.passes import eval_mode, per_sample_pass
from ncl.training.state import PerSampleState, unique_runs


def test_get_scatter_and_checkpoint_round_trip() -> None:
    table = PerSampleState(num_rows=2, fill=1.0)
    with pytest.raises(RuntimeError, match="before reset"):
        table.get(0, torch.tensor([0]))
    table.reset(5)
    table.scatter(1, torch.tensor([4, 0]), torch.tensor([0.25, 0.5]))
    assert table.get(1, torch.tensor([0, 4, 2])).tolist() == [0.5, 0.25, 1.0]
    assert table.values[0].tolist() == [1.0] * 5  # other rows untouched
    copy = PerSampleState(num_rows=2)
    copy.load_state_dict(table.state_dict())
    assert torch.equal(copy.values, table.values)
    with pytest.raises(ValueError, match="rows"):
        PerSampleState(num_rows=3).load_state_dict(table.state_dict())


def test_repeated_index_is_applied_once_per_copy_in_order() -> None:
    """The distributed sampler pads with repeats: each copy moves the value, in order."""
    table = PerSampleState(num_rows=1, fill=1.0)
    table.reset(3)
    halve_towards = lambda old, new: (old + new) / 2  # noqa: E731
    table.scatter(0, torch.tensor([2, 1, 2]), torch.tensor([0.0, 0.0, 0.0]), halve_towards)
    assert table.values[0].tolist() == [1.0, 0.5, 0.25]
    assert [g.tolist() for g in unique_runs(torch.tensor([1, 2, 1, 3, 2]))] == [[0, 1], [2, 3, 4]]


class _Scorer(nn.Module):
    """score_i = mean of image i's features + 0.1 * dropout noise (train mode only)."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.drop(images.mean(dim=(1, 2)))


class _Pairs(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 7

    def __getitem__(self, i: int) -> dict[str, object]:
        return {"image": torch.full((2, 3), float(i)), "tokens": torch.tensor([1, 2]), "index": i}


def test_per_sample_pass_gathers_by_index_in_eval_mode() -> None:
    net = _Scorer().train()
    batches = [[np.array([3, 0, 6]), np.array([5, 1]), np.array([2, 4])]]  # any order, all covered
    values = per_sample_pass([net], _Pairs(), batches, lambda m, b: m(b["images"]), torch.device("cpu"))
    assert values.shape == (1, 7)
    assert values[0].tolist() == [float(i) for i in range(7)]  # eval mode: no dropout
    assert net.training and net.drop.training  # modes restored
    with eval_mode(net):
        assert not net.drop.training
    with pytest.raises(ValueError, match="received no value"):
        per_sample_pass([net], _Pairs(), [[np.array([0, 1])]], lambda m, b: m(b["images"]),
                        torch.device("cpu"))
