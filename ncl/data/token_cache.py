"""Token ids kept on disk between runs.

NLTK's word tokenizer runs every one of its rules on every caption: about 3,500 captions/s of
CPU time (docs/data.md), so COCO's 566k training captions take about 2.5 minutes. The ids of
a split depend only on its captions, the vocabulary and the tokenizer, so
:func:`cached_encode` stores them under a key made of exactly those, and a later run with the
same split reads them back in well under a second.

The key is the SHA-256 of: the source of ``ncl/data/tokenize.py`` and ``ncl/data/vocab.py``
(any change to either is a new key), the nltk version, the vocabulary's words in id order and
every caption. Files live in ``$NCL_TOKEN_CACHE``, default ``$XDG_CACHE_HOME/ncl/tokens`` or
``~/.cache/ncl/tokens``; ``NCL_TOKEN_CACHE=off`` disables the cache. A cache that cannot be
read or written is skipped (the ids are computed as without it); a file is written under a
temporary name and renamed, so concurrent ranks or runs never read half a file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

import numpy as np

from ncl.data.cache import default_cache_dir
from ncl.io import atomic_write

Encoded = tuple[np.ndarray, np.ndarray]  # flat ids (T,) int32, offsets (N+1,) int64
_SOURCES = ("tokenize.py", "vocab.py")


def cache_dir() -> Path | None:
    """Where cached ids live, or ``None`` when ``NCL_TOKEN_CACHE=off``."""
    setting = os.environ.get("NCL_TOKEN_CACHE", "")
    if setting.lower() in ("off", "0", "false", "none"):
        return None
    if setting:
        return Path(setting)
    return default_cache_dir() / "tokens"


def cache_key(captions: Sequence[str], words: Sequence[str]) -> str | None:
    """SHA-256 of everything the ids depend on (module docstring); ``None`` when the
    tokenizer's source cannot be read (an install without ``.py`` files): then no cache."""
    digest = hashlib.sha256()
    here = Path(__file__).resolve().parent
    try:
        for name in _SOURCES:
            digest.update((here / name).read_bytes())
    except OSError:
        return None
    digest.update(metadata.version("nltk").encode())
    for part in (words, captions):
        digest.update(len(part).to_bytes(8, "little"))
        for text in part:  # length-prefixed, so no two lists hash alike
            data = text.encode("utf-8", "surrogatepass")
            digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


def _load(path: Path, n_captions: int) -> Encoded | None:
    """The stored ids, or ``None`` when the file is missing or not what it should be."""
    try:
        with np.load(path) as stored:
            flat, offsets = stored["ids"], stored["offsets"]
    except (OSError, ValueError, KeyError):
        return None
    if (flat.dtype != np.int32 or offsets.dtype != np.int64 or offsets.shape != (n_captions + 1,)
            or int(offsets[-1]) != len(flat)):
        return None
    return flat, offsets


def _store(path: Path, flat: np.ndarray, offsets: np.ndarray) -> None:
    try:
        atomic_write(path, lambda handle: np.savez(handle, ids=flat, offsets=offsets))
    except OSError:
        pass  # a read-only or full cache only costs the next run the tokenising time


def cached_encode(captions: Sequence[str], words: Sequence[str],
                  encode: Callable[[Sequence[str]], Encoded]) -> Encoded:
    """``encode(captions)``, read from the cache when the same split was encoded before."""
    folder = cache_dir()
    key = cache_key(captions, words) if folder is not None else None
    if folder is None or key is None:
        return encode(captions)
    path = folder / f"{key}.npz"
    hit = _load(path, len(captions))
    if hit is not None:
        return hit
    flat, offsets = encode(captions)
    _store(path, flat, offsets)
    return flat, offsets
