"""Checkpoints that are never half-written.

Lightning's default ``TorchCheckpointIO`` serialises into memory and then writes the target
file in place: a run killed during that write (pre-emption, out of disk, Ctrl-C) leaves a
truncated ``last.ckpt`` where the previous good one used to be. :class:`AtomicCheckpointIO`
writes to a hidden temporary file beside the target and renames it over the target, so the
path always holds either the previous complete checkpoint or the new complete one.

The ``ncl`` command installs it on every Trainer that does not bring its own CheckpointIO
(see :class:`ncl.cli.app.NclCLI`); Python users pass ``Trainer(plugins=[AtomicCheckpointIO()])``.

Reading: :func:`check_backbone` and :func:`check_weights_fit` turn a checkpoint that does not
fit the config's model (another ``embed_size``, an SAF checkpoint under an SGR config) into one
error line naming the option or the weight and both values, before Lightning loads it.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.pytorch.plugins.io import TorchCheckpointIO
from torch.nn.parameter import is_lazy

from ncl.errors import ConfigError, NclWarning
from ncl.io import atomic_write
from ncl.runs.folders import read_checkpoint, run_dir_of
from ncl.runs.record import FREE, describe, differences, run_options


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` with write-to-temporary-then-rename for local paths.

    Remote paths (``s3://`` and other fsspec protocols) fall back to Lightning's own writer,
    since a rename is not atomic there anyway.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path,
                        storage_options: Any | None = None) -> None:
        if storage_options is not None or not _is_local_file_protocol(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        atomic_write(Path(path), lambda handle: torch.save(checkpoint, handle))


# ------------------------------------------------------- does a checkpoint fit the config?
#: Backbone options that change neither the weights nor the scores of a trained model.
EVAL_FREE = (*FREE, "model.init_args.backbone.init_args.dropout")
BACKBONE = "model.init_args.backbone."


def check_backbone(ckpt_path: Path, options: dict[str, Any]) -> None:
    """``ncl validate|test|predict --ckpt_path``: one :class:`ConfigError` naming each backbone
    option of the config (flattened ``options``) that differs from the run the checkpoint
    comes from (its ``config.yaml``).

    The method's own options stored in a checkpoint replace the config's (LightningCLI);
    the backbone is not stored there, and evaluating weights under another backbone is either
    a shape error or, worse (``no_imgnorm``, ``module_name``), other scores: so it is an error.
    """
    run_dir = run_dir_of(ckpt_path)
    run = run_options(run_dir)
    if run is None:
        return  # a checkpoint outside its run folder: check_weights_fit compares the weights
    diffs = [d for d in differences(run, options, (BACKBONE,)) if not d[0].startswith(EVAL_FREE)]
    if diffs:
        raise ConfigError(f"--ckpt_path {ckpt_path} was trained with other backbone options than "
                          f"this config's: {describe(diffs).replace('(now)', '(this config)')}; "
                          f"evaluate it with its run's backbone options ({run_dir / 'config.yaml'})")


#: The data options that make a split's noise: which pairs ``ncl predict`` ranks.
NOISE = ("data.class_path", "data.init_args.noise_")


def warn_other_noise(ckpt_path: Path, options: dict[str, Any]) -> None:
    """``ncl predict --ckpt_path``: one warning naming each noise option of the config (the
    DataModule, ``data.init_args.noise_*``) that differs from the run the checkpoint comes
    from. The table ranks the config's pairs; with other noise they are not the pairs the run
    trained on (allowed: ranking another draw is a question one may ask)."""
    run_dir = run_dir_of(ckpt_path)
    run = run_options(run_dir)
    diffs = differences(run, options, NOISE) if run is not None else []
    if diffs:
        warnings.warn(f"--ckpt_path {ckpt_path} was trained on other noise than this config's: "
                      f"{describe(diffs).replace('(now)', '(this config)')}; the table ranks this "
                      f"config's pairs (the run's: {run_dir / 'config.yaml'})", NclWarning, stacklevel=2)


def _more(names: list[str]) -> str:
    return names[0] + (f" (and {len(names) - 1} more)" if len(names) > 1 else "")


def check_weights_fit(model: torch.nn.Module, ckpt_path: str | Path) -> None:
    """One :class:`ConfigError` when a checkpoint's weights cannot be loaded into ``model``
    (shapes or names differ), instead of PyTorch's list of every mismatching tensor.

    Catches what the options cannot: a checkpoint copied out of its run folder, or a resume
    with ``--override_run`` that changed the backbone's shapes.
    """
    stored = read_checkpoint(Path(ckpt_path))["state_dict"]
    state = model.state_dict()
    # Lazy parameters (L2RM's cost network before its width is known) take the checkpoint's
    # shape when it is loaded: they can neither differ in shape nor be unexpected.
    own = {k: v for k, v in state.items() if not is_lazy(v)}
    shapes = [(k, list(stored[k].shape), list(v.shape)) for k, v in own.items()
              if k in stored and tuple(stored[k].shape) != tuple(v.shape)]
    strict = getattr(model, "strict_loading", True)
    missing = [k for k in own if k not in stored] if strict else []
    unexpected = [k for k in stored if k not in state] if strict else []
    parts = []
    if shapes:
        key, theirs, ours = shapes[0]
        parts.append(f"{key} has shape {theirs} in the checkpoint and {ours} in this config's model"
                     + (f" ({len(shapes)} weights differ in shape)" if len(shapes) > 1 else ""))
    if missing:
        parts.append(f"the checkpoint has no {_more(missing)}")
    if unexpected:
        parts.append(f"this config's model has no {_more(unexpected)}")
    if parts:
        raise ConfigError(f"--ckpt_path {ckpt_path} does not fit the model this config builds: "
                          f"{'; '.join(parts)}; it was trained with other {BACKBONE}init_args "
                          f"(embed_size, img_dim, word_dim, num_regions, module_name ...): pass "
                          f"those of its run")
