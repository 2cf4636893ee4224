"""Batch plans of co-teaching (ncl.training.plans; spec 4.2.3, 4.2.5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from callbacks.ncr_fakes import FakePairs
from torch.utils.data.distributed import DistributedSampler

from ncl.training.passes import deal_batches
from ncl.errors import ConfigError, TrainingError
from ncl.training.plans import (
    PlanLoader,
    Step,
    StepDataset,
    chunk,
    co_teaching_plan,
    cotrain_plan,
    cycled_batches,
    limit_steps,
    rematch_plan,
    shard,
    unlabelled_loss_active,
    warmup_plan,
)


@pytest.mark.parametrize(("n", "world"), [(10, 3), (7, 2), (2, 4), (12, 1)])
def test_shard_matches_distributed_sampler(n: int, world: int) -> None:
    perm = np.random.default_rng(0).permutation(n) + 100
    for rank in range(world):
        ref = list(DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False))
        assert shard(perm, rank, world).tolist() == perm[ref].tolist()


def test_shard_rejects_bad_rank() -> None:
    with pytest.raises(ValueError, match="rank"):
        shard(np.arange(4), 2, 2)


def test_chunk_sizes_and_singleton_drop() -> None:
    assert [b.tolist() for b in chunk(np.arange(7), 3)] == [[0, 1, 2], [3, 4, 5]]
    assert [b.tolist() for b in chunk(np.arange(8), 3)] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [b.tolist() for b in chunk(np.arange(7), 3, min_size=1)][-1] == [6]


def test_warmup_plan_each_network_one_pass_own_shuffle() -> None:
    pool = np.arange(3, 40)
    steps = warmup_plan([pool, pool], batch_size=8, seed=0, epoch=2)
    nets = [s.net for s in steps]
    assert nets == sorted(nets)  # all of A, then all of B (spec 4.2.3 step 2)
    orders = []
    for k in (0, 1):
        seen = np.concatenate([s.labelled for s in steps if s.net == k])
        assert sorted(seen.tolist()) == pool.tolist()  # 37 = 4 * 8 + 5: nothing dropped
        orders.append(seen.tolist())
    assert orders[0] != orders[1]  # independent shuffles
    again = warmup_plan([pool, pool], batch_size=8, seed=0, epoch=2)
    assert all(np.array_equal(a.labelled, b.labelled) for a, b in zip(steps, again))
    other = warmup_plan([pool, pool], batch_size=8, seed=0, epoch=3)
    assert not np.array_equal(steps[0].labelled, other[0].labelled)


def test_cotrain_plan_uses_peer_division() -> None:
    rng = np.random.default_rng(1)
    clean = [rng.random(50) < 0.7, rng.random(50) < 0.6]
    steps = cotrain_plan(clean, batch_size=6, seed=0, epoch=5)
    for k in (0, 1):
        peer = clean[1 - k]
        mine = [s for s in steps if s.net == k]
        lab = np.concatenate([s.labelled for s in mine])
        # one pass over the peer's clean set (a trailing batch of one would be dropped)
        assert set(lab.tolist()) <= set(np.flatnonzero(peer).tolist())
        assert len(lab) == len(set(lab.tolist())) >= peer.sum() - 1
        assert len(mine) == len(chunk(np.flatnonzero(peer), 6))
        unl = np.concatenate([s.unlabelled for s in mine])
        assert set(unl.tolist()) <= set(np.flatnonzero(~peer).tolist())
    assert [s.net for s in steps] == sorted(s.net for s in steps)


def test_cycled_batches_reshuffle_each_pass() -> None:
    pool = np.arange(10, 17)  # 7 samples, batches of 3: 3 + 3 (+ a dropped 1) per pass
    out = cycled_batches(pool, count=5, batch_size=3, seed=0, epoch=0, net=0)
    assert [len(b) for b in out] == [3, 3, 3, 3, 3]
    first, second = np.concatenate(out[:2]), np.concatenate(out[2:4])
    assert len(set(first.tolist())) == 6 and len(set(second.tolist())) == 6
    assert first.tolist() != second.tolist()


def test_cycled_batches_none_when_pool_too_small() -> None:
    assert cycled_batches(np.array([4]), 3, 8, 0, 0, 0) == [None, None, None]
    steps = cotrain_plan([np.ones(20, bool), np.ones(20, bool)], 4, 0, 0)
    assert all(s.unlabelled is None for s in steps)


def test_cotrain_plan_ranks_in_lock_step() -> None:
    clean = [np.arange(48) % 4 != 0, np.arange(48) % 3 != 0]  # 36 and 32: no singleton batch
    plans = [cotrain_plan(clean, 4, 0, 1, rank=r, world=2) for r in (0, 1)]
    assert len(plans[0]) == len(plans[1])
    for a, b in zip(*plans):
        assert a.net == b.net and len(a.labelled) == len(b.labelled)
        assert len(a.unlabelled) == len(b.unlabelled)
    for k in (0, 1):  # together the ranks cover the peer's clean set
        lab = np.concatenate([s.labelled for p in plans for s in p if s.net == k])
        assert set(lab.tolist()) == set(np.flatnonzero(clean[1 - k]).tolist())


@pytest.mark.parametrize("world", [2, 3])
def test_pass_batches_do_not_depend_on_world_size(world: int) -> None:
    order = np.random.default_rng([0, 4, 4, 1, 0]).permutation(53)
    single = deal_batches(order, 8)
    dealt = [deal_batches(order, 8, rank=r, world=world) for r in range(world)]
    assert sorted(tuple(b.tolist()) for d in dealt for b in d) == sorted(tuple(b.tolist()) for b in single)
    assert sorted(np.concatenate(single).tolist()) == list(range(53))
    # a last pair alone would have no negative (loss 0): it joins the batch before it
    assert [b.tolist() for b in deal_batches(np.arange(5), 2)] == [[0, 1], [2, 3, 4]]
    assert [b.tolist() for b in deal_batches(np.arange(6), 2)][-1] == [4, 5]
    assert [b.tolist() for b in deal_batches(np.arange(1), 4)] == [[0]]


def test_an_integer_batch_limit_is_shared_by_both_networks() -> None:
    steps = [Step(0, np.array([i])) for i in range(4)] + [Step(1, np.array([i])) for i in range(3)]
    assert [s.net for s in limit_steps(steps, 4)] == [0, 0, 1, 1]
    assert [s.net for s in limit_steps(steps, 3)] == [0, 0, 1, 1]  # ceil(3 / 2) each
    assert limit_steps(steps, 0.5) is steps and limit_steps(steps, 10) is steps


def test_step_dataset_and_plan_loader_collate() -> None:
    pairs = FakePairs(12)
    steps = [Step(0, np.array([3, 1])), Step(1, np.array([0, 2, 5]), np.array([7, 8]))]
    loader = PlanLoader(StepDataset(pairs, steps))
    assert len(loader) == 2
    items = list(loader)
    assert items[0]["net"] == 0 and "unlabelled" not in items[0]
    assert items[0]["labelled"]["index"].tolist() == [3, 1]
    torch.testing.assert_close(items[0]["labelled"]["images"][1], pairs.images[1])
    assert items[1]["unlabelled"]["index"].tolist() == [7, 8]
    assert items[1]["labelled"]["tokens"].shape == (3, 3)


def test_rematch_plan_pairs_full_clean_and_cycled_noisy_batches() -> None:
    """L2RM's epoch: one pass over the clean pairs in full batches (the last incomplete one
    dropped), each step with a full noisy batch from a re-shuffled cycle; no noisy batch when
    the noisy pairs cannot fill one; the same number of steps on every rank."""
    clean = np.zeros(50, dtype=bool)
    clean[:37] = True  # 37 clean, 13 noisy
    steps = rematch_plan(clean, batch_size=8, seed=0, epoch=1)
    assert len(steps) == 4  # 37 // 8
    assert all(len(s.labelled) == 8 and len(s.unlabelled) == 8 for s in steps)
    assert all(clean[s.labelled].all() and not clean[s.unlabelled].any() for s in steps)
    assert len({int(i) for s in steps for i in s.labelled}) == 32  # one pass, no repeats
    assert rematch_plan(clean, batch_size=8, seed=0, epoch=1)[0].labelled.tolist() == \
        steps[0].labelled.tolist()  # a function of (seed, epoch)
    few_noisy = np.ones(50, dtype=bool)
    few_noisy[:5] = False
    assert all(s.unlabelled is None for s in rematch_plan(few_noisy, 8, 0, 1))
    assert rematch_plan(np.arange(50) < 7, 8, 0, 1) == []  # no full clean batch
    ranks = [rematch_plan(clean, 4, 0, 1, rank=r, world=2) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == 4


def _same(a: list[Step], b: list[Step]) -> bool:
    def key(step: Step) -> tuple:
        extra = None if step.unlabelled is None else step.unlabelled.tolist()
        return step.net, step.labelled.tolist(), extra
    return [key(x) for x in a] == [key(x) for x in b]


def test_co_teaching_plan_is_the_warmup_or_cotrain_plan_of_the_state() -> None:
    """NCR/LNC's epoch: both networks warm up over every pair or over the abandon draw's kept
    pairs; a co-training epoch is the co-divide's plan; an integer limit is shared."""
    keep = torch.arange(40) % 3 != 0
    assert _same(co_teaching_plan(40, 8, 0, 1), warmup_plan([np.arange(40)] * 2, 8, 0, 1))
    assert _same(co_teaching_plan(40, 8, 0, 1, keep=keep, rank=1, world=2),
                 warmup_plan([np.flatnonzero(keep.numpy())] * 2, 8, 0, 1, rank=1, world=2))
    clean = torch.stack([torch.arange(40) < 30, torch.arange(40) >= 12])
    planned = co_teaching_plan(40, 8, 0, 2, clean=clean, with_unlabelled=False, limit=3)
    assert _same(planned, limit_steps(cotrain_plan([c.numpy() for c in clean], 8, 0, 2,
                                                   with_unlabelled=False), 3))
    collapsed = torch.zeros(2, 40, dtype=torch.bool)
    collapsed[0, 0] = True  # no network has a batch of two
    with pytest.raises(TrainingError, match="co-divide called 1, 0 of 40"):
        co_teaching_plan(40, 8, 0, 2, clean=collapsed)


def test_unlabelled_loss_starts_at_the_given_or_official_epoch() -> None:
    assert [unlabelled_loss_active(e, 2, 1, None) for e in range(2, 5)] == [False, True, True]
    # start=None: co-training epoch (max_epochs - warmup) // 2 = (12 - 2) // 2 = 5, epoch 7
    assert [unlabelled_loss_active(e, 2, None, 12) for e in (6, 7)] == [False, True]
    with pytest.raises(ConfigError, match="unlabelled_start=null"):
        unlabelled_loss_active(3, 2, None, -1)

