"""Caption files are split at newlines only (issue 11 C): captions stay aligned with images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ncl.data.precomp import load_split, read_captions, split_lines
from ncl.data.vocab import load_vocabulary

from helpers import write_split, write_vocab

# Characters str.splitlines() breaks at, besides \n and \r: all occur in scraped web text.
ODD_BREAKS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("char", ODD_BREAKS, ids=[f"U+{ord(c):04X}" for c in ODD_BREAKS])
def test_odd_line_break_stays_inside_its_caption(tmp_path: Path, char: str) -> None:
    captions = [f"a dog number {i} runs" for i in range(10)]
    captions[3] = f"a dog{char}on the grass"
    write_split(tmp_path / "toy_precomp", "train", 2, captions=captions)
    write_vocab(tmp_path / "vocab.json", ["a", "dog", "on", "the", "grass", "runs"])
    split = load_split(tmp_path / "toy_precomp", "train", load_vocabulary(tmp_path / "vocab.json"))
    assert (split.n_images, split.n_captions, split.im_div) == (2, 10, 5)
    assert split.captions[3] == f"a dog{char}on the grass"
    assert split.captions[4] == "a dog number 4 runs"  # the next caption is not shifted


def test_crlf_files_read_like_lf_files(tmp_path: Path) -> None:
    data = tmp_path / "toy_precomp"
    data.mkdir()
    (data / "train_caps.txt").write_bytes(b"a dog\r\nthe grass\r\n")
    captions, _ = read_captions(data, "train")
    assert captions == ["a dog", "the grass"]


@pytest.mark.parametrize("text, lines", [
    ("", []),
    ("a\nb", ["a", "b"]),
    ("a\nb\n", ["a", "b"]),            # a final newline ends the last line
    ("a\n\nb\n", ["a", "", "b"]),      # an empty caption in the middle is kept (spec 7.2)
    ("a\n\n", ["a", ""]),              # and so is one at the end
    ("a\x85b\u2028c\n", ["a\x85b\u2028c"]),
])
def test_split_lines(text: str, lines: list[str]) -> None:
    assert split_lines(text) == lines


def test_tsv_captions_keep_odd_breaks_too(tmp_path: Path) -> None:
    data = tmp_path / "cc_precomp"
    data.mkdir()
    np.save(data / "train_ims.npy", np.zeros((2, 2, 4), dtype=np.float32))
    (data / "train_caps.tsv").write_text("1_1\ta dog\x85runs\n2_2\tthe grass\n", encoding="utf-8")
    captions, _ = read_captions(data, "train")
    assert captions == ["a dog\x85runs", "the grass"]
