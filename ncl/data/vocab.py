"""The official vocabulary JSON (spec 1.4).

The file is one object with ``word2idx`` (word -> id), ``idx2word`` (id string -> word) and
``idx`` (the size). Ids 0-3 are fixed: ``<pad>``, ``<start>``, ``<end>``, ``<unk>``. Word
order cannot be rebuilt from the captions (the shipped files come from Python 2 dict order),
so an existing file is always loaded as it is; :func:`build_vocabulary` is only for data
that ncl generates itself.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ncl.errors import DataError
from ncl.io import atomic_write_text

PAD, START, END, UNK = 0, 1, 2, 3
SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<start>", "<end>", "<unk>")


@dataclass(frozen=True)
class Vocabulary:
    """A word <-> id mapping with the official special tokens.

    Attributes:
        words: ``words[i]`` is the word with id ``i``; ``words[:4]`` are the special tokens.
    """

    words: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {w: i for i, w in enumerate(self.words)})

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self._index  # type: ignore[attr-defined]

    def word_id(self, word: str) -> int:
        """Id of ``word``, ``<unk>`` (3) for unknown words."""
        return self._index.get(word, UNK)  # type: ignore[attr-defined]

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """``[<start>] + ids + [<end>]`` as every official loader builds it (spec 1.5)."""
        index = self._index  # type: ignore[attr-defined]
        return [START, *(index.get(t, UNK) for t in tokens), END]

    def to_json(self, path: str | Path) -> None:
        """Write the official JSON layout, atomically (temporary name, then rename)."""
        payload = {
            "word2idx": {w: i for i, w in enumerate(self.words)},
            "idx2word": {str(i): w for i, w in enumerate(self.words)},
            "idx": len(self.words),
        }
        atomic_write_text(Path(path), json.dumps(payload))


def load_vocabulary(path: str | Path) -> Vocabulary:
    """Load and validate an official vocabulary JSON.

    Raises:
        DataError: missing file, invalid JSON, missing keys, ids that are not a permutation
            of ``0..idx-1``, or special tokens at the wrong ids. The message names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"vocabulary file not found: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"vocabulary file {path} is not valid UTF-8 JSON: {err}") from None
    if not isinstance(data, dict) or "word2idx" not in data:
        raise DataError(f"vocabulary file {path} has no 'word2idx' object (official layout: "
                        "word2idx, idx2word, idx)")
    word2idx = data["word2idx"]
    if not isinstance(word2idx, dict) or not all(
            isinstance(w, str) and isinstance(i, int) for w, i in word2idx.items()):
        raise DataError(f"vocabulary file {path}: 'word2idx' must map words to integer ids")
    size = len(word2idx)
    if "idx" in data and data["idx"] != size:
        raise DataError(f"vocabulary file {path}: 'idx' is {data['idx']} but 'word2idx' "
                        f"holds {size} words")
    words: list[str | None] = [None] * size
    for word, i in word2idx.items():
        if not 0 <= i < size or words[i] is not None:
            raise DataError(f"vocabulary file {path}: ids must be 0..{size - 1}, each once; "
                            f"found id {i} for {word!r}")
        words[i] = word
    for i, token in enumerate(SPECIAL_TOKENS):
        if i >= size or words[i] != token:
            found = words[i] if i < size else "nothing"
            raise DataError(f"vocabulary file {path}: special token {token} must have id {i}, "
                            f"found {found!r}")
    return Vocabulary(tuple(words))  # type: ignore[arg-type]


def build_vocabulary(tokenized: Iterable[Sequence[str]], min_count: int = 4) -> Vocabulary:
    """Official rule (spec 1.4): keep words seen at least ``min_count`` times.

    Order: decreasing count, then alphabetical, so the result is deterministic.
    """
    counts: Counter[str] = Counter()
    for tokens in tokenized:
        counts.update(tokens)
    kept = sorted((w for w, c in counts.items() if c >= min_count and w not in SPECIAL_TOKENS),
                  key=lambda w: (-counts[w], w))
    return Vocabulary((*SPECIAL_TOKENS, *kept))
