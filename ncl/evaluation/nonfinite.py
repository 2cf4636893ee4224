"""NaN/Inf diagnosis: one clear error that says whether the data or the weights are at fault.

Pure functions (no Lightning): :class:`EvalSite` names what is being evaluated (the split and
its files, the method), :func:`check_finite_embeddings` / :func:`check_finite_similarities`
raise at evaluation, :func:`diverged_message` is the line of a NaN/Inf training loss
(:func:`check_finite_loss`, from :meth:`ncl.methods.base.RetrievalMethod.on_before_backward`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ncl.data.precomp import nonfinite_rows as nonfinite_feature_block
from ncl.errors import DataError, TrainingError
from ncl.training.distributed import any_rank


@dataclass(frozen=True)
class EvalSite:
    """What an evaluation runs on, for messages.

    Attributes:
        label: ``"validation"`` or ``"test"``.
        split: the :class:`~ncl.data.precomp.PrecompSplit` evaluated (its ``features``,
            ``feature_path``, ``caption_path``, ``n_images``), or ``None`` when unknown.
        owner: the method's class name.
    """

    label: str = "validation"
    split: Any = None
    owner: str = "RetrievalMethod"

    @classmethod
    def of(cls, trainer: Any, owner: str) -> EvalSite:
        """The split a (Lightning) ``trainer`` is evaluating: its datamodule's ``test_data``
        when testing, else ``val_data``; ``trainer`` may be ``None``."""
        testing = bool(getattr(trainer, "testing", False))
        split = getattr(getattr(trainer, "datamodule", None), "test_data" if testing else "val_data", None)
        return cls("test" if testing else "validation", split, owner)

    def files(self) -> str:
        """``the validation split (<features>, <captions>)``, or ``the validation split``."""
        if self.split is None or getattr(self.split, "feature_path", None) is None:
            return f"the {self.label} split"
        return f"the {self.label} split ({self.split.feature_path}, {self.split.caption_path})"


def nonfinite_tensor_rows(values: Tensor, lengths: Tensor | None = None, chunk: int = 1024) -> Tensor:
    """Indices of the rows of ``values`` holding NaN/Inf, in row blocks (bounded memory).

    Args:
        values: ``(N, ...)``; with ``lengths``, ``(N, L, E)`` padded.
        lengths: ``(N,)``; positions ``>= lengths[i]`` of row ``i`` are ignored (padding).
        chunk: rows per block.

    Returns:
        ``(n_bad,)`` int64 row indices on the CPU, ascending.
    """
    bad = []
    for start in range(0, values.shape[0], chunk):
        block = ~torch.isfinite(values[start:start + chunk])
        if lengths is not None:
            steps = torch.arange(block.shape[1], device=block.device)
            block &= (steps[None, :] < lengths[start:start + chunk, None].to(block.device))[..., None]
        bad.append(block.flatten(1).any(dim=1).nonzero().flatten().cpu() + start)
    return torch.cat(bad) if bad else torch.zeros(0, dtype=torch.long)


def nonfinite_feature_rows(features: Any, rows: Tensor, chunk: int = 256) -> list[int]:
    """Those of ``rows`` whose features (a memory map) hold NaN/Inf, read a block at a time."""
    rows_list = sorted(int(r) for r in rows if int(r) < len(features))
    bad: list[int] = []
    for start in range(0, len(rows_list), chunk):
        block = rows_list[start:start + chunk]
        bad.extend(block[i] for i in nonfinite_feature_block(features[block]))
    return bad


def check_finite_embeddings(site: EvalSite, name: str, img: Tensor, cap: Tensor, lengths: Tensor) -> None:
    """Raise one clear error when network ``name``'s evaluation embeddings hold NaN/Inf.

    Images with non-finite embeddings are looked up in the split's feature file: when their
    features hold NaN/Inf the data is at fault (:class:`DataError` naming the file and the
    images), otherwise the weights are (:class:`TrainingError`).

    Args:
        site: the split and method, for the message.
        name: network name, for the message.
        img: ``(N_img, R, E)`` image embeddings in dataset order (or pooled ``(N_img, E)``).
        cap: ``(N_cap, L, E)`` caption embeddings (or pooled ``(N_cap, E)``).
        lengths: ``(N_cap,)`` caption lengths; padding beyond them is not checked.
    """
    bad_img = nonfinite_tensor_rows(img)
    bad_cap = nonfinite_tensor_rows(cap, lengths if cap.dim() == 3 else None)
    if not len(bad_img) and not len(bad_cap):
        return
    split = site.split
    if len(bad_img) and split is not None:
        bad_feat = nonfinite_feature_rows(split.features, bad_img)
        if len(bad_feat):
            raise DataError(
                f"the {site.label} features in {split.feature_path} hold NaN or Inf in "
                f"{len(bad_feat)} of {split.n_images} images ({_images(bad_feat)}), so "
                f"their embeddings are NaN/Inf; repair or remove these images "
                f"(--data.nan_check full scans every feature file before training)")
    raise TrainingError(
        f"network {name} ({site.owner}) gives NaN/Inf embeddings on {site.files()} for "
        f"{len(bad_img)} of {img.shape[0]} images and {len(bad_cap)} of {cap.shape[0]} "
        f"captions although the features are finite: its weights are NaN/Inf (a diverged "
        f"run or a broken checkpoint; check the learning rate)")


def check_finite_similarities(site: EvalSite, name: str, sims: Tensor) -> None:
    """Raise one clear error when network ``name``'s ``(N_img, N_cap)`` similarities hold
    NaN/Inf although its embeddings are finite (an overflow in the similarity head)."""
    bad = nonfinite_tensor_rows(sims)
    if len(bad):
        raise TrainingError(
            f"network {name} ({site.owner}) gives NaN/Inf similarities on {site.files()} for "
            f"{len(bad)} of {sims.shape[0]} images ({_images(bad)}) although their embeddings "
            f"are finite: the similarity head's weights are NaN/Inf or overflow (check the "
            f"learning rate)")


def check_finite_loss(loss: Tensor, trainer: Any, owner: str, global_step: int, epoch: int) -> None:
    """Raise :class:`TrainingError` when the training ``loss`` is NaN/Inf on any rank.

    Called before the backward pass, so no optimiser step (and no checkpoint) ever holds a
    diverged step. Under DDP (``trainer.world_size > 1``) the ranks agree through one
    all-reduce of the flag (:func:`any_rank`), so none is left waiting in the backward pass's
    collectives.

    The decision reaches the host with one device sync per backward (the ``bool`` below):
    the price of stopping *before* the step. Checking a device flag every k steps instead
    would let a diverged step update the weights and the optimiser state first.
    """
    bad = ~torch.isfinite(loss.detach()).all()  # 0-dim bool on the loss's device
    if trainer is not None and trainer.world_size > 1:
        bad = any_rank(bad)
    if bool(bad):
        local_bad = not bool(torch.isfinite(loss.detach()).all())  # only on the way out
        raise TrainingError(diverged_message(owner, loss, global_step, epoch, local_bad,
                                             unchecked_training_features(trainer)))


def unchecked_training_features(trainer: Any) -> str | None:
    """``"<train_ims.npy> (2 of 60 images checked)"`` when not every training image was checked
    for NaN/Inf before training (``data.nan_check`` ``sample`` or ``off``), else ``None``
    (also for a DataModule that does not say: no ``nan_check_coverage``)."""
    datamodule = getattr(trainer, "datamodule", None)
    coverage = getattr(datamodule, "nan_check_coverage", None)
    counts = coverage() if callable(coverage) else None
    if counts is None or counts[0] >= counts[1]:
        return None
    split = getattr(datamodule, "train_split", None)
    path = getattr(split, "feature_path", None) or getattr(datamodule, "data_dir", "the training data")
    return f"{path} ({counts[0]} of {counts[1]} images checked)"


def diverged_message(owner: str, loss: Tensor, global_step: int, epoch: int, local_bad: bool,
                     unchecked: str | None = None) -> str:
    """The one-line message of a NaN/Inf training loss (``local_bad``: this rank's own loss
    is non-finite; otherwise another rank's was).

    ``unchecked`` names the training features when only a sample of them was checked for
    NaN/Inf (:func:`unchecked_training_features`): a NaN image outside the sample is then the
    likelier cause, so the message points at the full data check before the learning rate.
    """
    what = ("NaN" if bool(torch.isnan(loss.detach()).any()) else "Inf") if local_bad else \
        "NaN or Inf on another rank"
    loss_at = f"the loss of {owner} is {what} at global step {global_step} (epoch {epoch})"
    no_checkpoint = "stopped before the backward pass, so no checkpoint holds this step"
    if unchecked is not None:
        return (f"{loss_at}, and the training features were only partly checked for NaN/Inf: "
                f"{unchecked}. Check the data first: run again with --data.nan_check full, which "
                f"scans every image and names those with NaN/Inf; if it finds none, training "
                f"diverged: check the learning rate (model.init_args.optimizer); {no_checkpoint}")
    return (f"training diverged: {loss_at}; {no_checkpoint}. Check the learning rate "
            f"(model.init_args.optimizer) and the features: --data.nan_check full scans every "
            f"feature file for NaN/Inf")


def _first(indices: Any, limit: int = 5) -> str:
    """``"3, 7, 9"`` or ``"3, 7, 9, 12, 15 (and 40 more)"``."""
    values = [int(i) for i in indices]
    more = f" (and {len(values) - limit} more)" if len(values) > limit else ""
    return ", ".join(str(v) for v in values[:limit]) + more


def _images(indices: Any) -> str:
    """``"image 3"`` or ``"images 3, 7"`` for a message."""
    return ("image " if len(indices) == 1 else "images ") + _first(indices)
