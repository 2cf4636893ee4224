"""Issue 28, GPU readiness of distributed data, passes and evaluation (CPU reproductions;
DDP cases run two gloo processes):

- a rank dealt no batch of a per-sample pass contributes ``(0,)`` placeholders, yet the
  gather gives every rank ReCon-like ``(N, 3)`` rows (not a shape mismatch);
- a repeated index keeps its last contribution through a scatter of unique indices (CUDA
  leaves racing writes undefined; on the CPU only the helper is new);
- the training loader's ``drop_last`` follows what one rank batches (``ceil(N / W)``);
- loaders pin memory only for a CUDA trainer;
- evaluation unfolds the gathered caption rows straight into dataset order (one padded copy
  instead of two), bit-identical to unfolding and then placing.
"""

from __future__ import annotations

import importlib
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from callbacks.ncr_fakes import SgrafPairs, tiny_sgraf
from helpers import write_split, write_vocab
from torch import Tensor, nn
from torch.utils.data.distributed import DistributedSampler

from ncl.data.batch_policy import drop_single_pair_batch, pairs_per_rank, pin_memory
from ncl.data.datamodule import PrecompDataModule
from ncl.division.co_divide import mean_hinge
from ncl.evaluation.metric import by_index, fold, unfold, unfold_by_index
from ncl.training.distributed import (
    common_row_layout,
    gather_by_index,
    last_occurrences,
)
from ncl.training.passes import deal_batches, per_sample_pass

N_PAIRS, BATCH = 5, 8  # one batch: with two ranks, rank 1 is dealt nothing


def three_columns(net: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """A ReCon-like per-sample row: ``(B, 3)`` float64 (the placeholder is float32 ``(0,)``)."""
    hinge = mean_hinge(0.2)(net, batch).double()
    return torch.stack([hinge, 2 * hinge, batch["index"].double()], dim=1)


# ------------------------------------------------------------------ 1. empty rank
def test_row_layout_of_an_empty_rank_comes_from_the_others() -> None:
    f32, f64 = torch.float32, torch.float64
    assert common_row_layout([(0, (), f32), (5, (3,), f64)]) == ((3,), f64)
    assert common_row_layout([(4, (3,), f64), (0, (), f32), (2, (3,), f64)]) == ((3,), f64)
    assert common_row_layout([(0, (), f32), (0, (2,), f64)]) == ((), f32)  # nobody: rank 0's
    with pytest.raises(ValueError, match="different shapes or dtypes"):
        common_row_layout([(1, (3,), f64), (1, (4,), f64)])
    with pytest.raises(ValueError, match="different shapes or dtypes"):
        common_row_layout([(1, (3,), f64), (1, (3,), f32)])


def empty_rank_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    """One gloo process: the three-column pass (rank 1 dealt no batch) and raw ragged gathers
    with an empty ``(0,)`` float32 contribution; saves what it gathered."""
    import torch.distributed as dist

    from ncl.training.distributed import all_gather_cat

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=60))
    try:
        batches = deal_batches(np.arange(N_PAIRS), BATCH, rank, world)
        values = per_sample_pass([tiny_sgraf(0)], SgrafPairs(N_PAIRS), [batches], three_columns,
                                 torch.device("cpu"))
        rows = torch.arange(6, dtype=torch.float64).view(2, 3) if rank == 0 else torch.zeros(0)
        flags = torch.tensor([True, False, True]) if rank == 1 else torch.zeros(0)
        torch.save({"values": values, "dealt": len(batches), "rows": all_gather_cat(rows),
                    "flags": all_gather_cat(flags), "none": all_gather_cat(torch.zeros(0))},
                   f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_a_rank_without_batches_gathers_three_columns(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # importable by the spawned processes through tests/ on sys.path (see test_sharded_passes)
    worker = importlib.import_module(f"training.{Path(__file__).stem}").empty_rank_worker
    mp.start_processes(worker, args=(2, str(tmp_path / "pg"), str(tmp_path)),
                       nprocs=2, join=True, start_method="fork")  # fork: tiny_runs.DDP_TRAINER
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    alone = per_sample_pass([tiny_sgraf(0)], SgrafPairs(N_PAIRS),
                            [deal_batches(np.arange(N_PAIRS), BATCH)], three_columns,
                            torch.device("cpu"))
    assert alone.shape == (1, N_PAIRS, 3) and alone.dtype == torch.float64
    assert [got["dealt"] for got in ranks] == [1, 0]
    for got in ranks:
        assert torch.equal(got["values"], alone)  # bit-identical to one process, both ranks
        assert torch.equal(got["rows"], torch.arange(6, dtype=torch.float64).view(2, 3))
        assert torch.equal(got["flags"], torch.tensor([True, False, True]))
        assert got["none"].shape == (0,)


# ------------------------------------------------------------------ 3. repeated indices
def test_last_occurrences() -> None:
    assert last_occurrences(torch.tensor([2, 0, 2, 1, 0])).tolist() == [4, 3, 2]
    assert last_occurrences(torch.tensor([3, 1])).tolist() == [1, 0]
    assert last_occurrences(torch.zeros(0, dtype=torch.long)).tolist() == []


def last_wins(index: Tensor, values: Tensor, n: int) -> Tensor:
    """Loop reference: every position written in order."""
    out = torch.zeros((n, *values.shape[1:]), dtype=values.dtype)
    for pos, i in enumerate(index.tolist()):
        out[i] = values[pos]
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_repeated_indices_keep_the_last_contribution(seed: int) -> None:
    """Every sample three times (the last copy marked), in a shuffled order."""
    n, gen = 50, torch.Generator().manual_seed(seed)
    index = torch.arange(n).repeat(3)[torch.randperm(3 * n, generator=gen)]
    values = torch.randn(3 * n, 4, generator=gen)
    expected = last_wins(index, values, n)
    positions = last_occurrences(index)
    assert torch.equal(index[positions], torch.arange(n))
    assert torch.equal(gather_by_index(index, values, n), expected)
    assert torch.equal(by_index(index, values), expected)  # evaluation's padded repeats
    in_order = torch.arange(n).repeat(3)  # the rank-order case: the last block wins
    assert torch.equal(gather_by_index(in_order, values, n), values[2 * n:])


# ------------------------------------------------------------------ 2. drop_last per rank
def _fake_trainer(tmp_path: Path, world_size: int, device: str = "cpu") -> SimpleNamespace:
    progress = SimpleNamespace(epoch_progress=SimpleNamespace(current=SimpleNamespace(processed=0)))
    return SimpleNamespace(world_size=world_size, is_global_zero=True, log_dir=str(tmp_path),
                           default_root_dir=str(tmp_path), lightning_module=None, fit_loop=progress,
                           strategy=SimpleNamespace(root_device=torch.device(device)))


def _datamodule(tmp_path: Path, n_pairs: int, batch_size: int, trainer: SimpleNamespace
                ) -> PrecompDataModule:
    root = tmp_path / "data"
    write_split(root / "toy_precomp", "train", n_pairs, per=1)
    write_split(root / "toy_precomp", "dev", 4, per=1, seed=1)
    write_vocab(root / "vocab" / "toy_precomp_vocab.json", ["a", "dog", "runs", "on", "the"])
    dm = PrecompDataModule(str(root), "toy_precomp", batch_size=batch_size,
                           per_device_batch=True)
    dm.trainer = trainer
    dm.setup("fit")
    return dm


def test_pairs_per_rank_is_what_the_distributed_sampler_holds() -> None:
    for n in (9, 10, 20, 37):
        for world in (1, 2, 3, 8):
            held = [len(DistributedSampler(range(n), num_replicas=world, rank=r))
                    for r in range(world)]
            assert held == [pairs_per_rank(n, world)] * world
    assert pairs_per_rank(9, 2, distributed_sampler=False) == 9


@pytest.mark.parametrize(("n", "world", "batch", "drop"),
                         [(9, 2, 4, True),  # 5 per rank: 4 + 1
                          (9, 1, 4, True), (12, 2, 4, False),
                          (20, 2, 3, True),  # 20 % 3 == 2, but 10 per rank: 3 + 3 + 3 + 1
                          (20, 2, 19, False),  # 20 % 19 == 1, but 10 per rank: one batch
                          (20, 1, 19, True)])
def test_drop_last_follows_one_rank(n: int, world: int, batch: int, drop: bool) -> None:
    assert drop_single_pair_batch(pairs_per_rank(n, world), batch) is drop


@pytest.mark.parametrize(("world", "batch", "drop"),
                         [(2, 3, True), (2, 19, False), (1, 3, False), (1, 19, True)])
def test_training_loader_drops_by_rank(tmp_path: Path, world: int, batch: int, drop: bool) -> None:
    dm = _datamodule(tmp_path, 20, batch, _fake_trainer(tmp_path, world))
    loader = dm.train_dataloader()
    assert len(dm.train_pairs()) == 20 and loader.drop_last is drop
    if world == 1:  # one process: every batch has at least two pairs
        assert min(len(b["index"]) for b in loader) >= 2


# ------------------------------------------------------------------ 4. pin_memory
def test_pin_memory_only_on_cuda() -> None:
    assert pin_memory(None) is False
    assert pin_memory(SimpleNamespace()) is False
    assert pin_memory(SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cpu")))) is False
    cuda = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cuda", 1)))
    assert pin_memory(cuda) is True


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_loaders_pin_memory_on_cuda(tmp_path: Path, device: str) -> None:
    dm = _datamodule(tmp_path, 20, 4, _fake_trainer(tmp_path, 1, device))
    loaders = [dm.train_dataloader(), *dm.val_dataloader()]
    assert [loader.pin_memory for loader in loaders] == [device == "cuda"] * 3


# ------------------------------------------------------------------ 5. evaluation
@pytest.mark.parametrize("seed", [0, 1])
def test_unfold_by_index_is_unfold_then_by_index(seed: int) -> None:
    """Ragged batches of a shuffled split with padded repeats (as two ranks gather them)."""
    gen = torch.Generator().manual_seed(seed)
    index = torch.cat([torch.randperm(11, generator=gen), torch.tensor([3, 7])])  # 2 repeats
    sizes, parts = [4, 4, 5], []
    for size in sizes:  # (B, L_b, E) with the batch's own width
        parts.append(fold(torch.randn(size, int(torch.randint(1, 6, (1,), generator=gen)), 2,
                                      generator=gen)))
    rows, widths = (torch.cat(t) for t in zip(*parts))
    expected = by_index(index, unfold(rows, widths))
    got = unfold_by_index(index, rows, widths)
    assert got.shape == expected.shape and torch.equal(got, expected)
    pooled = torch.randn(13, 3, generator=gen)
    assert torch.equal(unfold_by_index(index, *fold(pooled)), by_index(index, pooled))


def test_pass_and_plan_loaders_pin_only_for_cuda() -> None:
    """The per-sample passes' and NCR's plan loaders (``ncl.training.plans.iterate``) pin
    their batches when asked (on CUDA), never by default."""
    from ncl.training.plans import PlanLoader, iterate

    data = [{"x": torch.zeros(2)}]
    assert iterate(data).pin_memory is False
    assert iterate(data, pin_memory=True).pin_memory is True
    assert PlanLoader(data).pin_memory is False and PlanLoader(data, pin_memory=True).pin_memory
