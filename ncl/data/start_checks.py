"""What a DataModule checks and says once, at the start of a fit, before the first step.

On rank 0 only (one line, not one per process): a noise file that contradicts
``noise_ratio``, the per-process meaning of ``batch_size`` under DDP, and a batch that holds
the whole training set (:mod:`ncl.data.batch_policy`); on every rank, an augmentation that
emits ``<mask>`` for a backbone that cannot embed it (an error). How much of the training
features was looked at for NaN/Inf (:meth:`StartChecks.nan_check_coverage`) lets a diverged
loss point at the data first.

:class:`StartChecks` is a part of :class:`ncl.data.datamodule.PrecompDataModule`.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from ncl.data.batch_policy import (
    available_bytes,
    batch_memory_error,
    batch_size_note,
    per_device_batch_note,
)
from ncl.data.noise import Noise, ratio_mismatch
from ncl.data.precomp import PrecompSplit
from ncl.errors import ConfigError, NclWarning


class StartChecks:
    """The start-of-fit checks of a DataModule (a mixin of
    :class:`~ncl.data.datamodule.PrecompDataModule`, which sets the attributes below)."""

    batch_size: int
    per_device_batch: bool
    noise: Noise | None
    noise_path: Path | None
    noise_ratio: float
    nan_check: str
    nan_check_samples: int
    train_split: PrecompSplit | None
    augment: Any
    vocab_size: int

    def _warn_at_start(self) -> None:
        """Rank 0, once per fit: a noise file that contradicts ``noise_ratio``, and the per-device
        meaning of ``batch_size`` under DDP."""
        trainer = getattr(self, "trainer", None)
        if trainer is not None and not trainer.is_global_zero:
            return
        if self.noise_path is not None and self.noise is not None:
            mismatch = ratio_mismatch(self.noise_path, self.noise.noise_rate, self.noise_ratio)
            if mismatch:
                warnings.warn(mismatch, NclWarning, stacklevel=2)
        world_size = int(getattr(trainer, "world_size", 1) or 1)
        note = per_device_batch_note(world_size, self.batch_size, self.per_device_batch)
        if note:
            warnings.warn(note, NclWarning, stacklevel=2)

    def nan_check_coverage(self) -> tuple[int, int] | None:
        """``(checked, total)`` training images looked at for NaN/Inf when the split was read
        (``None`` before ``setup("fit")``): a NaN loss points at the data first when
        ``checked < total`` (:func:`ncl.evaluation.nonfinite.diverged_message`)."""
        if self.train_split is None:
            return None
        total = self.train_split.n_images
        checked = {"full": total, "off": 0}.get(self.nan_check, min(self.nan_check_samples, total))
        return max(0, checked), total

    def _warn_one_batch(self) -> None:
        """Rank 0: warn when one batch holds the whole training set (a batch size meant for
        another dataset, or a tiny experiment): :func:`ncl.data.batch_policy.batch_size_note`;
        stop when its pairwise similarities cannot fit in free memory
        (:func:`ncl.data.batch_policy.batch_memory_error`), before the first batch is built."""
        trainer = getattr(self, "trainer", None)
        if self.train_split is None or (trainer is not None and not trainer.is_global_zero):
            return
        world_size = int(getattr(trainer, "world_size", 1) or 1)
        note = batch_size_note(self.batch_size, self.train_split.n_captions,
                               self.train_split.caption_path, world_size)
        if note:
            warnings.warn(note, NclWarning, stacklevel=2)
        module = getattr(trainer, "lightning_module", None)
        device = getattr(getattr(trainer, "strategy", None), "root_device", None)
        error = batch_memory_error(self.batch_size, self.train_split.n_captions,
                                   list(getattr(module, "nets", []) or []),
                                   available_bytes(device), world_size)
        if error:
            raise ConfigError(error)

    def _check_mask_token(self) -> None:
        """Stop before training when the augmentation emits ``<mask>`` (id V) but a network's
        word embedding has only V rows (a CRCL config without ``add_mask_token: true``)."""
        module = getattr(getattr(self, "trainer", None), "lightning_module", None)
        if self.augment is None or not self.augment.uses_mask_token or module is None:
            return
        for net in getattr(module, "nets", []):
            rows = getattr(net, "vocab_size", None)
            if isinstance(rows, int) and rows <= self.vocab_size:
                raise ConfigError(
                    f"data.augment masks caption tokens with <mask> (id {self.vocab_size}), but "
                    f"the backbone embeds only {rows} ids; set "
                    f"model.init_args.backbone.init_args.add_mask_token=true")
