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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ncl.data.tokenize import tokenize
from ncl.data.vocab import Vocabulary
from ncl.errors import DataError

SPLITS = ("train", "dev", "test", "testall")
FLOAT_DTYPES = (np.float16, np.float32, np.float64)


def features_path(data_dir: Path, split: str) -> Path:
    return data_dir / f"{split}_ims.npy"


def open_features(path: Path, nan_check_samples: int = 64) -> np.ndarray:
    """Memory-map ``(N, R, D)`` features and validate rank, dtype and a sample of values.

    NaN/Inf are looked for in ``nan_check_samples`` images spread evenly over the file
    (first and last included), not in all of it: a full scan would read 33 GB for COCO.
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
    if nan_check_samples > 0:
        rows = np.unique(np.linspace(0, feats.shape[0] - 1, min(nan_check_samples, feats.shape[0])).astype(np.int64))
        sample = np.asarray(feats[rows])
        if not np.isfinite(sample).all():
            bad = rows[~np.isfinite(sample).reshape(len(rows), -1).all(axis=1)]
            raise DataError(f"feature file {path} holds NaN or Inf values (e.g. in image "
                            f"{int(bad[0])}); checked {len(rows)} sampled images")
    return feats


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
        return [line.strip() for line in text.splitlines()], path
    captions = []
    # CC152K: csv.reader with tab delimiter and default '"' quoting, caption in column 1.
    for lineno, row in enumerate(csv.reader(io.StringIO(text), delimiter="\t"), start=1):
        if len(row) < 2:
            raise DataError(f"caption file {path}, line {lineno}: expected 'id<TAB>caption', "
                            f"found {len(row)} column(s)")
        captions.append(row[1].strip())
    return captions, path


def encode_all(captions: list[str], vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """Tokenise every caption once: flat ids ``(T,)`` int32 and offsets ``(N+1,)`` int64."""
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
    """

    name: str
    features: np.ndarray
    captions: list[str]
    im_div: int
    token_ids: np.ndarray
    offsets: np.ndarray
    caption_path: Path

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
               nan_check_samples: int = 64) -> PrecompSplit:
    """Open one split and check it (files present, shapes, dtype, caption count).

    Args:
        data_dir: ``<root>/<name>`` holding the split files.
        split: one of ``train, dev, test, testall``.
        vocab: the vocabulary the captions are encoded with.
        max_images: keep only the first ``max_images`` images and their captions (the
            official dev truncation is 1,000).
        nan_check_samples: images checked for NaN/Inf.
    """
    data_dir = Path(data_dir)
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    if not data_dir.is_dir():
        raise DataError(f"data directory not found: {data_dir}")
    feats = open_features(features_path(data_dir, split), nan_check_samples)
    captions, cap_path = read_captions(data_dir, split)
    n_img, n_cap = feats.shape[0], len(captions)
    if n_cap == 0 or n_cap % n_img:
        raise DataError(f"{cap_path} holds {n_cap} captions, which is not a whole multiple of "
                        f"the {n_img} images in {features_path(data_dir, split)}")
    im_div = n_cap // n_img
    if max_images is not None and max_images < n_img:
        feats, captions = feats[:max_images], captions[: max_images * im_div]
    ids, offsets = encode_all(captions, vocab)
    return PrecompSplit(split, feats, captions, im_div, ids, offsets, cap_path)
