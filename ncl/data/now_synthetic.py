"""Synthetic data in NoW's released layout (:mod:`ncl.data.now`), for tests and smoke runs.

NoW itself is on the Hugging Face Hub, out of reach here. This writes the synthetic benchmark
of :mod:`ncl.data.synthetic` (planted concepts, region-bound attributes, hard-negative families;
learnable) with **one caption per image** in exactly NoW's files: ``h5100k_precomp/{split}_ims.npy``,
``{split}_caps_{bpe,bert,jieba}.txt`` of comma-separated token ids, ``{split}_ids.txt`` and
``vocab/now100k_precomp_vocab_{bpe,bert,jieba}.json``. The three tokenizations stand in for
NoW's three (their sizes are the data's, not NoW's):

* ``jieba``: whole words;
* ``bert``: WordPiece-like, a pseudo-word split into its syllables, every piece after the first
  marked ``##``;
* ``bpe``: the same pieces without the mark (a first and an inner piece share one id).

Each vocabulary holds ``<pad> <start> <end> <unk>`` (ids 0-3) and every piece of train + dev;
a test piece never seen there is ``<unk>``. Deterministic given the spec.

:class:`NowSyntheticDataModule` generates it once into the cache and reads it with
:class:`~ncl.data.now.NowDataModule` (it is that class's ``TINY_COUNTERPART``: the NoW configs
train on it in tests/cli/test_configs.py); ``configs/rcl_sgr_now_synthetic.yaml`` is a CPU
smoke run on its ``quickstart`` preset.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ncl.data.augment import Augmentation
from ncl.data.cache import spec_folder
from ncl.data.datamodule import Protocol
from ncl.data.noise import NoiseType
from ncl.data.now import (
    FOLDER,
    NOW_SPLITS,
    TOKENIZERS,
    NowDataModule,
    caption_file,
    check_tokenizer,
    vocab_file,
)
from ncl.data.precomp import NanCheck
from ncl.data.synthetic import SYLLABLES, SyntheticSpec, generate, preset
from ncl.data.vocab import SPECIAL_TOKENS, Vocabulary
from ncl.io import atomic_write_text

NowPreset = Literal["tiny", "quickstart"]
#: NoW's presets: the synthetic ones with one caption per image (quickstart: more images, so
#: that the single captions carry about as many words as the 5-caption benchmark's 1,200).
NOW_PRESETS: dict[str, SyntheticSpec] = {
    "tiny": preset("tiny", captions_per_image=1),
    "quickstart": preset("quickstart", captions_per_image=1, n_train=3000),
}
#: The size of the source set ``{split}_ids.txt`` indexes into (NoW: 500K crawled pairs).
SOURCE_SIZE = 500_000
_SYLLABLES = frozenset(SYLLABLES)


def now_preset(name: NowPreset, **overrides: Any) -> SyntheticSpec:
    """A NoW preset spec with optional field overrides.

    Raises:
        KeyError: an unknown preset name.
    """
    if name not in NOW_PRESETS:
        raise KeyError(f"unknown synthetic NoW preset {name!r}; expected one of {sorted(NOW_PRESETS)}")
    return replace(NOW_PRESETS[name], **overrides)


def pieces(word: str, tokenizer: str) -> list[str]:
    """The tokens of one word under a stand-in tokenizer (``"bakomi"`` -> ``ba ##ko ##mi`` for
    ``bert``, ``ba ko mi`` for ``bpe``, ``bakomi`` for ``jieba``); a word that is not made of
    the generator's syllables (a filler such as ``the``) stays whole."""
    chunks = [word[i:i + 2] for i in range(0, len(word), 2)]
    if tokenizer == "jieba" or len(chunks) < 2 or len(word) % 2 or not _SYLLABLES.issuperset(chunks):
        return [word]
    mark = "##" if tokenizer == "bert" else ""
    return [chunks[0], *(mark + c for c in chunks[1:])]


def tokenize_caption(caption: str, tokenizer: str) -> list[str]:
    """The tokens of a generated caption (words are separated by spaces)."""
    return [p for word in caption.split() for p in pieces(word, tokenizer)]


def piece_vocabulary(tokenized: list[list[str]]) -> Vocabulary:
    """The special tokens, then every token seen, by decreasing count then alphabetically."""
    counts = Counter(t for tokens in tokenized for t in tokens)
    kept = sorted((t for t in counts if t not in SPECIAL_TOKENS), key=lambda t: (-counts[t], t))
    return Vocabulary((*SPECIAL_TOKENS, *kept))


def _id_line(tokens: list[str], vocab: Vocabulary) -> str:
    """One caption line: the ids, comma-separated, without ``<start>``/``<end>``."""
    return ",".join(str(vocab.word_id(t)) for t in tokens)


def generate_now(out_root: str | Path, spec: SyntheticSpec) -> Path:
    """Write the dataset in NoW's layout under ``<out_root>``; skip if an identical spec was
    written before.

    Returns:
        The dataset folder ``<out_root>/h5100k_precomp``.
    """
    if spec.captions_per_image != 1:
        raise ValueError(f"NoW has one caption per image; got captions_per_image={spec.captions_per_image}")
    out_root = Path(out_root)
    data_dir = out_root / FOLDER
    marker = data_dir / "spec.json"
    payload = json.dumps(asdict(spec), sort_keys=True)
    if marker.is_file() and marker.read_text() == payload:
        return data_dir
    marker.unlink(missing_ok=True)  # an interrupted run must not look complete
    scratch = out_root / ".text"  # the synthetic benchmark's files, converted below
    shutil.rmtree(scratch, ignore_errors=True)  # what an interrupted run left
    text_dir = generate(scratch, spec, name="text")
    data_dir.mkdir(parents=True, exist_ok=True)
    captions = {}
    for split in NOW_SPLITS:
        captions[split] = (text_dir / f"{split}_caps.txt").read_text(encoding="utf-8").splitlines()
        os.replace(text_dir / f"{split}_ims.npy", data_dir / f"{split}_ims.npy")
    for tokenizer in TOKENIZERS:
        tokens = {s: [tokenize_caption(c, tokenizer) for c in captions[s]] for s in NOW_SPLITS}
        vocab = piece_vocabulary(tokens["train"] + tokens["dev"])
        vocab.to_json(vocab_file(out_root, tokenizer))
        for split in NOW_SPLITS:
            lines = [_id_line(t, vocab) for t in tokens[split]]
            atomic_write_text(caption_file(data_dir, split, tokenizer), "\n".join(lines) + "\n")
    sizes = [len(captions[s]) for s in NOW_SPLITS]
    source = np.random.RandomState(spec.seed).choice(SOURCE_SIZE, size=sum(sizes), replace=False)
    for split, chunk in zip(NOW_SPLITS, np.split(source, np.cumsum(sizes)[:-1])):
        atomic_write_text(data_dir / f"{split}_ids.txt", "".join(f"{i}\n" for i in chunk))
    shutil.rmtree(scratch, ignore_errors=True)
    atomic_write_text(marker, payload)  # written last: marks the dataset complete
    return data_dir


def cached_now_dataset(preset_name: NowPreset, cache_dir: str | None = None,
                       **overrides: Any) -> tuple[Path, SyntheticSpec]:
    """Generate (once) and return ``(data_root, spec)``; the root is keyed by the spec's hash."""
    spec = now_preset(preset_name, **overrides)
    root = spec_folder(cache_dir, f"now-{preset_name}", spec)
    generate_now(root, spec)
    return root, spec


class NowSyntheticDataModule(NowDataModule):
    """:class:`NowDataModule` over generated data in NoW's layout (:mod:`ncl.data.now_synthetic`).

    Written once under ``<cache_dir>/now-<preset>-<hash>/`` and reused. Its pairs are right as
    generated (``real_noise`` false: diagnostics score against the injected noise).

    Args:
        preset: ``tiny`` (tests, seconds; 6 regions x 16 dims) or ``quickstart``.
        cache_dir: default ``$XDG_CACHE_HOME/ncl`` or ``~/.cache/ncl``.
        synthetic_seed: seed of the generator.
        n_train, n_dev, n_test, num_regions, feature_dim: overrides of the preset's sizes.
        Other arguments: as :class:`NowDataModule`.
    """

    #: Tiny test data stays in NoW's layout (tests/config_override.py).
    TINY_COUNTERPART = ("ncl.data.now_synthetic.NowSyntheticDataModule", {})

    def __init__(self, preset: Literal["tiny", "quickstart"] = "quickstart",
                 cache_dir: str | None = None, synthetic_seed: int = 0,
                 n_train: int | None = None, n_dev: int | None = None, n_test: int | None = None,
                 num_regions: int | None = None, feature_dim: int | None = None,
                 tokenizer: str = "bert", batch_size: int = 128, eval_batch_size: int = 128,
                 num_workers: int = 0, noise_type: NoiseType = "none", noise_ratio: float = 0.0,
                 noise_file: str | None = None, noise_seed: int = 0,
                 dev_max_images: int | None = 1000, test_protocols: Sequence[Protocol] = ("1k",),
                 nan_check_samples: int = 64, nan_check: NanCheck = "sample",
                 augment: Augmentation | None = None, real_noise: bool = False,
                 per_device_batch: bool = False) -> None:
        check_tokenizer(tokenizer)
        overrides: dict[str, Any] = {k: v for k, v in dict(
            n_train=n_train, n_dev=n_dev, n_test=n_test, num_regions=num_regions,
            feature_dim=feature_dim, seed=synthetic_seed).items() if v is not None}
        root, self.spec = cached_now_dataset(preset, cache_dir, **overrides)
        super().__init__(data_root=str(root), data_name=FOLDER, tokenizer=tokenizer,
                         batch_size=batch_size, eval_batch_size=eval_batch_size,
                         num_workers=num_workers, noise_type=noise_type, noise_ratio=noise_ratio,
                         noise_file=noise_file, noise_seed=noise_seed,
                         dev_max_images=dev_max_images, test_protocols=test_protocols,
                         nan_check_samples=nan_check_samples, nan_check=nan_check,
                         augment=augment, real_noise=real_noise, per_device_batch=per_device_batch)
