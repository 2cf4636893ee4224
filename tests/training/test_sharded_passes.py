"""Per-sample passes under DDP: every pair scored by exactly one rank (the batch plans of
NCR's co-divide, CRCL's estimate and ReCon's division pass are dealt whole to ranks, with
no DistributedSampler padding), each rank about half, two gloo processes bit-identical to
one, and the progress bar silent and harmless."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from callbacks.ncr_fakes import SgrafPairs, ncr_pass, tiny_sgraf
from torch import Tensor, nn

from ncl.division.co_divide import mean_hinge
from ncl.training.passes import PassSpec, deal_batches, pass_order, per_sample_pass

N_PAIRS, BATCH = 37, 8  # 37 = 4 batches of 8 and one of 5: not divisible by the world size


class CountingFn:
    """Wraps a per-sample function and records the dataset indices it scores."""

    def __init__(self, fn) -> None:
        self.fn, self.seen = fn, []

    def __call__(self, net: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        self.seen.append(batch["index"].clone())
        return self.fn(net, batch)

    def indices(self) -> list[int]:
        return torch.cat(self.seen).tolist() if self.seen else []


def plans(rank: int, world: int) -> list[list[np.ndarray]]:
    """The two networks' co-divide batches of this rank (seed 5, epoch 2, shuffled)."""
    spec = ncr_pass(seed=5, batch_size=BATCH)
    return [deal_batches(pass_order(spec, N_PAIRS, 2, net), BATCH, rank, world) for net in (0, 1)]


# ------------------------------------------------------------------ pure plans
def _dealt(spec: PassSpec, net: int = 0):  # noqa: ANN202 - (n, rank, world) -> batches
    return lambda n, rank, world: deal_batches(pass_order(spec, n, 2, net), BATCH, rank, world)


PLANS = {  # NCR's co-divide (a shuffle per network), one shared shuffle (ReCon), index order
    "per_net_shuffle": _dealt(ncr_pass(seed=5, batch_size=BATCH), net=1),
    "shared_shuffle": _dealt(PassSpec(mean_hinge(0.2), (0,), BATCH, True, 31, 5)),
    "index_order": _dealt(PassSpec(mean_hinge(0.2), (0,), BATCH, False, 31, 5)),
}


@pytest.mark.parametrize("plan", sorted(PLANS))
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [1, 9, 37, 64])
def test_plans_score_every_pair_exactly_once(plan: str, world: int, n: int) -> None:
    shares = [np.concatenate(PLANS[plan](n, r, world) or [np.zeros(0, int)]) for r in range(world)]
    assert sorted(np.concatenate(shares).tolist()) == list(range(n))  # no pair twice, none lost
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 2 * BATCH  # whole batches; a merged last one is < 2B
    # the same batches as one process, only dealt out (so in-batch negatives are unchanged)
    dealt = [b for r in range(world) for b in PLANS[plan](n, r, world)]
    assert as_sets(dealt) == as_sets(PLANS[plan](n, 0, 1))


def as_sets(batches: list[np.ndarray]) -> list[tuple[int, ...]]:
    """Batches as sorted tuples, sorted: equal for the same batches in any order."""
    return sorted(tuple(sorted(b.tolist())) for b in batches)


# ------------------------------------------------------------------ two gloo processes
def pass_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    """One gloo process: the co-divide pass of two tiny SGRAFs; saves the gathered values
    and the indices this rank scored."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        counter = CountingFn(mean_hinge(0.2))
        nets = [tiny_sgraf(0), tiny_sgraf(1)]
        if rank > 0:  # BatchNorm statistics drifted on this rank: the pass must use rank 0's
            for net in nets:
                for name, buffer in net.named_buffers():
                    if name.endswith("running_mean"):
                        buffer.add_(0.5 * rank)
        values = per_sample_pass(nets, SgrafPairs(N_PAIRS), plans(rank, world), counter,
                                 torch.device("cpu"))
        torch.save({"values": values, "seen": counter.indices()}, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_two_gloo_processes_split_the_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # importable by the spawned processes through tests/ on sys.path (pytest's importlib mode
    # names this module tests.training..., which they cannot import)
    worker = importlib.import_module(f"training.{Path(__file__).stem}").pass_worker
    mp.start_processes(worker, args=(2, str(tmp_path / "pg"), str(tmp_path)),
                       nprocs=2, join=True, start_method="fork")  # fork: tiny_runs.DDP_TRAINER
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]

    counter = CountingFn(mean_hinge(0.2))
    alone = per_sample_pass([tiny_sgraf(0), tiny_sgraf(1)], SgrafPairs(N_PAIRS), plans(0, 1),
                            counter, torch.device("cpu"))
    assert sorted(counter.indices()) == sorted(list(range(N_PAIRS)) * 2)
    for got in ranks:
        assert torch.equal(got["values"], alone)  # bit-identical, on both ranks
    seen = [got["seen"] for got in ranks]
    assert sorted(seen[0] + seen[1]) == sorted(list(range(N_PAIRS)) * 2)  # 2 nets, once each
    half = 2 * N_PAIRS / 2
    assert all(abs(len(s) - half) <= 2 * BATCH for s in seen), [len(s) for s in seen]
    assert all(len(s) > 0 for s in seen)


# ------------------------------------------------------------------ progress bar
def test_pass_progress_silent_and_harmless(capfd: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import ncl.progress
    from ncl.progress import track

    nets, pairs = [tiny_sgraf(0)], SgrafPairs(N_PAIRS)
    quiet = per_sample_pass(nets, pairs, plans(0, 1)[:1], mean_hinge(0.2), torch.device("cpu"))
    assert capfd.readouterr() == ("", "")  # not a terminal: nothing written
    assert list(track(iter(range(5)), "x", enabled=True)) == list(range(5))
    bars = []
    real = ncl.progress._make_progress

    def recording():  # the real rich Progress, kept to read its task afterwards
        bars.append(real())
        return bars[-1]

    monkeypatch.setattr(ncl.progress, "progress_enabled", lambda: True)
    monkeypatch.setattr(ncl.progress, "_make_progress", recording)
    loud = per_sample_pass(nets, pairs, plans(0, 1)[:1], mean_hinge(0.2), torch.device("cpu"))
    assert torch.equal(loud, quiet)
    (task,) = bars[0].tasks  # one bar, advanced once per batch of this rank
    assert task.description == "per-sample pass" and task.completed == task.total == 5


def test_progress_enabled_only_on_rank_zero_of_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from ncl.progress import progress_enabled

    class Tty:
        def isatty(self) -> bool:
            return True

        def write(self, text: str) -> int:
            return len(text)

        def flush(self) -> None:
            pass

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert not progress_enabled()  # pytest's captured stderr is no terminal
    monkeypatch.setattr(sys, "stderr", Tty())
    assert progress_enabled()
    monkeypatch.setenv("RANK", "1")
    assert not progress_enabled()
