"""The token-id cache (ncl.data.token_cache): the same ids, read back, keyed by what they
depend on, and never in the way when it cannot be used."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ncl.data.precomp as precomp
from ncl.data.precomp import encode_all
from ncl.data.token_cache import cache_dir, cache_key
from ncl.data.vocab import SPECIAL_TOKENS, Vocabulary

CAPTIONS = ["A man rides a horse.", "Two dogs, one ball!", "It's a cat's toy."]
VOCAB = Vocabulary((*SPECIAL_TOKENS, "a", "man", "rides", "horse", ".", "dogs", "cat"))


def uncached(captions: list[str], vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    return precomp._encode(captions, vocab)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NCL_TOKEN_CACHE", str(tmp_path / "tokens"))
    return tmp_path / "tokens"


def test_second_call_reads_the_same_ids(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = encode_all(CAPTIONS, VOCAB)
    assert len(list(cache.glob("*.npz"))) == 1
    monkeypatch.setattr(precomp, "tokenize", lambda caption: pytest.fail("tokenised again"))
    second = encode_all(CAPTIONS, VOCAB)
    for got, want in zip(second, first):
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_cached_ids_equal_the_tokenizer_s(cache: Path) -> None:
    encode_all(CAPTIONS, VOCAB)
    cached = encode_all(CAPTIONS, VOCAB)
    monkey_free = uncached(CAPTIONS, VOCAB)
    assert all(np.array_equal(a, b) for a, b in zip(cached, monkey_free))


def test_key_changes_with_captions_vocabulary_and_order() -> None:
    base = cache_key(CAPTIONS, VOCAB.words)
    assert cache_key(CAPTIONS[::-1], VOCAB.words) != base
    assert cache_key([*CAPTIONS[:2], CAPTIONS[2] + " "], VOCAB.words) != base
    assert cache_key(CAPTIONS, (*VOCAB.words, "horse2")) != base
    assert cache_key(["ab", "c"], VOCAB.words) != cache_key(["a", "bc"], VOCAB.words)
    assert cache_key(CAPTIONS, VOCAB.words) == base


def test_a_damaged_file_is_recomputed(cache: Path) -> None:
    want = encode_all(CAPTIONS, VOCAB)
    [stored] = cache.glob("*.npz")
    stored.write_bytes(b"not an npz")
    got = encode_all(CAPTIONS, VOCAB)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


def test_an_unwritable_cache_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("in the way")
    monkeypatch.setenv("NCL_TOKEN_CACHE", str(blocker / "tokens"))  # cannot be a folder
    got = encode_all(CAPTIONS, VOCAB)
    assert all(np.array_equal(a, b) for a, b in zip(got, uncached(CAPTIONS, VOCAB)))


def test_off_disables_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCL_TOKEN_CACHE", "off")
    assert cache_dir() is None
    monkeypatch.setenv("NCL_TOKEN_CACHE", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "ncl" / "tokens"


def test_no_readable_source_means_no_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ncl.data.token_cache as token_cache

    monkeypatch.setattr(token_cache, "_SOURCES", ("no_such_module.py",))
    assert cache_key(CAPTIONS, VOCAB.words) is None
    got = encode_all(CAPTIONS, VOCAB)
    assert all(np.array_equal(a, b) for a, b in zip(got, uncached(CAPTIONS, VOCAB)))
    assert not cache.exists()
