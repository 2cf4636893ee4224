"""Per-sample state under DDP: two gloo processes versus one (ncl.training.distributed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from callbacks.ncr_fakes import SgrafPairs, ddp_worker, ncr_pass, tiny_sgraf

from ncl.division.co_divide import divide
from ncl.training.passes import run_pass
from ncl.training.distributed import all_gather_rows, broadcast_, gather_by_index


def test_single_process_helpers() -> None:
    out = gather_by_index(torch.tensor([2, 0, 1, 0]), torch.tensor([5.0, 1.0, 2.0, 3.0]), 3)
    assert out.tolist() == [3.0, 2.0, 5.0]  # a repeat keeps the last contribution
    with pytest.raises(ValueError, match="received no value"):
        gather_by_index(torch.tensor([0]), torch.tensor([1.0]), 2)
    with pytest.raises(ValueError, match="index must lie"):
        gather_by_index(torch.tensor([3]), torch.tensor([1.0]), 2)
    t = torch.arange(3.0)
    assert broadcast_(t) is t
    idx, val = all_gather_rows(torch.tensor([1]), torch.tensor([[2.0, 3.0]]))
    assert idx.tolist() == [1] and val.tolist() == [[2.0, 3.0]]


def test_two_gloo_processes_match_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same weights -> the same per-sample losses and division with 1 or 2 processes."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    mp.start_processes(ddp_worker, args=(2, str(tmp_path / "pg"), str(tmp_path)),
                       nprocs=2, join=True, start_method="fork")  # fork: tiny_runs.DDP_TRAINER
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]

    nets = [tiny_sgraf(0), tiny_sgraf(1)]
    losses = run_pass(ncr_pass(), nets, SgrafPairs(37), 2, torch.device("cpu"))
    prob, clean = divide(losses, gmm_seed=0)
    for got in ranks:
        assert torch.equal(got["losses"], losses)  # bit-identical: same batches, same ops
        assert torch.equal(got["prob"], prob) and torch.equal(got["clean"], clean)
        assert torch.equal(got["prob_global"], ranks[0]["prob_global"])
    # Gradient of sum((W x)^2) over 4 rows of x = c: 2 * 4 * (W c) c^T; averaged over c = 1, 2.
    torch.manual_seed(0)
    w = torch.randn(2, 3)
    ref = sum(8 * (w @ torch.full((3,), c)).outer(torch.full((3,), c)) for c in (1.0, 2.0)) / 2
    for got in ranks:
        torch.testing.assert_close(got["grad"], ref)
        # rank 0 moved 0 and 2 (P = 0), rank 1 moved 1 and then 2 again (P = 1).
        torch.testing.assert_close(got["gamma"][0], torch.tensor([0.5, 0.5, 0.75, 1.0]))
