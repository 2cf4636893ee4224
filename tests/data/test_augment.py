"""CRCL's training augmentation (spec 1.7): semantics, rates, seeds, switches, shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ncl.data.augment import (
    DELETE,
    KEEP,
    MASK,
    RANDOM,
    REGION_FILL_VALUE,
    augment_caption,
    caption_actions,
    drop_regions,
    region_drop_mask,
)
from ncl.data.vocab import END, START

V = 50  # vocabulary size without <mask>; <mask> is id 50


class FixedUniforms:
    """A stand-in generator whose ``random`` returns given values (exact threshold tests)."""

    def __init__(self, values: list[float]) -> None:
        self.values = np.asarray(values)

    def random(self, n: int) -> np.ndarray:
        assert n == len(self.values)
        return self.values


def caption(n_words: int = 10) -> torch.Tensor:
    return torch.tensor([START, *range(4, 4 + n_words), END], dtype=torch.long)


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---------------------------------------------------------------- caption


def test_action_thresholds_follow_the_spec() -> None:
    u = [0.0, 0.099, 0.1, 0.119, 0.121, 0.199, 0.2, 0.7]
    got = caption_actions(len(u), FixedUniforms(u))  # type: ignore[arg-type]
    assert got.tolist() == [MASK, MASK, RANDOM, RANDOM, DELETE, DELETE, KEEP, KEEP]


def test_action_rates_are_10_2_8_percent() -> None:
    actions = caption_actions(200_000, rng(0))
    freq = np.bincount(actions, minlength=4) / actions.size
    assert freq[MASK] == pytest.approx(0.10, abs=0.003)
    assert freq[RANDOM] == pytest.approx(0.02, abs=0.0015)
    assert freq[DELETE] == pytest.approx(0.08, abs=0.003)
    assert freq[KEEP] == pytest.approx(0.80, abs=0.004)


def test_caption_semantics_on_many_draws() -> None:
    tokens = caption(20)
    g = rng(1)
    n_in = n_out = n_mask = 0
    for _ in range(2000):
        out = augment_caption(tokens, V, g)
        n_in, n_out = n_in + len(tokens), n_out + len(out)
        n_mask += int((out == V).sum())
    assert 1 - n_out / n_in == pytest.approx(0.08, abs=0.006)  # deleted
    assert n_mask / n_in == pytest.approx(0.10 + 0.02 / (V + 1), abs=0.006)  # masked


def test_caption_is_deterministic_under_a_seed_and_input_untouched() -> None:
    tokens = caption(30)
    before = tokens.clone()
    a = [augment_caption(tokens, V, g).tolist() for g in [rng(7)] for _ in range(5)]
    b = [augment_caption(tokens, V, g).tolist() for g in [rng(7)] for _ in range(5)]
    c = [augment_caption(tokens, V, g).tolist() for g in [rng(8)] for _ in range(5)]
    assert a == b and a != c
    assert torch.equal(tokens, before)


def test_never_empty_and_all_deleted_comes_back_unchanged() -> None:
    tokens = caption(0)  # [<start>, <end>]
    g = rng(2)
    outs = [augment_caption(tokens, V, g, rate=1.0) for _ in range(400)]
    assert all(len(o) >= 1 for o in outs)
    # with rate 1 every token changes, so only the empty-result fallback returns the input
    unchanged = sum(torch.equal(o, tokens) for o in outs)
    assert 0.4**2 * 400 * 0.5 < unchanged < 0.4**2 * 400 * 1.6


def test_official_touches_special_tokens_keep_does_not() -> None:
    tokens = caption(8)
    g = rng(3)
    official = [augment_caption(tokens, V, g) for _ in range(500)]
    starts_intact = sum(int(o[0]) == START for o in official) / 500
    assert 0.74 < starts_intact < 0.86  # about 80 % (20 % masked, replaced or deleted)
    kept = [augment_caption(tokens, V, g, special_tokens="keep") for _ in range(500)]
    assert all(int(o[0]) == START and int(o[-1]) == END for o in kept)


def test_keep_changes_only_the_special_tokens_fate() -> None:
    # the same uniforms are drawn in both modes: the words' actions agree position by position
    tokens = caption(12)
    a = caption_actions(len(tokens), rng(3))
    official = augment_caption(tokens, V, rng(3), random_ids="words")
    kept = augment_caption(tokens, V, rng(3), special_tokens="keep", random_ids="words")
    assert a[0] == MASK and a[-1] == KEEP  # this seed masks <start>: the modes must differ there
    assert int(official[0]) == V and int(kept[0]) == START
    assert torch.equal(official[1:-1], kept[1:-1])


def test_random_ids_ranges() -> None:
    tokens = torch.full((30,), 10, dtype=torch.long)  # words only: the fallback never fires
    g = rng(5)
    official = torch.cat([augment_caption(tokens, 6, g, rate=1.0) for _ in range(300)])
    words = torch.cat([augment_caption(tokens, 6, g, rate=1.0, random_ids="words")
                       for _ in range(300)])
    assert set(official.tolist()) == set(range(0, 7))  # [0, V + 1): <pad> ... <mask>
    assert set(words.tolist()) == {4, 5, 6}  # words 4, 5 and <mask> = 6


def test_caption_types_and_dtypes_are_preserved() -> None:
    as_np = np.array([START, 5, 6, END], dtype=np.int32)
    out = augment_caption(as_np, V, rng(6))
    assert isinstance(out, np.ndarray) and out.dtype == np.int32
    out_t = augment_caption(caption(3), V, rng(6))
    assert isinstance(out_t, torch.Tensor) and out_t.dtype == torch.long


@pytest.mark.parametrize(
    "tokens,kwargs,match",
    [
        (torch.tensor([], dtype=torch.long), {}, "non-empty"),
        (torch.tensor([1.0, 2.0]), {}, "integer"),
        (caption(2), {"special_tokens": "drop"}, "special_tokens"),
        (caption(2), {"random_ids": "all"}, "random_ids"),
        (caption(2), {"rate": 1.5}, "rate"),
        ([1, 2], {}, "Tensor"),
    ],
)
def test_caption_rejects_bad_arguments(tokens: object, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        augment_caption(tokens, V, rng(0), **kwargs)  # type: ignore[type-var]


# ---------------------------------------------------------------- regions


def features(r: int = 36, d: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((r, d)).astype(np.float32) + 5.0


def test_fill_keeps_shape_and_overwrites_about_20_percent() -> None:
    x = features()
    before = x.copy()
    g = rng(10)
    filled = 0
    for _ in range(300):
        out = drop_regions(x, g)
        assert out.shape == x.shape and out.dtype == x.dtype
        dropped = np.all(out == np.float32(REGION_FILL_VALUE), axis=1)
        assert np.array_equal(out[~dropped], x[~dropped])  # the rest is untouched
        filled += int(dropped.sum())
    assert filled / (300 * 36) == pytest.approx(0.2, abs=0.015)
    assert np.array_equal(x, before)


def test_remove_keeps_the_surviving_rows_in_order() -> None:
    x = torch.from_numpy(features())
    mask = region_drop_mask(36, rng(11))
    out = drop_regions(x, rng(11), mode="remove")
    assert isinstance(out, torch.Tensor)
    assert torch.equal(out, x[torch.from_numpy(~mask)])
    filled = drop_regions(x, rng(11), mode="fill")  # same seed: same regions dropped
    assert torch.equal(filled[torch.from_numpy(~mask)], out)
    assert bool((filled[torch.from_numpy(mask)] == REGION_FILL_VALUE).all())


def test_remove_never_returns_zero_regions_and_rate_edges() -> None:
    x = features(r=3)
    assert np.array_equal(drop_regions(x, rng(0), rate=1.0, mode="remove"), x)
    assert np.all(drop_regions(x, rng(0), rate=1.0) == np.float32(REGION_FILL_VALUE))
    assert np.array_equal(drop_regions(x, rng(0), rate=0.0), x)


def test_regions_deterministic_under_a_seed() -> None:
    x = features()
    assert np.array_equal(drop_regions(x, rng(12)), drop_regions(x, rng(12)))
    assert not np.array_equal(drop_regions(x, rng(12)), drop_regions(x, rng(13)))


@pytest.mark.parametrize(
    "x,kwargs,match",
    [
        (np.zeros(8, dtype=np.float32), {}, r"\(R, D\)"),
        (np.zeros((0, 8), dtype=np.float32), {}, "non-empty"),
        (features(), {"mode": "zero"}, "mode"),
        (features(), {"rate": -0.1}, "rate"),
    ],
)
def test_regions_reject_bad_arguments(x: np.ndarray, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        drop_regions(x, rng(0), **kwargs)
