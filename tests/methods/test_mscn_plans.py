"""MSCN's batch plans and negative draws (ncl.methods.mscn_support): the official order and
counts, by value."""

from __future__ import annotations

import numpy as np

from ncl.methods.mscn_support import (NET_A, NET_B, cotrain_steps, meta_batches, negative_draw,
                                      warmup_steps)


def test_negative_draws_follow_the_official_loader() -> None:
    # built once (draw 0); each co-training epoch c: B's training redraws (2c+1), then A's (2c+2);
    # A's purification sees the draw before B's training, B's the one made for its training
    assert [negative_draw(0, NET_A, "purify"), negative_draw(0, NET_B, "train"),
            negative_draw(0, NET_B, "purify"), negative_draw(0, NET_A, "train"),
            negative_draw(1, NET_A, "purify")] == [0, 1, 1, 2, 2]


def test_warmup_is_a_pass_of_a_then_of_b() -> None:
    steps = warmup_steps(np.arange(10, 30), 6, seed=0, epoch=3, rank=0, world=1)
    nets = [s.net for s in steps]
    assert nets == [NET_A] * 4 + [NET_B] * 4
    for net in (NET_A, NET_B):
        seen = np.concatenate([s.train for s in steps if s.net == net])
        assert sorted(seen.tolist()) == list(range(10, 30))
    assert all(s.meta is None for s in steps)


def test_cotraining_b_on_as_purification_first_with_meta_batches() -> None:
    n = 40
    clean_a = np.zeros(n, dtype=bool)
    clean_a[:25] = True  # A's purification keeps 0..24: B trains on them (8, 8, 8; a last 1 dropped)
    clean_b = np.zeros(n, dtype=bool)
    clean_b[10:] = True  # B's keeps 10..39: A trains on them
    steps = cotrain_steps((clean_a, clean_b), (12, 16), batch_size=8, meta_interval=2, seed=1,
                          epoch=5, rank=0, world=1)
    b_steps = [s for s in steps if s.net == NET_B]
    a_steps = [s for s in steps if s.net == NET_A]
    assert steps[:len(b_steps)] == b_steps  # B first
    b_seen = np.concatenate([s.train for s in b_steps])
    assert len(b_seen) == 24 and set(b_seen.tolist()) < set(range(25))  # official: a batch of one ends it
    assert sorted(np.concatenate([s.train for s in a_steps]).tolist()) == list(range(10, 40))
    # a meta batch on steps 2, 4, ... of each network ((iteration + 1) % 2 == 0)
    assert [s.meta is not None for s in b_steps] == [False, True, False]
    assert [s.meta is not None for s in a_steps] == [False, True, False, True]
    assert max(int(s.meta.max()) for s in b_steps if s.meta is not None) < 16  # B's meta set
    again = cotrain_steps((clean_a, clean_b), (12, 16), 8, 2, 1, 5, 0, 1)
    assert all(np.array_equal(x.train, y.train) for x, y in zip(steps, again))


def test_meta_batches_cycle_through_fresh_shuffles() -> None:
    batches = meta_batches(10, 5, 4, seed=0, epoch=0, net=NET_A, rank=0, world=1)
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4]  # a pass of 10 cut in 4, 4, 2, then again
    assert sorted(np.concatenate(batches[:3]).tolist()) == list(range(10))
    assert not np.array_equal(np.concatenate(batches[:3])[:8], np.concatenate(batches[3:]))


def test_two_ranks_share_every_pass() -> None:
    clean = np.ones(20, dtype=bool)
    ranks = [cotrain_steps((clean, clean), (8, 8), 4, 1, 0, 0, r, 2) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1])
    seen = np.concatenate([s.train for steps in ranks for s in steps if s.net == NET_B])
    assert sorted(seen.tolist()) == list(range(20))
