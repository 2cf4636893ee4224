"""Precomputed video-text data: a documented on-disk layout and its DataModules.

There is no single official release format for video features, so ncl defines one
(docs/video.md; ``python -m ncl.datatools.video_convert`` sketches a converter)::

    <data_root>/<data_name>/manifest.json        {"experts": [{"name": "appearance", "dim": 2048},
                                                               {"name": "motion", "dim": 2048}]}
    <data_root>/<data_name>/{split}_{expert}.npy  (N_clip, d_expert) float, one row per clip
    <data_root>/<data_name>/{split}_caps.txt      N_clip * c lines: the c captions of clip 0,
                                                  then those of clip 1, ... (c constant per split)
    <data_root>/vocab/<data_name>_vocab.json      ncl's vocabulary JSON (word2idx, idx2word, idx)

``split`` is ``train``, ``dev`` or ``test``. A clip that lacks an expert (Miech et al. 2018's
"incomplete" data) has an all-zero row in that expert's file.

How it plugs into ncl: each split is loaded into a :class:`~ncl.data.precomp.PrecompSplit`
whose ``features`` are the experts *packed* into one ``(N_clip, K, D)`` float32 array (row
``k`` = expert ``k`` zero-padded to ``D = max d_k``), so a clip is an "image" of K "regions"
for every other part of ncl: the noise (caption shuffling and clip-level permutation,
:mod:`ncl.data.noise`), the loaders and batches (:mod:`ncl.data.datasets`), the evaluation
(captions of clip ``i`` are rows ``i*c .. i*c+c-1``), and the
:class:`~ncl.data.contracts.RetrievalData` contract. :class:`~ncl.models.gated.GatedVideoText`
reads the packed rows back as experts.

Video features are small (MSR-VTT: 10k clips x 2 x 2048 floats = 160 MB), so the packed array
is built in memory rather than memory-mapped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ncl.data.datamodule import PrecompDataModule, Protocol
from ncl.data.augment import Augmentation
from ncl.data.noise import NoiseType
from ncl.data.precomp import FLOAT_DTYPES, NanCheck, PrecompSplit, encode_all, nonfinite_rows, read_captions
from ncl.data.vocab import Vocabulary
from ncl.errors import ConfigError, DataError

MANIFEST = "manifest.json"
VIDEO_SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Expert:
    """One video expert: its name (file ``{split}_{name}.npy``) and feature size."""

    name: str
    dim: int


def read_manifest(data_dir: Path) -> list[Expert]:
    """The experts listed in ``<data_dir>/manifest.json``, in packing order.

    Raises:
        DataError: missing or invalid manifest (the message names the file and the field).
    """
    path = data_dir / MANIFEST
    if not path.is_file():
        raise DataError(f"video manifest not found: {path} (docs/video.md, 'On-disk layout')")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"video manifest {path} is not valid UTF-8 JSON: {err}") from None
    entries = data.get("experts") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise DataError(f"video manifest {path} needs a non-empty 'experts' list of "
                        f"{{'name': ..., 'dim': ...}}")
    experts = []
    for k, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        dim = entry.get("dim") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or "/" in name:
            raise DataError(f"video manifest {path}: experts[{k}].name must be a file-name-safe "
                            f"string, got {name!r}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise DataError(f"video manifest {path}: experts[{k}].dim must be a positive int, "
                            f"got {dim!r}")
        experts.append(Expert(name, dim))
    names = [e.name for e in experts]
    if len(set(names)) != len(names):
        raise DataError(f"video manifest {path}: expert names must be unique, got {names}")
    return experts


def _open_expert(path: Path, expert: Expert) -> np.ndarray:
    """``(N_clip, d)`` features of one expert, checked against the manifest."""
    if not path.is_file():
        raise DataError(f"expert feature file not found: {path} (expert {expert.name!r} of "
                        f"the manifest)")
    try:
        feats = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as err:
        raise DataError(f"expert feature file {path} is not a readable .npy array: {err}") from None
    if feats.ndim != 2 or feats.shape[1] != expert.dim or feats.shape[0] == 0:
        raise DataError(f"expert feature file {path} must have shape (clips >= 1, {expert.dim}) "
                        f"as the manifest says; found {feats.shape}")
    if feats.dtype.type not in FLOAT_DTYPES:
        raise DataError(f"expert feature file {path} must hold floating-point features; found "
                        f"dtype {feats.dtype}")
    return feats


def pack_experts(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Stack K expert arrays ``(N, d_k)`` into ``(N, K, max d_k)`` float32, zero-padded.

    Zero padding is exact for a linear first layer: padded inputs multiply weights that then
    contribute nothing and receive no gradient.
    """
    n = arrays[0].shape[0]
    width = max(a.shape[1] for a in arrays)
    packed = np.zeros((n, len(arrays), width), dtype=np.float32)
    for k, arr in enumerate(arrays):
        packed[:, k, : arr.shape[1]] = arr
    return packed


def load_video_split(data_dir: str | Path, split: str, vocab: Vocabulary,
                     max_clips: int | None = None, nan_check: NanCheck = "sample") -> PrecompSplit:
    """Read one split of the video layout into a :class:`PrecompSplit` with packed experts.

    Args:
        data_dir: ``<data_root>/<data_name>``.
        split: ``train``, ``dev`` or ``test``.
        vocab: the vocabulary captions are encoded with.
        max_clips: keep the first ``max_clips`` clips and their captions (``None``: all).
        nan_check: ``off`` skips the NaN/Inf check; ``sample`` and ``full`` both check every
            clip (the packed array is in memory anyway).

    Raises:
        DataError: missing files, shapes that disagree with the manifest or with each other,
            a caption count that is not a multiple of the clip count, NaN/Inf features.
    """
    data_dir = Path(data_dir)
    if split not in VIDEO_SPLITS:
        raise DataError(f"unknown video split {split!r}; expected one of {', '.join(VIDEO_SPLITS)}")
    if nan_check not in ("sample", "full", "off"):
        raise ConfigError(f"data.nan_check must be 'sample', 'full' or 'off', got {nan_check!r}")
    experts = read_manifest(data_dir)
    paths = [data_dir / f"{split}_{e.name}.npy" for e in experts]
    arrays = [_open_expert(p, e) for p, e in zip(paths, experts)]
    counts = {p.name: a.shape[0] for p, a in zip(paths, arrays)}
    if len(set(counts.values())) != 1:
        raise DataError(f"the expert files of split {split!r} in {data_dir} disagree on the "
                        f"number of clips: {counts}")
    captions, cap_path = read_captions(data_dir, split)
    n_clip, n_cap = arrays[0].shape[0], len(captions)
    if n_cap == 0 or n_cap % n_clip:
        raise DataError(f"{cap_path} holds {n_cap} captions, which is not a whole multiple of the "
                        f"{n_clip} clips of split {split!r} (captions per clip must be constant; "
                        f"docs/video.md says how to convert MSVD's varying counts)")
    per_clip = n_cap // n_clip
    if max_clips is not None and max_clips < n_clip:
        arrays, captions = [a[:max_clips] for a in arrays], captions[: max_clips * per_clip]
    packed = pack_experts(arrays)
    if nan_check != "off":
        bad = nonfinite_rows(packed)
        if len(bad):
            raise DataError(f"the expert features of split {split!r} in {data_dir} hold NaN or "
                            f"Inf values in {len(bad)} clips (first: clip {int(bad[0])})")
    ids, offsets = encode_all(captions, vocab)
    return PrecompSplit(split, packed, captions, per_clip, ids, offsets, cap_path, paths[0])


class VideoDataModule(PrecompDataModule):
    """Train/dev/test loaders over the video layout of this module, with ncl's noise.

    A clip is an "image" whose "regions" are its K experts (``(K, D)`` packed features), so
    batches, noise, evaluation and the :class:`~ncl.data.contracts.RetrievalData` contract are
    those of :class:`~ncl.data.datamodule.PrecompDataModule`. ``noise_type: caption`` is
    NCR/LNC's caption shuffling, ``image`` RCL's clip-level permutation (all captions of a
    chosen clip move together).

    Args:
        data_root: folder holding ``<data_name>/`` and ``vocab/``.
        data_name: e.g. ``msrvtt``, ``msvd`` (as converted, docs/video.md).
        vocab_path: default ``<data_root>/vocab/<data_name>_vocab.json``.
        dev_max_clips: validation keeps the first this many dev clips (``None``: all).
        batch_size: 256 in LNC's video experiments (appendix D.2).
        Other arguments: as :class:`~ncl.data.datamodule.PrecompDataModule` (``test_split`` is
        ``test``; the video splits are ``train``, ``dev``, ``test``).
    """

    def __init__(self, data_root: str, data_name: str = "msrvtt", vocab_path: str | None = None,
                 batch_size: int = 256, eval_batch_size: int = 256, num_workers: int = 0,
                 noise_type: NoiseType = "none", noise_ratio: float = 0.0,
                 noise_file: str | None = None, noise_seed: int = 0,
                 dev_max_clips: int | None = None, test_protocols: Sequence[Protocol] = ("1k",),
                 nan_check: NanCheck = "sample", augment: Augmentation | None = None,
                 per_device_batch: bool = False) -> None:
        folder = Path(data_root) / data_name
        if not folder.is_dir():  # the image path's message points at the image datasets' README
            raise DataError(f"video dataset folder not found: {folder} (data_root={data_root!r}, "
                            f"data_name={data_name!r}); docs/video.md describes the layout and "
                            f"python -m ncl.datatools.video_convert writes it")
        vocab = Path(vocab_path) if vocab_path else Path(data_root) / "vocab" / f"{data_name}_vocab.json"
        if not vocab.is_file():
            raise DataError(f"vocabulary file not found: {vocab}; pass data.vocab_path or write it "
                            f"with python -m ncl.datatools.video_convert (docs/video.md)")
        super().__init__(data_root=data_root, data_name=data_name, vocab_path=vocab_path,
                         batch_size=batch_size, eval_batch_size=eval_batch_size,
                         num_workers=num_workers, noise_type=noise_type, noise_ratio=noise_ratio,
                         noise_file=noise_file, noise_seed=noise_seed,
                         dev_max_images=dev_max_clips, val_split="dev", test_split="test",
                         test_protocols=test_protocols, nan_check=nan_check, augment=augment,
                         real_noise=False, per_device_batch=per_device_batch)
        self.experts = read_manifest(self.data_dir)  # fail at construction, not in setup

    def _load(self, split: str, max_images: int | None = None) -> PrecompSplit:
        return load_video_split(self.data_dir, split, self.vocab, max_images, self.nan_check)

    def nan_check_coverage(self) -> tuple[int, int] | None:
        """Video splits are small: any ``nan_check`` but ``off`` checks every clip."""
        if self.train_split is None:
            return None
        total = self.train_split.n_images
        return (0 if self.nan_check == "off" else total), total


class VideoSyntheticDataModule(VideoDataModule):
    """:class:`VideoDataModule` over generated video-like data (:mod:`ncl.data.video_synthetic`).

    Written once in the video layout under ``<cache_dir>/video-<preset>-<hash>/`` and reused.

    Args:
        preset: ``tiny`` (tests, seconds) or ``quickstart`` (the synthetic video table).
        cache_dir: default ``$XDG_CACHE_HOME/ncl`` or ``~/.cache/ncl``.
        synthetic_seed: seed of the generator.
        n_train, n_dev, n_test, captions_per_clip: overrides of the preset's sizes.
        Other arguments: as :class:`VideoDataModule`.
    """

    def __init__(self, preset: Literal["tiny", "quickstart"] = "quickstart",
                 cache_dir: str | None = None, synthetic_seed: int = 0,
                 n_train: int | None = None, n_dev: int | None = None, n_test: int | None = None,
                 captions_per_clip: int | None = None, batch_size: int = 256,
                 eval_batch_size: int = 256, num_workers: int = 0, noise_type: NoiseType = "none",
                 noise_ratio: float = 0.0, noise_file: str | None = None, noise_seed: int = 0,
                 dev_max_clips: int | None = None, test_protocols: Sequence[Protocol] = ("1k",),
                 nan_check: NanCheck = "sample", augment: Augmentation | None = None,
                 per_device_batch: bool = False) -> None:
        from ncl.data.video_synthetic import cached_dataset

        overrides: dict[str, Any] = {k: v for k, v in dict(
            n_train=n_train, n_dev=n_dev, n_test=n_test, captions_per_clip=captions_per_clip,
            seed=synthetic_seed).items() if v is not None}
        root, self.spec = cached_dataset(preset, cache_dir, **overrides)
        super().__init__(data_root=str(root), data_name="synthetic_video", vocab_path=None,
                         batch_size=batch_size, eval_batch_size=eval_batch_size,
                         num_workers=num_workers, noise_type=noise_type, noise_ratio=noise_ratio,
                         noise_file=noise_file, noise_seed=noise_seed, dev_max_clips=dev_max_clips,
                         test_protocols=test_protocols, nan_check=nan_check, augment=augment,
                         per_device_batch=per_device_batch)
