"""One split of the official precomputed-feature layout (spec 1.1-1.3), memory-mapped.

``<root>/<name>/{split}_ims.npy`` holds ``(N_img, R, D)`` BUTD region features and
``{split}_caps.txt`` (F30K, COCO: one caption per line) or ``{split}_caps.tsv`` (CC152K:
``id<TAB>caption`` with CSV quoting) the captions; captions of one image are consecutive,
so caption ``c`` belongs to image ``c // im_div``.

Features are opened with ``mmap_mode='r'`` and never read whole (COCO train is 33 GB): a
batch reads only its own rows. Captions are tokenised once per split (ids cached in two flat
arrays), never per epoch.
"""

from __future__ import annotations

import csv
import io
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from ncl.data.token_cache import cached_encode
from ncl.data.tokenize import tokenize
from ncl.data.vocab import Vocabulary
from ncl.errors import ConfigError, DataError, NclWarning

SPLITS = ("train", "dev", "test", "testall")
FLOAT_DTYPES = (np.float16, np.float32, np.float64)
NanCheck = Literal["sample", "full", "off"]
SCAN_CHUNK_BYTES = 64 << 20  # features read per step of a full NaN/Inf scan
SHOW_FIRST = 5  # bad images / empty lines named in a message


def features_path(data_dir: Path, split: str) -> Path:
    return data_dir / f"{split}_ims.npy"


def _size(n_bytes: float) -> str:
    """``"1.2 GB"``, ``"340.0 MB"``, ``"12.0 kB"`` (decimal units, as disks are sold)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{int(n_bytes)} bytes"


def dtype_note(path: Path, feats: np.ndarray) -> str | None:
    """The warning for a feature file that is not float32 (``None`` for float32).

    Batches are converted to float32 either way; float64 only costs memory (the memory-mapped
    file fills the page cache: twice float32's), float16 has already lost precision.
    """
    dtype = np.dtype(feats.dtype)
    if dtype == np.float32:
        return None
    if dtype == np.float64:
        extra = int(np.prod(feats.shape, dtype=np.int64)) * 4  # float64 - float32 bytes
        return (f"feature file {path} holds float64 features: batches are converted to "
                f"float32, so float64 only doubles the memory the file takes versus float32 "
                f"({_size(extra)} more for this file); save it as float32 "
                f"(np.save(path, features.astype(np.float32)))")
    return (f"feature file {path} holds {dtype} features: batches are converted to float32, "
            f"but the values keep {dtype}'s precision, so results can differ from the papers' "
            f"float32 features")


def open_features(path: Path, nan_check_samples: int = 64) -> np.ndarray:
    """Memory-map ``(N, R, D)`` features and validate rank, dtype and a sample of values; a
    float16 or float64 file is accepted with one warning (:func:`dtype_note`).

    NaN/Inf are looked for in ``nan_check_samples`` images spread evenly over the file
    (first and last included), not in all of it: a full scan would read 33 GB for COCO
    (:func:`scan_features` does one when asked).
    """
    if not path.is_file():
        raise DataError(f"feature file not found: {path}")
    try:
        feats = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as err:
        raise DataError(f"feature file {path} is not a readable .npy array: {err}") from None
    if feats.ndim != 3:
        raise DataError(f"feature file {path} must have shape (images, regions, dim); found "
                        f"rank {feats.ndim} with shape {feats.shape}")
    if feats.dtype.type not in FLOAT_DTYPES:
        raise DataError(f"feature file {path} must hold floating-point features (float32 "
                        f"expected); found dtype {feats.dtype}")
    if feats.shape[0] == 0:
        raise DataError(f"feature file {path} holds no images")
    note = dtype_note(path, feats)  # float16/float64: accepted, but worth a line
    if note:
        warnings.warn(note, NclWarning, stacklevel=2)
    if nan_check_samples > 0:
        rows = np.unique(np.linspace(0, feats.shape[0] - 1, min(nan_check_samples, feats.shape[0])).astype(np.int64))
        sample = np.asarray(feats[rows])
        bad = rows[nonfinite_rows(sample)]
        if len(bad):
            raise DataError(f"feature file {path} holds NaN or Inf values (e.g. in image "
                            f"{_first(bad)}); checked {len(rows)} sampled images")
    return feats


def _first(indices: np.ndarray | list[int], total: int | None = None) -> str:
    """``"3, 7, 9"`` or ``"3, 7, 9, 12, 15 (and 40 more)"`` for a message."""
    indices = [int(i) for i in indices]
    total = len(indices) if total is None else total
    text = ", ".join(str(i) for i in indices[:SHOW_FIRST])
    return text + (f" (and {total - SHOW_FIRST} more)" if total > SHOW_FIRST else "")


def nonfinite_rows(block: np.ndarray) -> np.ndarray:
    """Indices (into ``block``'s first axis) of the rows that hold a NaN or an Inf."""
    block = np.asarray(block)
    return np.flatnonzero(~np.isfinite(block.reshape(block.shape[0], -1)).all(axis=1))


def scan_features(feats: np.ndarray, path: Path, progress: bool = True) -> None:
    """Check every image of memory-mapped features for NaN/Inf, a chunk at a time.

    Reads about :data:`SCAN_CHUNK_BYTES` per step, so memory stays bounded whatever the file
    size (COCO train: 33 GB); ``progress`` shows a progress bar on stderr.

    Raises:
        DataError: naming the file and the first bad images (all chunks are scanned, so the
            message also says how many images are affected).
    """
    n = int(feats.shape[0])
    row_bytes = max(1, int(np.prod(feats.shape[1:])) * feats.dtype.itemsize)
    step = max(1, SCAN_CHUNK_BYTES // row_bytes)
    bad: list[int] = []
    n_bad = 0
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n, desc=f"NaN/Inf scan of {path.name}", unit="img", file=sys.stderr,
                   leave=False, mininterval=1.0, dynamic_ncols=True)
    try:
        for start in range(0, n, step):
            stop = min(start + step, n)
            rows = nonfinite_rows(feats[start:stop]) + start
            n_bad += len(rows)
            bad.extend(int(r) for r in rows[: max(0, SHOW_FIRST - len(bad))])
            if bar is not None:
                bar.update(stop - start)
    finally:
        if bar is not None:
            bar.close()
    if n_bad:
        which = f"image {bad[0]}" if n_bad == 1 else f"images {_first(bad, n_bad)}"
        raise DataError(f"feature file {path} holds NaN or Inf values in {n_bad} of {n} images: "
                        f"{which} (full scan)")


def _warn_empty(path: Path, empty_lines: list[int]) -> None:
    """Warn (do not fail) about empty captions: the official code keeps them (spec 7.2)."""
    if empty_lines:
        lines = "line" + ("s" if len(empty_lines) > 1 else "")
        warnings.warn(f"caption file {path} has {len(empty_lines)} empty caption(s) ({lines} "
                      f"{_first(empty_lines)}); they are kept as '<start> <end>', as the "
                      f"official code does", NclWarning, stacklevel=3)


def split_lines(text: str) -> list[str]:
    r"""The lines of a caption file, split at ``\n`` only (``\r\n`` works: the caller strips
    the ``\r``).

    ``str.splitlines`` also breaks at ``\x0b``, ``\x0c``, ``\x1c``-``\x1e``, ``\x85``, U+2028
    and U+2029, which web captions can contain: one caption would become two and every later
    caption would be paired with the wrong image. RCL's loader iterates over the file in binary
    mode, which splits at ``\n`` only (NCR's text mode splits at a lone ``\r`` too). A final
    newline ends the last line; it does not start an empty one.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def read_captions(data_dir: Path, split: str) -> tuple[list[str], Path]:
    """Read ``{split}_caps.txt`` or, if absent, ``{split}_caps.tsv`` (CC152K), as UTF-8."""
    txt, tsv = data_dir / f"{split}_caps.txt", data_dir / f"{split}_caps.tsv"
    path = txt if txt.is_file() else tsv
    if not path.is_file():
        raise DataError(f"caption file not found: {txt} (or {tsv.name} for CC152K)")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise DataError(f"caption file {path} is not UTF-8: invalid byte at offset "
                        f"{err.start} (line {line})") from None
    if path.suffix == ".txt":
        captions = [line.strip() for line in split_lines(text)]
        _warn_empty(path, [i + 1 for i, c in enumerate(captions) if not c])
        return captions, path
    captions, empty = [], []
    # CC152K: csv.reader with tab delimiter and default '"' quoting, caption in column 1.
    reader = csv.reader(io.StringIO(text), delimiter="\t")
    for row in reader:
        lineno = reader.line_num  # a quoted caption may span lines: report where it ends
        if len(row) < 2:
            raise DataError(f"caption file {path}, line {lineno}: expected 'id<TAB>caption', "
                            f"found {len(row)} column(s)")
        captions.append(row[1].strip())
        if not captions[-1]:
            empty.append(lineno)
    _warn_empty(path, empty)
    return captions, path


def encode_all(captions: list[str], vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """Tokenise every caption once: flat ids ``(T,)`` int32 and offsets ``(N+1,)`` int64;
    read from the token cache when this split was encoded before (:mod:`ncl.data.token_cache`)."""
    return cached_encode(captions, vocab.words, lambda caps: _encode(caps, vocab))


def _encode(captions: Sequence[str], vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    encoded = [vocab.encode(tokenize(c)) for c in captions]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    flat = np.fromiter((i for e in encoded for i in e), dtype=np.int32, count=int(offsets[-1]))
    return flat, offsets


@dataclass
class PrecompSplit:
    """A split: memory-mapped features, captions and their token ids.

    Attributes:
        name: split name (``train``, ``dev``, ``test``, ``testall``).
        features: ``(N_img, R, D)`` memory map (truncated view when ``max_images`` is set).
        captions: ``N_cap`` strings, ``im_div`` consecutive ones per image.
        im_div: captions per image, from the full files as the official code does.
        token_ids, offsets: caption ``c`` is ``token_ids[offsets[c]:offsets[c+1]]``,
            ``<start>`` and ``<end>`` included.
        caption_path, feature_path: the files the split was read from (for messages).
    """

    name: str
    features: np.ndarray
    captions: list[str]
    im_div: int
    token_ids: np.ndarray
    offsets: np.ndarray
    caption_path: Path
    feature_path: Path | None = None

    @property
    def n_images(self) -> int:
        return int(self.features.shape[0])

    @property
    def n_captions(self) -> int:
        return len(self.captions)

    @property
    def num_regions(self) -> int:
        return int(self.features.shape[1])

    @property
    def feature_dim(self) -> int:
        return int(self.features.shape[2])

    def tokens(self, caption: int) -> np.ndarray:
        return self.token_ids[self.offsets[caption]: self.offsets[caption + 1]]


def load_split(data_dir: str | Path, split: str, vocab: Vocabulary, max_images: int | None = None,
               nan_check_samples: int = 64, nan_check: NanCheck = "sample",
               progress: bool = True) -> PrecompSplit:
    """Open one split and check it (files present, shapes, dtype, caption count).

    Args:
        data_dir: ``<root>/<name>`` holding the split files.
        split: one of ``train, dev, test, testall``.
        vocab: the vocabulary the captions are encoded with.
        max_images: keep only the first ``max_images`` images and their captions (the
            official dev truncation is 1,000).
        nan_check_samples: images checked for NaN/Inf with ``nan_check="sample"``.
        nan_check: ``sample`` (``nan_check_samples`` images spread over the file), ``full``
            (every image that is used, read in chunks: the whole file for train and test,
            the first ``max_images`` for dev) or ``off``.
        progress: show a progress bar during a full scan.
    """
    data_dir = Path(data_dir)
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    if not data_dir.is_dir():
        raise DataError(f"data directory not found: {data_dir}")
    if nan_check not in ("sample", "full", "off"):
        raise ConfigError(f"data.nan_check must be 'sample', 'full' or 'off', got {nan_check!r}")
    feat_path = features_path(data_dir, split)
    feats = open_features(feat_path, nan_check_samples if nan_check == "sample" else 0)
    captions, cap_path = read_captions(data_dir, split)
    n_img, n_cap = feats.shape[0], len(captions)
    if n_cap == 0 or n_cap % n_img:
        raise DataError(f"{cap_path} holds {n_cap} captions, which is not a whole multiple of "
                        f"the {n_img} images in {features_path(data_dir, split)}")
    im_div = n_cap // n_img
    if max_images is not None and max_images < n_img:
        feats, captions = feats[:max_images], captions[: max_images * im_div]
    if nan_check == "full":
        scan_features(feats, feat_path, progress)
    ids, offsets = encode_all(captions, vocab)
    return PrecompSplit(split, feats, captions, im_div, ids, offsets, cap_path, feat_path)
