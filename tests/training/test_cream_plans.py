"""CREAM's batch plan: the clean loader drives the epoch, the hard loader is never restarted
(its last batch stays, stale), the noisy loader cycles; A's iterations, then B's."""

from __future__ import annotations

import numpy as np

from ncl.training.cream_plans import cream_plan, cotrain_steps, held, warmup_steps


def subset_of(clean: int, hard: int, noisy: int) -> np.ndarray:
    return np.array([0] * clean + [1] * hard + [2] * noisy)


def test_hard_batches_go_stale_and_noisy_batches_cycle() -> None:
    subset = subset_of(40, 9, 6)  # clean 40 -> 5 batches of 8; hard 9 -> 8 + 1; noisy 6 -> 1 batch
    steps = cotrain_steps(subset, 8, seed=0, epoch=3)
    assert [s.net for s in steps] == [0] * 5 + [1] * 5
    a = steps[:5]
    assert sorted(np.concatenate([s.clean for s in a]).tolist()) == list(range(40))
    assert [s.hard_fresh for s in a] == [True, True, False, False, False]
    assert [len(s.hard) for s in a] == [8, 1, 1, 1, 1]
    assert all(np.array_equal(s.hard, a[1].hard) for s in a[2:])  # the stale last batch
    assert sorted(a[0].hard.tolist() + a[1].hard.tolist()) == list(range(40, 49))
    for s in a:  # the noisy loader of 6 pairs is re-shuffled every iteration
        assert sorted(s.noisy.tolist()) == list(range(49, 55))
    assert not np.array_equal(a[0].noisy, a[1].noisy) or not np.array_equal(a[1].noisy, a[2].noisy)
    # B draws its own shuffles
    assert not all(np.array_equal(x.clean, y.clean) for x, y in zip(a, steps[5:]))


def test_empty_subsets_give_no_batch() -> None:
    steps = cotrain_steps(subset_of(20, 0, 0), 8, seed=0, epoch=0)
    assert all(s.hard is None and s.noisy is None and not s.hard_fresh for s in steps)
    assert [len(s.clean) for s in steps] == [8, 8, 4, 8, 8, 4]


def test_a_last_clean_batch_of_one_ends_the_epoch() -> None:
    steps = cotrain_steps(subset_of(17, 2, 2), 8, seed=1, epoch=0)
    assert [len(s.clean) for s in steps if s.net == 0] == [8, 8]


def test_held_loader_and_plan_are_seeded() -> None:
    pool = np.arange(10)
    assert [f for _, f in held(pool, 4, 4, 0, 0, 0)] == [True, True, True, False]
    assert all(np.array_equal(x.clean, y.clean) for x, y in
               zip(cream_plan(30, 8, 5, 2, subset=None), cream_plan(30, 8, 5, 2, subset=None)))
    warm = warmup_steps(30, 8, 5, 2)
    assert [s.net for s in warm] == [0] * 4 + [1] * 4
    assert not np.array_equal(warm[0].clean, warm[4].clean)


def test_ranks_share_steps_and_sizes() -> None:
    subset = subset_of(33, 7, 5)
    ranks = [cotrain_steps(subset, 4, 0, 1, rank=r, world=2) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1])
    for x, y in zip(*ranks):
        assert len(x.clean) == len(y.clean) and x.hard_fresh == y.hard_fresh
        assert len(x.noisy) == len(y.noisy)


def test_limit_is_shared_between_networks() -> None:
    steps = cream_plan(0, 8, 0, 0, subset=subset_of(80, 0, 0), limit=4)
    assert [s.net for s in steps] == [0, 0, 1, 1]


def test_each_network_trains_on_its_peers_split() -> None:
    a = np.array([3] * 10 + [0] * 5 + [2] * 5)  # network A's split (SPS codes: 3 strict)
    b = np.array([2] * 10 + [3] * 6 + [0] * 4)
    steps = cotrain_steps(np.stack([a, b]), 4, 0, 0, codes=(3, 0, 2))
    drive = {net: sorted(np.concatenate([s.clean for s in steps if s.net == net]).tolist()) for net in (0, 1)}
    assert drive[0] == list(range(10, 16))  # A is driven by B's strictly clean pairs
    assert drive[1] == list(range(10))  # B by A's
