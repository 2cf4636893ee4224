"""NoW (Noise of Web; PC², ACM MM 2024): its released layout and its DataModule.

NoW holds 100,000 screenshots of mobile web pages paired with the pages' meta-descriptions
(98,000 train / 1,000 dev / 1,000 test, one caption per image), noisy by nature (about 70 %
estimated) and never annotated: real noise, as CC152K, so there is no clean mask. Only
features and token ids are released (docs/data.md, "NoW")::

    <data_root>/h5100k_precomp/{split}_ims.npy            (N, 36, 768) float: APT UI-detector
                                                           features of the top 36 elements
    <data_root>/h5100k_precomp/{split}_caps_{tok}.txt     one caption per line, its token ids
                                                           comma-separated (no <start>/<end>)
    <data_root>/h5100k_precomp/{split}_ids.txt            the pairs' indices in the 500K source
    <data_root>/vocab/now100k_precomp_vocab_{tok}.json    word2idx / idx2word / idx

with ``split`` in ``train, dev, test`` and ``tok`` the tokenizer: ``bpe`` (10,000 ids),
``bert`` (multilingual cased WordPiece, 32,702) or ``jieba`` (56,271). As the official loader
does (alipay/PC2-NoiseofWeb ``pc2/data.py``), a caption is ``[<start>] + ids + [<end>]`` with
``<start>``/``<end>`` looked up in the vocabulary (``<unk>`` when absent), empty pieces of a
line are skipped, the vocabulary's size is its ``idx`` and padding is id 0. Unlike the official
loader, ncl refuses an id outside the vocabulary (the embedding would fail later).

A split becomes a :class:`~ncl.data.precomp.PrecompSplit` like any other, so noise, loaders,
evaluation (the whole 1,000 x 1,000 matrix, one caption per image) and every method work
unchanged.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ncl.data.augment import Augmentation
from ncl.data.datamodule import PrecompDataModule, Protocol
from ncl.data.noise import NoiseType
from ncl.data.precomp import NanCheck, PrecompSplit, features_path, open_features, scan_features, split_lines
from ncl.data.vocab import Vocabulary
from ncl.errors import ConfigError, DataError, NclWarning

#: The released folder (README of alipay/PC2-NoiseofWeb, "Data Structure").
FOLDER = "h5100k_precomp"
#: The vocabularies' name stem: ``vocab/now100k_precomp_vocab_{tokenizer}.json``.
VOCAB_STEM = "now100k_precomp"
#: The tokenizers NoW's captions were encoded with, and the size of each vocabulary.
TOKENIZERS: dict[str, int] = {"bpe": 10_000, "bert": 32_702, "jieba": 56_271}
NOW_SPLITS = ("train", "dev", "test")
DOCS = "docs/data.md, section 'NoW'"


def check_tokenizer(tokenizer: str) -> str:
    """``tokenizer`` if NoW has captions for it, else one :class:`ConfigError` naming the option."""
    if tokenizer not in TOKENIZERS:
        raise ConfigError(f"data.tokenizer must be one of {', '.join(TOKENIZERS)} (NoW's caption "
                          f"files {{split}}_caps_{{tokenizer}}.txt), got {tokenizer!r}")
    return tokenizer


def vocab_file(data_root: str | Path, tokenizer: str) -> Path:
    """``<data_root>/vocab/now100k_precomp_vocab_<tokenizer>.json``."""
    return Path(data_root) / "vocab" / f"{VOCAB_STEM}_vocab_{tokenizer}.json"


def caption_file(data_dir: str | Path, split: str, tokenizer: str) -> Path:
    """``<data_dir>/<split>_caps_<tokenizer>.txt``."""
    return Path(data_dir) / f"{split}_caps_{tokenizer}.txt"


def load_now_vocabulary(path: str | Path) -> tuple[Vocabulary, int, int]:
    """``(vocabulary, <start> id, <end> id)`` of a NoW vocabulary JSON.

    The size is the file's ``idx`` (what the official code gives the embedding), ``len(word2idx)``
    without it; ids missing from ``word2idx`` get placeholder words. ``<start>``/``<end>`` are
    the ids the file gives them, ``<unk>``'s when it has none (the official ``vocab(word)``).

    Raises:
        DataError: a missing or unreadable file, no ``word2idx`` of integer ids, an id outside
            ``0..idx-1``, or neither ``<start>``/``<end>`` nor ``<unk>``; the message names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"NoW vocabulary file not found: {path} (pass data.vocab_path, or check "
                        f"data.tokenizer and data.data_root; {DOCS})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"NoW vocabulary file {path} is not valid UTF-8 JSON: {err}") from None
    word2idx = data.get("word2idx") if isinstance(data, dict) else None
    if not isinstance(word2idx, dict) or not all(
            isinstance(w, str) and isinstance(i, int) and not isinstance(i, bool)
            for w, i in word2idx.items()):
        raise DataError(f"NoW vocabulary file {path} needs a 'word2idx' object mapping words to "
                        f"integer ids")
    size = data.get("idx", len(word2idx))
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise DataError(f"NoW vocabulary file {path}: 'idx' must be a positive int, got {size!r}")
    words = [f"<id {i}>" for i in range(size)]
    for word, i in word2idx.items():
        if not 0 <= i < size:
            raise DataError(f"NoW vocabulary file {path}: id {i} of {word!r} is outside "
                            f"0..{size - 1} ('idx' is {size})")
        words[i] = word
    unk = word2idx.get("<unk>")
    start, end = word2idx.get("<start>", unk), word2idx.get("<end>", unk)
    if start is None or end is None:
        raise DataError(f"NoW vocabulary file {path} has neither <start>/<end> nor <unk>: the "
                        f"captions cannot be wrapped as the official loader does")
    return Vocabulary(tuple(words)), start, end


def parse_ids(line: str, vocab_size: int, path: Path, lineno: int) -> list[int]:
    """The token ids of one caption line (``"12,7,301"``); empty pieces are skipped.

    Raises:
        DataError: a piece that is no integer, or an id outside ``0..vocab_size-1``, naming the
            file and line.
    """
    ids = []
    for piece in line.split(","):
        piece = piece.strip()
        if not piece:
            continue
        try:
            token = int(piece)
        except ValueError:
            raise DataError(f"{path}, line {lineno}: {piece!r} is not a token id (NoW captions "
                            f"are comma-separated integer ids)") from None
        if not 0 <= token < vocab_size:
            raise DataError(f"{path}, line {lineno}: token id {token} is outside the vocabulary "
                            f"(ids 0..{vocab_size - 1}); is data.tokenizer the tokenizer of "
                            f"these captions, and the vocabulary theirs?")
        ids.append(token)
    return ids


def read_now_captions(path: Path, vocab_size: int, start: int,
                      end: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``(lines, flat ids (T,) int32, offsets (N+1,) int64)`` of a caption file; caption ``c`` is
    ``ids[offsets[c]:offsets[c+1]]`` = ``[start, *its ids, end]``. Empty lines are kept as
    ``[start, end]`` (as the official loader does), with one warning."""
    if not path.is_file():
        raise DataError(f"NoW caption file not found: {path} (data.tokenizer picks "
                        f"{{split}}_caps_{{tokenizer}}.txt; {DOCS})")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"NoW caption file {path} is not UTF-8: {err}") from None
    lines = [line.strip() for line in split_lines(text)]
    encoded = [[start, *parse_ids(line, vocab_size, path, k + 1), end] for k, line in enumerate(lines)]
    empty = [k + 1 for k, caption in enumerate(encoded) if len(caption) == 2]
    if empty:
        warnings.warn(f"NoW caption file {path} has {len(empty)} caption(s) without ids (first: "
                      f"line {empty[0]}); they are kept as <start> <end>, as the official loader "
                      f"does", NclWarning, stacklevel=2)
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in encoded], out=offsets[1:])
    flat = np.fromiter((i for c in encoded for i in c), dtype=np.int32, count=int(offsets[-1]))
    return lines, flat, offsets


def load_now_split(data_dir: str | Path, split: str, tokenizer: str, vocab_size: int, start: int,
                   end: int, max_images: int | None = None, nan_check_samples: int = 64,
                   nan_check: NanCheck = "sample", progress: bool = True) -> PrecompSplit:
    """One NoW split as a :class:`PrecompSplit` (features memory-mapped, ids wrapped).

    Raises:
        DataError: missing files, features that are not ``(N, R, D)`` floats, NaN/Inf, a caption
            count that is not a whole multiple of the image count, bad ids.
    """
    data_dir = Path(data_dir)
    if split not in NOW_SPLITS:
        raise DataError(f"unknown NoW split {split!r}; expected one of {', '.join(NOW_SPLITS)}")
    if nan_check not in ("sample", "full", "off"):
        raise ConfigError(f"data.nan_check must be 'sample', 'full' or 'off', got {nan_check!r}")
    feat_path = features_path(data_dir, split)
    feats = open_features(feat_path, nan_check_samples if nan_check == "sample" else 0)
    cap_path = caption_file(data_dir, split, tokenizer)
    lines, flat, offsets = read_now_captions(cap_path, vocab_size, start, end)
    n_img, n_cap = feats.shape[0], len(lines)
    if n_cap == 0 or n_cap % n_img:
        raise DataError(f"{cap_path} holds {n_cap} captions, which is not a whole multiple of "
                        f"the {n_img} images in {feat_path} (NoW: one caption per image)")
    im_div = n_cap // n_img
    if max_images is not None and max_images < n_img:
        feats, lines = feats[:max_images], lines[: max_images * im_div]
        offsets = offsets[: max_images * im_div + 1]
        flat = flat[: int(offsets[-1])]
    if nan_check == "full":
        scan_features(feats, feat_path, progress)
    return PrecompSplit(split, feats, lines, im_div, flat, offsets, cap_path, feat_path)


class NowDataModule(PrecompDataModule):
    """Train/dev/test loaders over NoW's released layout (real noise: no clean mask).

    Args:
        data_root: folder holding ``h5100k_precomp/`` and ``vocab/``.
        data_name: the dataset folder (``h5100k_precomp`` as released).
        tokenizer: ``bpe``, ``bert`` (default: the official NoW command's) or ``jieba``: picks
            ``{split}_caps_{tokenizer}.txt`` and ``vocab/now100k_precomp_vocab_{tokenizer}.json``.
        vocab_path: the vocabulary JSON, if not the tokenizer's default file.
        real_noise: NoW's pairs are noisy already and never annotated (``clean_mask_known`` is
            false): keep ``True`` unless you know better.
        Other arguments: as :class:`~ncl.data.datamodule.PrecompDataModule`; no noise is injected
            by default (the official NoW run injects none, docs/data.md).
    """

    #: The synthetic twin in this layout that tests train through a NoW config (tests/config_override.py).
    TINY_COUNTERPART = ("ncl.data.now_synthetic.NowSyntheticDataModule", {})

    def __init__(self, data_root: str, data_name: str = FOLDER, tokenizer: str = "bert",
                 vocab_path: str | None = None, batch_size: int = 128, eval_batch_size: int = 128,
                 num_workers: int = 0, noise_type: NoiseType = "none", noise_ratio: float = 0.0,
                 noise_file: str | None = None, noise_seed: int = 0,
                 dev_max_images: int | None = 1000, test_protocols: Sequence[Protocol] = ("1k",),
                 nan_check_samples: int = 64, nan_check: NanCheck = "sample",
                 augment: Augmentation | None = None, real_noise: bool = True,
                 per_device_batch: bool = False) -> None:
        self.tokenizer = check_tokenizer(tokenizer)
        folder = Path(data_root) / data_name
        if not folder.is_dir():
            raise DataError(f"NoW dataset folder not found: {folder} (data_root={data_root!r}, "
                            f"data_name={data_name!r}); {DOCS} says where to get it")
        vocab = Path(vocab_path) if vocab_path else vocab_file(data_root, tokenizer)
        if not vocab.is_file():
            option = "data.vocab_path" if vocab_path else f"data.tokenizer={tokenizer!r}"
            raise DataError(f"NoW vocabulary file not found: {vocab} (from {option}); the release "
                            f"has vocab/{VOCAB_STEM}_vocab_{{bpe,bert,jieba}}.json ({DOCS})")
        self.start_id, self.end_id = 1, 2  # set by _read_vocabulary
        super().__init__(data_root=data_root, data_name=data_name, vocab_path=str(vocab),
                         batch_size=batch_size, eval_batch_size=eval_batch_size,
                         num_workers=num_workers, noise_type=noise_type, noise_ratio=noise_ratio,
                         noise_file=noise_file, noise_seed=noise_seed,
                         dev_max_images=dev_max_images, val_split="dev", test_split="test",
                         test_protocols=test_protocols, nan_check_samples=nan_check_samples,
                         nan_check=nan_check, augment=augment, real_noise=real_noise,
                         per_device_batch=per_device_batch)

    def _read_vocabulary(self, path: Path) -> Vocabulary:
        vocab, self.start_id, self.end_id = load_now_vocabulary(path)
        return vocab

    def _load(self, split: str, max_images: int | None = None) -> PrecompSplit:
        trainer = getattr(self, "trainer", None)
        return load_now_split(self.data_dir, split, self.tokenizer, len(self.vocab), self.start_id,
                              self.end_id, max_images, self.nan_check_samples, self.nan_check,
                              trainer is None or trainer.is_global_zero)
