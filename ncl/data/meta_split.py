"""DataModules with a clean **meta split**, for methods that learn from a small set of
trusted pairs (MSCN, Han et al. CVPR 2023; its README at hhc1997/MSCN 01febc2 says how the
meta sets were made).

A meta split is drawn once, from ``data.meta_seed`` (numpy's ``default_rng``), in one of
three ways (``data.meta_source``):

* ``dev``: ``data.meta_size`` dev captions drawn without replacement, each with its own
  image (F30K: 2,900 of the dev pairs, the README's ``np.random.choice``). The validation
  split is the dev split, so these pairs are also validated on, as in the official code.
* ``dev+train``: the ``dev`` draw (``meta_size: null`` takes every dev caption) plus
  ``data.meta_train_size`` training images, each with one of its captions drawn at random;
  every caption of those images leaves the training set (:attr:`MetaSet.train_removed`;
  COCO: the 5,000 dev pairs plus 6,328 training images). The official code removes them
  before drawing the noise; here the noise is drawn over the whole training split and the
  removed captions are left out of training.
* ``files``: ``meta_ims.npy`` and ``meta_caps.txt`` (or ``.tsv``) in the dataset folder, one
  caption per image or ``im_div`` per image as the other splits (CC152K: the meta set the
  authors distribute). Missing files are one ``DataError``.

The method adds the non-corresponding meta pairs itself (:func:`draw_negatives`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from ncl.data.datamodule import PrecompDataModule, SyntheticDataModule
from ncl.data.precomp import PrecompSplit, encode_all, features_path, open_features, read_captions
from ncl.errors import ConfigError, DataError

MetaSource = Literal["dev", "dev+train", "files"]


@dataclass(frozen=True, eq=False)
class MetaSet:
    """The clean meta pairs: pair ``m`` is caption ``captions[m]`` with image ``images[m]`` of
    ``splits[source[m]]``.

    Attributes:
        splits: the splits the pairs come from (dev, train or the meta files).
        source, captions, images: ``(M,)`` int64 each.
        train_removed: ``(N_train,)`` bool, training captions left out of training (the
            ``dev+train`` source), or ``None``.
    """

    splits: tuple[PrecompSplit, ...]
    source: np.ndarray
    captions: np.ndarray
    images: np.ndarray
    train_removed: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.captions.shape[0])


def draw_dev_pairs(n_captions: int, im_div: int, count: int | None, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``count`` captions of a split drawn without replacement (``None``: all, in order) and
    their own images ``caption // im_div``: ``((M,), (M,))``."""
    if count is None:
        captions = np.arange(n_captions, dtype=np.int64)
    else:
        if not 0 < count <= n_captions:
            raise ConfigError(f"data.meta_size must lie in [1, {n_captions}] (the dev captions), "
                              f"got {count}")
        captions = np.sort(rng.choice(n_captions, count, replace=False)).astype(np.int64)
    return captions, captions // im_div


def draw_train_pairs(n_images: int, im_div: int, count: int, rng: np.random.Generator
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``count`` training images drawn without replacement, one caption of each drawn at
    random, and the ``(n_images * im_div,)`` mask of the captions of those images:
    ``(captions (M,), images (M,), removed)``."""
    if not 0 < count < n_images:
        raise ConfigError(f"data.meta_train_size must lie in [1, {n_images - 1}], got {count}")
    images = np.sort(rng.choice(n_images, count, replace=False)).astype(np.int64)
    captions = images * im_div + rng.integers(0, im_div, count)
    removed = np.zeros(n_images * im_div, dtype=bool)
    removed[(images[:, None] * im_div + np.arange(im_div)).ravel()] = True
    return captions.astype(np.int64), images, removed


def draw_negatives(captions: np.ndarray, written_for: np.ndarray, images: np.ndarray, count: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Non-corresponding pairs (the official ``get_add_non_correspondence_idx``): ``count``
    captions drawn without replacement from ``captions``, each with an image drawn uniformly
    from ``images`` that is not the one it was written for (``written_for[c]``). The official
    code redraws all images until none is a caption's own; redrawing only those that are gives
    the same distribution (the draws are independent).

    Returns:
        ``(captions (count,), images (count,))``, int64.
    """
    if count > len(captions):
        raise ConfigError(f"the meta set ({count} pairs) is larger than the training captions "
                          f"it draws negatives from ({len(captions)})")
    if len(np.unique(images)) < 2:
        raise ConfigError("non-corresponding meta pairs need at least two training images")
    chosen = rng.choice(captions, count, replace=False).astype(np.int64)
    own = written_for[chosen]
    paired = rng.choice(images, count, replace=True).astype(np.int64)
    clash = paired == own
    while clash.any():
        paired[clash] = rng.choice(images, int(clash.sum()), replace=True)
        clash = paired == own
    return chosen, paired


class MetaPairs(Dataset):
    """Meta pairs ``0 .. M-1`` (label 1), then ``count`` non-corresponding training pairs
    (label 0). Items as :class:`~ncl.data.datasets.PairDataset`'s, ``index`` the item number;
    the label of item ``k`` is ``k < M`` (:meth:`labels`)."""

    def __init__(self, meta: MetaSet, train: PrecompSplit, neg_captions: np.ndarray,
                 neg_images: np.ndarray) -> None:
        self.meta, self.train = meta, train
        self.neg_captions, self.neg_images = neg_captions, neg_images

    def __len__(self) -> int:
        return len(self.meta) + len(self.neg_captions)

    def labels(self, index: torch.Tensor) -> torch.Tensor:
        """``(B,)`` float labels of the items ``index``: 1 for a meta pair, 0 for a negative."""
        return (index < len(self.meta)).float()

    def __getitem__(self, k: int) -> dict[str, object]:
        k = int(k)
        m = len(self.meta)
        if k < m:
            split = self.meta.splits[int(self.meta.source[k])]
            caption, image = int(self.meta.captions[k]), int(self.meta.images[k])
        else:
            split, caption, image = self.train, int(self.neg_captions[k - m]), int(self.neg_images[k - m])
        return {"image": torch.from_numpy(np.array(split.features[image], dtype=np.float32)),
                "tokens": torch.from_numpy(split.tokens(caption).astype(np.int64)), "index": k}


class MetaSplit:
    """The meta-split options and :meth:`meta_set` of a :class:`PrecompDataModule` subclass."""

    meta_source: MetaSource
    meta_size: int | None
    meta_train_size: int
    meta_seed: int
    _meta: MetaSet | None = None
    #: The tests' tiny stand-in for a config with a meta split (tests/config_override.py):
    #: the synthetic twin with a meta set of a few dev pairs.
    TINY_COUNTERPART = ("ncl.data.meta_split.MetaSplitSyntheticDataModule",
                        {"meta_source": "dev", "meta_size": 6})

    def _init_meta(self, meta_source: str, meta_size: int | None, meta_train_size: int,
                   meta_seed: int) -> None:
        if meta_source not in ("dev", "dev+train", "files"):
            raise ConfigError(f"data.meta_source must be 'dev', 'dev+train' or 'files', got {meta_source!r}")
        if meta_source == "dev" and meta_size is None:
            raise ConfigError("data.meta_source=dev needs data.meta_size (how many dev pairs)")
        if meta_source == "dev+train" and meta_train_size < 1:
            raise ConfigError("data.meta_source=dev+train needs data.meta_train_size >= 1")
        if meta_source != "dev+train" and meta_train_size:
            raise ConfigError(f"data.meta_train_size is for meta_source=dev+train, not {meta_source}")
        self.meta_source, self.meta_size = meta_source, meta_size
        self.meta_train_size, self.meta_seed = meta_train_size, meta_seed
        if meta_source == "files":
            self._check_meta_files()

    def _check_meta_files(self) -> None:
        data_dir = self.data_dir  # type: ignore[attr-defined]
        caps = [data_dir / "meta_caps.txt", data_dir / "meta_caps.tsv"]
        if not features_path(data_dir, "meta").is_file() or not any(p.is_file() for p in caps):
            raise DataError(f"data.meta_source=files needs {features_path(data_dir, 'meta')} and "
                            f"{caps[0]} (or {caps[1].name}): the meta set (CC152K: the one the "
                            f"MSCN authors distribute, see docs/methods/mscn.md)")

    def _read_meta_files(self) -> PrecompSplit:
        data_dir = self.data_dir  # type: ignore[attr-defined]
        path = features_path(data_dir, "meta")
        feats = open_features(path, 0)
        captions, cap_path = read_captions(data_dir, "meta")
        if not captions or len(captions) % feats.shape[0]:
            raise DataError(f"{cap_path} holds {len(captions)} captions, not a whole multiple of "
                            f"the {feats.shape[0]} images in {path}")
        ids, offsets = encode_all(captions, self.vocab)  # type: ignore[attr-defined]
        return PrecompSplit("meta", feats, captions, len(captions) // feats.shape[0], ids,
                            offsets, cap_path, path)

    def meta_set(self) -> MetaSet:
        """The meta split (drawn or read at the first call, after ``setup("fit")``)."""
        if self._meta is None:
            self._meta = self._build_meta()
        return self._meta

    def _build_meta(self) -> MetaSet:
        rng = np.random.default_rng(self.meta_seed)
        if self.meta_source == "files":
            split = self._read_meta_files()
            caps = np.arange(split.n_captions, dtype=np.int64)
            return MetaSet((split,), np.zeros_like(caps), caps, caps // split.im_div)
        dev = self._load("dev")  # type: ignore[attr-defined]  # all of it, not dev_max_images
        caps, imgs = draw_dev_pairs(dev.n_captions, dev.im_div, self.meta_size, rng)
        if self.meta_source == "dev":
            return MetaSet((dev,), np.zeros_like(caps), caps, imgs)
        train = self.train_pairs().split  # type: ignore[attr-defined]
        t_caps, t_imgs, removed = draw_train_pairs(train.n_images, train.im_div,
                                                   self.meta_train_size, rng)
        source = np.concatenate([np.zeros_like(caps), np.ones_like(t_caps)])
        return MetaSet((dev, train), source, np.concatenate([caps, t_caps]),
                       np.concatenate([imgs, t_imgs]), removed)


class MetaSplitPrecompDataModule(MetaSplit, PrecompDataModule):
    """:class:`~ncl.data.datamodule.PrecompDataModule` with a meta split (module docstring).

    Args:
        meta_source: ``dev`` (F30K), ``dev+train`` (COCO) or ``files`` (CC152K).
        meta_size: dev pairs in the meta set (F30K 2,900; ``null`` with ``dev+train``: all).
        meta_train_size: training images moved to the meta set (COCO 6,328).
        meta_seed: seed of the draws.
        Other arguments: as :class:`~ncl.data.datamodule.PrecompDataModule`.
    """

    def __init__(self, *, meta_source: MetaSource = "dev", meta_size: int | None = 2900,
                 meta_train_size: int = 0, meta_seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._init_meta(meta_source, meta_size, meta_train_size, meta_seed)


class MetaSplitSyntheticDataModule(MetaSplit, SyntheticDataModule):
    """:class:`~ncl.data.datamodule.SyntheticDataModule` with a meta split drawn from the
    generated dev split (``meta_source: dev``) or from dev and train (``dev+train``).

    Args:
        meta_source, meta_size, meta_train_size, meta_seed: as
            :class:`MetaSplitPrecompDataModule` (default: 100 dev pairs).
        Other arguments: as :class:`~ncl.data.datamodule.SyntheticDataModule`.
    """

    def __init__(self, *, meta_source: MetaSource = "dev", meta_size: int | None = 100,
                 meta_train_size: int = 0, meta_seed: int = 0, **kwargs: Any) -> None:
        if meta_source == "files":
            raise ConfigError("data.meta_source=files reads files a synthetic dataset does not have; "
                              "use dev or dev+train")
        super().__init__(**kwargs)
        self._init_meta(meta_source, meta_size, meta_train_size, meta_seed)
