"""Tests for ncl.division.abandon (LNC Eq. 7, Algorithm 1)."""

import pytest
import torch

from ncl.division import doubly_noisy_mask, noise_abandon_mask

NOISY_A = torch.tensor([True, True, False, True, True, False, True, True])
NOISY_B = torch.tensor([True, False, False, True, True, True, True, False])
BOTH = [0, 3, 4, 6]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_doubly_noisy_is_strict():
    mask = doubly_noisy_mask(torch.tensor([0.4, 0.5, 0.1, 0.0]), torch.tensor([0.3, 0.2, 0.6, 0.49]))
    assert mask.tolist() == [True, False, False, True]


def test_abandon_drops_half_of_doubly_noisy_only():
    for seed in range(20):
        keep = noise_abandon_mask(NOISY_A, NOISY_B, generator=_gen(seed))
        dropped = torch.nonzero(~keep).flatten().tolist()
        assert len(dropped) == 2
        assert set(dropped) <= set(BOTH)


def test_abandon_deterministic_and_seed_dependent():
    a = noise_abandon_mask(NOISY_A, NOISY_B, generator=_gen(5))
    b = noise_abandon_mask(NOISY_A, NOISY_B, generator=_gen(5))
    assert torch.equal(a, b)
    patterns = {tuple(noise_abandon_mask(NOISY_A, NOISY_B, generator=_gen(s)).tolist()) for s in range(30)}
    assert len(patterns) > 1


def test_abandon_count_is_floor():
    noisy = torch.tensor([True] * 5 + [False] * 3)
    keep = noise_abandon_mask(noisy, noisy, generator=_gen(0))
    assert int((~keep).sum()) == 2  # floor(0.5 * 5)
    keep = noise_abandon_mask(noisy, noisy, drop_fraction=1.0, generator=_gen(0))
    assert keep.tolist() == [False] * 5 + [True] * 3
    keep = noise_abandon_mask(noisy, noisy, drop_fraction=0.0, generator=_gen(0))
    assert bool(keep.all())
    one = torch.tensor([True, False])
    assert bool(noise_abandon_mask(one, one, generator=_gen(0)).all())  # floor(0.5) = 0


def test_abandon_is_roughly_uniform():
    noisy = torch.ones(4, dtype=torch.bool)
    gen = _gen(0)
    counts = torch.zeros(4)
    for _ in range(2000):
        counts += (~noise_abandon_mask(noisy, noisy, generator=gen)).float()
    freq = counts / 2000
    assert bool(((freq - 0.5).abs() < 0.05).all())


def test_abandon_rejects_bad_input():
    with pytest.raises(ValueError, match="bool"):
        noise_abandon_mask(torch.tensor([1, 0]), torch.tensor([1, 0]), generator=_gen(0))
    with pytest.raises(ValueError, match="drop_fraction"):
        noise_abandon_mask(NOISY_A, NOISY_B, drop_fraction=1.2, generator=_gen(0))
    with pytest.raises(ValueError, match="generator"):
        noise_abandon_mask(NOISY_A, NOISY_B, generator=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="same shape"):
        noise_abandon_mask(NOISY_A, NOISY_B[:3], generator=_gen(0))
