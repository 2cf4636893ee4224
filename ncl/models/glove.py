"""Word vectors from a local GloVe file (the standard text format: one word per line, then its
floats, separated by single spaces; ``glove.840B.300d.txt`` and the smaller releases), read
into a word-embedding matrix as IN2R's official ``EncoderText.init_weights`` does with
torchtext's ``GloVe(name="840B", dim=300)``.

The official rule, for every vocabulary word (special tokens and ``<mask>`` included): the
word itself if GloVe has it; else the word with ``-``, ``.`` and ``'`` removed and cut at the
first ``/`` (:func:`fallback_key`); a word found neither way keeps its initial row
(``U(-0.1, 0.1)``). Only the rows of found words are written: the initial draw, and so every
other random number of the run, is the same with or without GloVe.

Some lines of the 840B release hold a "word" with spaces in it; a line is therefore split as
its last ``dim`` fields (the vector) and the rest (the word).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import torch
from torch import Tensor

from ncl.errors import ConfigError

OPTION = "model.backbone.init_args.glove_path"


def fallback_key(word: str) -> str:
    """The official second try for a word GloVe lacks: ``-``, ``.`` and ``'`` removed, then
    the part before the first ``/``."""
    key = word.replace("-", "").replace(".", "").replace("'", "")
    return key.split("/")[0] if "/" in key else key


def _open(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return path.open(encoding="utf-8", errors="replace")


def glove_dimension(path: str | Path) -> int:
    """The vector size of a GloVe file (fields of its first line, less the word).

    Raises:
        ConfigError: naming :data:`OPTION`, for a missing or empty file.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{OPTION}: no GloVe file at {str(path)!r} (the standard text format, "
                          f"e.g. glove.840B.300d.txt; leave it unset to start from U(-0.1, 0.1))")
    with _open(path) as f:
        first = f.readline().rstrip("\n").rstrip(" ")
    if not first:
        raise ConfigError(f"{OPTION}: the GloVe file {str(path)!r} is empty")
    return len(first.split(" ")) - 1


def check_glove_file(path: str | Path, word_dim: int) -> None:
    """One clear error for a missing file or vectors of another size than ``word_dim``."""
    dim = glove_dimension(path)
    if dim != word_dim:
        raise ConfigError(f"{OPTION}: the vectors of {str(path)!r} have {dim} values, the word "
                          f"embeddings model.backbone.init_args.word_dim={word_dim}; give the "
                          f"GloVe file of that size or set word_dim={dim}")


def _lines(path: Path) -> Iterator[str]:
    with _open(path) as f:
        yield from f


def read_vectors(path: str | Path, wanted: set[str], dim: int) -> dict[str, Tensor]:
    """The ``(dim,)`` float32 vectors of the ``wanted`` words found in a GloVe file (the first
    line of a word that occurs twice).

    Raises:
        ConfigError: a line of a wanted word that does not hold ``dim`` numbers.
    """
    path, found = Path(path), {}
    for number, line in enumerate(_lines(path), start=1):
        head = line.partition(" ")[0]
        if head not in wanted:  # cheap test first; a word with spaces starts with a wanted one
            continue
        fields = line.rstrip("\n").rstrip(" ").rsplit(" ", dim)
        word = fields[0]
        if word not in wanted or word in found:
            continue
        try:
            values = [float(v) for v in fields[1:]]
        except ValueError:
            values = []
        if len(values) != dim:
            raise ConfigError(f"{OPTION}: line {number} of {str(path)!r} ({word!r}) does not hold "
                              f"{dim} numbers after the word")
        found[word] = torch.tensor(values, dtype=torch.float32)
    return found


def glove_rows(words: Sequence[str], path: str | Path, dim: int) -> dict[int, Tensor]:
    """Row ``i`` -> the ``(dim,)`` GloVe vector of ``words[i]`` (or of its
    :func:`fallback_key`), for the words the file has.

    Raises:
        ConfigError: a missing file or another vector size than ``dim``.
    """
    check_glove_file(path, dim)
    vectors = read_vectors(path, set(words) | {fallback_key(w) for w in words}, dim)
    rows = {}
    for i, word in enumerate(words):
        vector = vectors.get(word)
        if vector is None:
            vector = vectors.get(fallback_key(word))
        if vector is not None:
            rows[i] = vector
    return rows


def write_rows_(weight: Tensor, rows: dict[int, Tensor]) -> int:
    """Write ``rows`` (row -> vector) into ``(V, dim)`` ``weight`` in place; returns how many."""
    with torch.no_grad():
        for i, vector in rows.items():
            weight[i] = vector.to(weight.dtype)
    return len(rows)


def load_glove_(weight: Tensor, words: Sequence[str], path: str | Path) -> int:
    """Write the GloVe vector of every word of ``words`` that the file has (or its
    :func:`fallback_key`) into its row of ``weight``, in place; the other rows are kept.

    Args:
        weight: ``(V, dim)`` word embeddings; row ``i`` belongs to ``words[i]``.
        words: the vocabulary in id order (``<mask>`` included when ``weight`` has its row).
        path: the GloVe text file (``.gz`` read as gzip).

    Returns:
        How many words were found.

    Raises:
        ConfigError: a missing file, another vector size, or a row count other than ``len(words)``.
    """
    rows, dim = int(weight.shape[0]), int(weight.shape[1])
    if rows != len(words):
        raise ConfigError(f"{OPTION}: the word embeddings have {rows} rows for {len(words)} "
                          f"vocabulary words")
    return write_rows_(weight, glove_rows(words, path, dim))
