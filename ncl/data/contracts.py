"""What methods and callbacks may rely on in a DataModule: the :class:`RetrievalData` contract.

Methods and callbacks reach the data only through ``trainer.datamodule``. Everything they may
use is listed here, with when it is available; :class:`~ncl.data.datamodule.PrecompDataModule`
(and so :class:`~ncl.data.datamodule.SyntheticDataModule`) satisfies it. A DataModule of your
own (other features, video, a streaming source) works with every method when it provides the
same members; :func:`retrieval_data` turns a missing one into one clear error instead of an
``AttributeError`` deep inside a callback.

Lifecycle: members marked "after ``setup("fit")``" raise ``RuntimeError`` (or are ``None``)
before Lightning has called the DataModule's ``setup`` for that stage.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from torch.utils.data import Dataset

from ncl.errors import ConfigError


class _StaticProtocolMeta(type(Protocol)):  # type: ignore[misc]
    """``isinstance`` that looks members up without evaluating them (Python 3.12's rule).

    Python 3.11 checks a runtime protocol's data members with ``hasattr``, which *runs* a
    property: ``clean_mask`` raises ``RuntimeError`` before ``setup("fit")``, and that error
    would escape from ``isinstance``. ``inspect.getattr_static`` finds properties, instance
    attributes and methods without running anything.
    """

    def __instancecheck__(cls, instance: object) -> bool:
        if not getattr(cls, "_is_runtime_protocol", False):
            return super().__instancecheck__(instance)
        return not missing_members(instance, cls)


def protocol_members(protocol: type) -> list[str]:
    """The public members a protocol class declares (methods, properties, annotations)."""
    names = set(getattr(protocol, "__annotations__", {}))
    names.update(k for k in vars(protocol) if not k.startswith("_"))
    return sorted(n for n in names if not n.startswith("_"))


def missing_members(instance: object, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``instance`` lacks (a method set to ``None`` counts)."""
    missing = []
    for name in protocol_members(protocol):
        try:
            value = inspect.getattr_static(instance, name)
        except AttributeError:
            missing.append(name)
            continue
        if value is None and callable(getattr(protocol, name, None)):
            missing.append(name)
    return missing


@runtime_checkable
class RetrievalData(Protocol, metaclass=_StaticProtocolMeta):
    """The members of a DataModule that methods and callbacks may use; nothing else.

    Batches of the training loaders are dicts ``{images (B, R, D) float32, tokens (B, L)
    int64 zero-padded, lengths (B,) int64, index (B,) int64}`` and, when the batch's images
    have different region counts, ``image_lengths (B,) int64``
    (:func:`ncl.data.datasets.collate`).
    """

    batch_size: int
    """Training batch size (also the default of per-sample passes and of batch plans)."""

    num_workers: int
    """DataLoader worker processes; methods use it for the loaders they build themselves."""

    test_protocols: Sequence[str]
    """Test protocols, any of ``"1k"``, ``"5fold1k"``, ``"5k"`` (``ncl test``)."""

    data_dir: Path
    """Where the features live (for messages only)."""
    noise_ratio: float
    """Fraction of the training pairs the DataModule's synthetic noise re-pairs (0: none, also
    for data whose noise is real, CC152K). L2RM masks a caption's own image only when it is not
    0 (the official rule)."""

    val_data: Any
    """The validation split (``PrecompSplit``-like) after ``setup("fit")``/``"validate"``,
    else ``None``. Used: ``im_div`` (captions per image), ``n_images``, ``features``
    (``(N_img, R, D)``, indexable by image rows, to find NaN/Inf), ``feature_path`` and
    ``caption_path`` (messages)."""

    test_data: Any
    """The test split after ``setup("test")``, else ``None``; same members as ``val_data``."""

    @property
    def vocab_size(self) -> int:
        """V, rows of the vocabulary without ``<mask>``; known from construction (the CLI
        links it to ``model.init_args.vocab_size``). ``<mask>``, when used, is id V."""

    @property
    def clean_mask(self) -> np.ndarray:
        """``(N_cap,)`` bool ground-truth clean flag of every training caption, after
        ``setup("fit")``. Diagnostics and the clean-only oracle only, never a loss. A DataModule
        whose pairs are noisy already (CC152K) has no ground truth: it says so with the
        optional member ``clean_mask_known = False`` (see :func:`clean_mask_known`)."""

    def feature_shape(self) -> tuple[int, int]:
        """``(R, D)``: regions per image and feature size; callable before ``setup``."""

    def train_pairs(self) -> Dataset:
        """The noisy training pairs after ``setup("fit")``, never augmented: item ``c`` is
        ``{image (R, D) float32, tokens (L,) int64, index c}``, ``len`` = N_cap."""

    def train_images(self) -> tuple[np.ndarray, np.ndarray]:
        """``(paired, written_for)``, each ``(N_cap,)`` int64, after ``setup("fit")``: the image
        each training caption is paired with (the noisy pairing ``train_pairs`` serves) and
        the image it was written for (its ground truth; diagnostics only, and only when
        :func:`clean_mask_known`)."""

    def use_train_plan(self, plan: Callable[[Dataset], Iterable] | None) -> None:
        """Let the method build the training loader: ``train_dataloader()`` then returns
        ``plan(train_pairs())``; ``None`` restores the default loader."""


def clean_mask_known(datamodule: Any) -> bool:
    """Whether ``datamodule.clean_mask`` is the ground truth.

    ``clean_mask_known`` is optional (not a :class:`RetrievalData` member, so DataModules
    written before it stay valid): without it the mask is taken as the truth, which holds for
    synthetic noise injected into clean data.
    """
    return bool(getattr(datamodule, "clean_mask_known", True))


def retrieval_data(trainer: Any, needed_by: str = "this method") -> RetrievalData:
    """The trainer's DataModule, checked against :class:`RetrievalData`.

    Args:
        trainer: a Lightning ``Trainer`` (anything with a ``datamodule`` attribute).
        needed_by: who needs it, for the message (e.g. ``"NCR/LNC"``).

    Raises:
        ConfigError: naming the DataModule's class and the members it lacks.
    """
    dm = getattr(trainer, "datamodule", None)
    if isinstance(dm, RetrievalData):
        return dm
    got = "no DataModule (dataloaders passed directly)" if dm is None else type(dm).__name__
    lacks = "" if dm is None else f", which lacks {', '.join(missing_members(dm, RetrievalData))}"
    raise ConfigError(f"{needed_by} needs an ncl DataModule (ncl.data.contracts.RetrievalData, "
                      f"e.g. data: class_path: ncl.data.datamodule.PrecompDataModule); got "
                      f"{got}{lacks}")


def loaded_splits(datamodule: Any) -> list[Any]:
    """The splits a DataModule has loaded (training, validation, test, prediction), each once:
    those with ``features`` of shape ``(N, R, D)``."""
    found: list[Any] = []
    for attr in ("train_split", "val_data", "test_data", "predict_data"):
        split = getattr(datamodule, attr, None)
        shape = getattr(getattr(split, "features", None), "shape", None)
        if shape is not None and len(shape) == 3 and not any(split is seen for seen in found):
            found.append(split)
    return found


def _split_shapes(splits: Sequence[Any]) -> str:
    """``"train (60, 10, 16), dev (30, 6, 16)"`` for a message."""
    return ", ".join(f"{getattr(s, 'name', '?')} {tuple(int(n) for n in s.features.shape)}"
                     for s in splits)


def check_features_fit(datamodule: Any, nets: dict[str, Any]) -> None:
    """Raise one ConfigError when a split's region count or feature size does not fit a
    network's ``num_regions``/``img_dim`` (read when the backbone has them).

    Every split the DataModule has loaded is checked (training and validation in ``fit``):
    a training file of another shape than the validation file used to pass this check and
    end in a traceback at the first step. A DataModule without loaded splits is checked
    through its ``feature_shape()``.

    Args:
        datamodule: the trainer's DataModule; anything but a :class:`RetrievalData` is skipped.
        nets: network name -> network.
    """
    if not isinstance(datamodule, RetrievalData):  # no ncl DataModule: nothing to check against
        return
    splits = loaded_splits(datamodule)
    if not splits:
        regions, dim = datamodule.feature_shape()
        for name, net in nets.items():
            want = (getattr(net, "num_regions", regions), getattr(net, "img_dim", dim))
            if want != (regions, dim):
                raise ConfigError(
                    f"the features in {datamodule.data_dir} have {regions} regions x {dim} dims, "
                    f"but the backbone ({name}) is configured for {want[0]} x {want[1]}; set "
                    f"model.backbone.init_args.num_regions={regions} and img_dim={dim}")
        return
    for split in splits:
        _, regions, dim = (int(n) for n in split.features.shape)
        for name, net in nets.items():
            want = (getattr(net, "num_regions", regions), getattr(net, "img_dim", dim))
            if want == (regions, dim):
                continue
            path = getattr(split, "feature_path", None) or datamodule.data_dir
            others = [s for s in splits if s is not split]
            also = f"; the loaded splits: {_split_shapes(splits)}" if others else ""
            raise ConfigError(
                f"the {getattr(split, 'name', '?')} features {path} have shape "
                f"{tuple(int(n) for n in split.features.shape)} ({regions} regions x {dim} "
                f"dims), but the backbone ({name}) expects {want[0]} regions x {want[1]} dims "
                f"(model.backbone.init_args.num_regions, img_dim){also}; every split must "
                f"match the backbone")
