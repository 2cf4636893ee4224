"""Evaluation similarities split over DDP ranks: the block bookkeeping, two gloo processes
against one (bit-identical matrices, each rank scoring about half of the pairs), SGRAF's
block (in)dependence, the progress bar's silence, and a two-process ``ncl validate``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from callbacks.ncr_fakes import tiny_sgraf
from torch import Tensor

from ncl.evaluation.sharded import rank_sharded_similarity
from ncl.evaluation.similarity import (Block, place_blocks, rank_block_range, sharded_similarity,
                                       similarity_blocks)
from ncl.training.distributed import all_gather_cat

N_IMG, N_CAP, R, L, E = 7, 10, 3, 6, 4
# SGRAF case: 6 regions x 16 dims as tiny_sgraf expects
S_IMG, S_CAP, S_L = 20, 50, 9


def dot_sim(img: Tensor, cap: Tensor, lens: Tensor) -> Tensor:
    """Mean region vector dot mean valid-word vector, (a, R, E) x (b, L, E) -> (a, b)."""
    valid = torch.arange(cap.shape[1])[None, :] < lens[:, None]
    words = torch.where(valid[..., None], cap, torch.zeros(()))
    return img.mean(1) @ (words.sum(1) / lens[:, None].to(cap.dtype)).T


class CountingSim:
    """Wraps a ``sim_fn`` and records every (image, caption) pair it scores."""

    def __init__(self, fn) -> None:
        self.fn, self.pairs, self.calls = fn, 0, 0

    def __call__(self, img: Tensor, cap: Tensor, lens: Tensor) -> Tensor:
        self.pairs += img.shape[0] * cap.shape[0]
        self.calls += 1
        return self.fn(img, cap, lens)


def dot_data() -> tuple[Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(0)
    img, cap = torch.randn(N_IMG, R, E, generator=gen), torch.randn(N_CAP, L, E, generator=gen)
    lens = torch.randint(1, L + 1, (N_CAP,), generator=gen)
    return img, cap, lens


def sgraf_data() -> tuple[Tensor, Tensor, Tensor]:
    gen = torch.Generator().manual_seed(1)
    img, cap = torch.randn(S_IMG, 6, 16, generator=gen), torch.randn(S_CAP, S_L, 16, generator=gen)
    lens = torch.randint(1, S_L + 1, (S_CAP,), generator=gen)
    return img, cap, lens


# ------------------------------------------------------------------ pure bookkeeping
@pytest.mark.parametrize(("n_img", "n_cap", "shard"),
                         [(7, 10, 3), (5, 5, 5), (1, 9, 4), (10, 3, 100)])
def test_blocks_cover_every_cell_once(n_img: int, n_cap: int, shard: int) -> None:
    hits = torch.zeros(n_img, n_cap, dtype=torch.long)
    for b in similarity_blocks(n_img, n_cap, shard):
        assert 0 < b.img_stop - b.img_start <= shard and 0 < b.cap_stop - b.cap_start <= shard
        hits[b.img_start:b.img_stop, b.cap_start:b.cap_stop] += 1
    assert bool((hits == 1).all())


@pytest.mark.parametrize("n_blocks", [0, 1, 2, 5, 12, 13])
@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_rank_runs_partition_the_blocks(n_blocks: int, world: int) -> None:
    runs = [rank_block_range(n_blocks, r, world) for r in range(world)]
    assert [k for run in runs for k in run] == list(range(n_blocks))  # contiguous, in rank order
    lengths = [len(run) for run in runs]
    assert max(lengths) - min(lengths) <= 1


def test_bad_ranks_and_sizes_raise() -> None:
    with pytest.raises(ValueError, match="rank must lie"):
        rank_block_range(4, 2, 2)
    with pytest.raises(ValueError, match="shard_size"):
        similarity_blocks(3, 3, 0)
    with pytest.raises(ValueError, match="flat must be 1-D with 9"):
        place_blocks(similarity_blocks(3, 3, 2), torch.zeros(8), 3, 3)


def test_place_blocks_inverts_flattening() -> None:
    full = torch.arange(7 * 10, dtype=torch.float32).view(7, 10)
    blocks = similarity_blocks(7, 10, 3)
    flat = torch.cat([full[b.img_start:b.img_stop, b.cap_start:b.cap_stop].flatten()
                      for b in blocks])
    assert torch.equal(place_blocks(blocks, flat, 7, 10), full)
    assert Block(0, 2, 3, 6).size == 6


def test_single_process_is_sharded_similarity() -> None:
    img, cap, lens = dot_data()
    counter = CountingSim(dot_sim)
    got = rank_sharded_similarity(counter, img, cap, lens, shard_size=3)
    assert torch.equal(got, sharded_similarity(dot_sim, img, cap, lens, shard_size=3))
    assert counter.pairs == N_IMG * N_CAP and counter.calls == 12
    assert torch.equal(all_gather_cat(torch.arange(3.0)), torch.arange(3.0))


# ------------------------------------------------------------------ SGRAF and blocks
@pytest.mark.parametrize("shard", [3, 8, 16])
def test_sgraf_pair_score_hardly_depends_on_its_block(shard: int) -> None:
    """An SGRAF score is the same in any block up to float rounding (a few ulp), not bit for
    bit: chunk partners and batch shapes change the summation order. This is why ranks
    split the one-process block grid instead of cutting blocks of their own."""
    net = tiny_sgraf(0).eval()
    img, cap, lens = sgraf_data()
    with torch.no_grad():
        whole = net.similarity(img, cap[:, : int(lens.max())], lens)
    got = sharded_similarity(net.similarity, img, cap, lens, shard_size=shard)
    torch.testing.assert_close(got, whole, rtol=0, atol=1e-6)


# ------------------------------------------------------------------ two gloo processes
def spawnable(fn):
    """``fn`` as imported through ``tests/`` on ``sys.path`` (``pythonpath`` in
    pyproject.toml): pytest's importlib mode names this module ``tests.evaluation...``,
    which a spawned process cannot import, but ``evaluation.<module>`` it can."""
    import importlib

    return getattr(importlib.import_module(f"evaluation.{Path(__file__).stem}"), fn.__name__)


def sim_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    """One gloo process: rank-sharded matrices (dot product, tiny SGRAF, one block only)
    and the number of pairs this rank scored; saved to ``out_dir/rank<r>.pt``."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        out: dict[str, object] = {}
        dot, single = CountingSim(dot_sim), CountingSim(dot_sim)
        sgraf = CountingSim(tiny_sgraf(0).eval().similarity)
        out["dot"] = rank_sharded_similarity(dot, *dot_data(), shard_size=3)
        out["sgraf"] = rank_sharded_similarity(sgraf, *sgraf_data(), shard_size=8)
        out["single"] = rank_sharded_similarity(single, *dot_data(), shard_size=100)  # 1 block
        out["pairs"] = {"dot": dot.pairs, "sgraf": sgraf.pairs, "single": single.pairs}
        out["ragged"] = all_gather_cat(torch.full((rank + 1, 2), float(rank)))
        torch.save(out, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_two_gloo_processes_match_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    mp.start_processes(spawnable(sim_worker), args=(2, str(tmp_path / "pg"), str(tmp_path)),
                       nprocs=2, join=True, start_method="fork")  # fork: tiny_runs.DDP_TRAINER
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    net = tiny_sgraf(0).eval()
    ref = {"dot": sharded_similarity(dot_sim, *dot_data(), shard_size=3),
           "sgraf": sharded_similarity(net.similarity, *sgraf_data(), shard_size=8),
           "single": sharded_similarity(dot_sim, *dot_data(), shard_size=100)}
    for got in ranks:
        for key, matrix in ref.items():
            assert torch.equal(got[key], matrix), key  # bit-identical, on both ranks
    sizes = {"dot": (N_IMG * N_CAP, 3 * 3), "sgraf": (S_IMG * S_CAP, 8 * 8)}
    for key, (total, block) in sizes.items():
        counts = [got["pairs"][key] for got in ranks]
        assert sum(counts) == total, (key, counts)  # every pair scored exactly once
        assert all(abs(c - total / 2) <= block for c in counts), (key, counts)  # about half each
    assert [got["pairs"]["single"] for got in ranks] == [0, N_IMG * N_CAP]  # a lone block
    expected = torch.tensor([[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    assert all(torch.equal(got["ragged"], expected) for got in ranks)


# ------------------------------------------------------------------ progress bar
def test_progress_is_silent_off_a_terminal(capfd: pytest.CaptureFixture[str]) -> None:
    """Under pytest stderr is not a terminal: no bar, nothing written, same matrix."""
    from ncl.progress import progress_enabled

    assert not progress_enabled()
    img, cap, lens = dot_data()
    got = sharded_similarity(dot_sim, img, cap, lens, shard_size=3, description="validation")
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    torch.testing.assert_close(got, dot_sim(img, cap, lens))


def test_progress_bar_does_not_change_the_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the bar forced on (as on a terminal) the matrix is bit-identical."""
    import ncl.progress

    img, cap, lens = dot_data()
    quiet = sharded_similarity(dot_sim, img, cap, lens, shard_size=3)
    drawn: list[str] = []
    real = ncl.progress._make_progress

    def recording() -> object:
        drawn.append("bar")
        return real()

    monkeypatch.setattr(ncl.progress, "progress_enabled", lambda: True)
    monkeypatch.setattr(ncl.progress, "_make_progress", recording)
    loud = sharded_similarity(dot_sim, img, cap, lens, shard_size=3)
    assert drawn == ["bar"] and torch.equal(loud, quiet)


# ------------------------------------------------------------------ the CLI
def test_two_process_validate_equals_one(tmp_path: Path, synthetic_cache: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``ncl validate`` of the same initial weights with 2 gloo processes and with 1: the
    same val metrics, with a shard size small enough that both ranks score blocks."""
    from tiny_runs import method_config, run_folder, validation_metrics

    from ncl.cli import main

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    method = {"class_path": "ncl.methods.baselines.Triplet", "init_args": {"eval_shard_size": 8}}
    metrics = {}
    for devices, strategy in ((1, "auto"), (2, "ddp_fork")):  # fork: see tiny_runs.DDP_TRAINER
        root = tmp_path / f"world{devices}"
        config = method_config(root, synthetic_cache, method, max_epochs=1, steps=1,
                               trainer={"devices": devices, "strategy": strategy})
        main(["validate", "--config", str(config), "--allow_untrained=true"])
        metrics[devices] = validation_metrics(run_folder(root))
    assert "val/rsum" in metrics[1] and metrics[1] == metrics[2]
