"""Reading official NCR/RCL/CRCL/DECL checkpoints into :class:`ncl.models.SGRAF` (spec 3.4).

An official checkpoint is a ``torch.save``'d dict holding each network as a list of three
state dicts ``[img_enc, txt_enc, sim_enc]`` and the training options as a pickled
``argparse.Namespace`` under ``"opt"``. It is read with PyTorch's restricted
(``weights_only``) unpickler with only ``argparse.Namespace`` allow-listed, so no code of the
official repositories is imported and no arbitrary object can be constructed.
"""

from __future__ import annotations

import argparse
import pickle
import warnings
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor, nn

from ncl.models.sgraf import SGRAF

PARTS = ("img_enc", "txt_enc", "sim_enc")
EMBED_KEY = "embed.weight"


def read_official_checkpoint(path: str | Path) -> dict:
    """Load an official ``.pth.tar`` checkpoint onto the CPU, safely.

    Args:
        path: Checkpoint file.

    Returns:
        The checkpoint dict (``epoch``, ``model`` or ``model_A``/``model_B``, ``opt``, ...).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: The file holds something other than tensors, plain containers and an
            ``argparse.Namespace``, or is not a dict.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path: no checkpoint file at {path}")
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise ValueError(f"path: {path} is not a checkpoint the restricted unpickler accepts "
                         f"(only tensors, containers and argparse.Namespace): {err}") from err
    if not isinstance(ckpt, dict):
        raise ValueError(f"path: {path} holds a {type(ckpt).__name__}, expected a dict")
    return ckpt


def official_state_dicts(ckpt: Mapping) -> list[list[dict]]:
    """The networks of a checkpoint, each as ``[img_enc, txt_enc, sim_enc]`` state dicts.

    Args:
        ckpt: A dict from :func:`read_official_checkpoint`.

    Returns:
        ``[model_A, model_B]`` for NCR, ``[model]`` for RCL, CRCL and DECL.

    Raises:
        ValueError: Neither ``model`` nor both ``model_A``/``model_B`` are present, or an
            entry is not a list of three state dicts.
    """
    if "model_A" in ckpt or "model_B" in ckpt:
        names = ["model_A", "model_B"]
    elif "model" in ckpt:
        names = ["model"]
    else:
        raise ValueError("ckpt: expected a 'model' entry (RCL/CRCL/DECL) or 'model_A' and "
                         f"'model_B' (NCR); found keys {sorted(map(str, ckpt))}")
    networks = []
    for name in names:
        if name not in ckpt:
            raise ValueError(f"ckpt: NCR checkpoint lacks '{name}'")
        entry = ckpt[name]
        if (not isinstance(entry, list | tuple) or len(entry) != 3
                or not all(isinstance(sd, Mapping) for sd in entry)):
            raise ValueError(f"ckpt['{name}'] must be a list of 3 state dicts "
                             "[img_enc, txt_enc, sim_enc]")
        networks.append([dict(sd) for sd in entry])
    return networks


def official_options(ckpt: Mapping) -> dict:
    """The pickled training options as a plain dict (``module_name``, ``data_name``, ...).

    Raises:
        ValueError: ``opt`` is missing or neither a Namespace nor a mapping.
    """
    opt = ckpt.get("opt")
    if isinstance(opt, argparse.Namespace):
        return dict(vars(opt))
    if isinstance(opt, Mapping):
        return dict(opt)
    raise ValueError(f"ckpt['opt'] must be an argparse.Namespace, got {type(opt).__name__}")


def load_official_into(model: SGRAF, three_state_dicts: list[dict]) -> None:
    """Copy one official network (three state dicts) into ``model``.

    Everything is checked before anything is copied. The only tolerated differences: a
    checkpoint without the ``<mask>`` embedding row loaded into a model with it (the first
    ``V`` rows are copied, the ``<mask>`` row keeps its initialisation, and a warning says
    so), missing BatchNorm ``num_batches_tracked`` counters, and a DataParallel ``module.``
    prefix.

    Args:
        model: The target, built with matching options.
        three_state_dicts: ``[img_enc, txt_enc, sim_enc]`` state dicts.

    Raises:
        ValueError: Wrong number of state dicts, missing or unexpected keys (named), or the
            first shape mismatch (tensor and both shapes named).
    """
    if len(three_state_dicts) != 3:
        raise ValueError("three_state_dicts must hold 3 state dicts [img_enc, txt_enc, "
                         f"sim_enc], got {len(three_state_dicts)}")
    prepared = []
    for part, state in zip(PARTS, three_state_dicts):
        prepared.append(_prepare(part, getattr(model, part), _strip_prefix(state)))
    for part, state in zip(PARTS, prepared):
        getattr(model, part).load_state_dict(state, strict=True)


def _strip_prefix(state: Mapping) -> dict:
    """Drop a ``module.`` prefix that ``nn.DataParallel`` adds to every key."""
    if state and all(str(k).startswith("module.") for k in state):
        return {k[len("module."):]: v for k, v in state.items()}
    return dict(state)


def _prepare(part: str, target: nn.Module, state: dict) -> dict[str, Tensor]:
    """Check ``state`` against ``target``'s and return a dict ready for strict loading."""
    own = target.state_dict()
    missing = [k for k in own if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        raise ValueError(f"{part}: state dict does not match the model: missing keys "
                         f"{missing}, unexpected keys {unexpected}")
    ready = {}
    for key, mine in own.items():
        if key not in state:  # a num_batches_tracked counter
            ready[key] = mine
            continue
        theirs = state[key]
        if not isinstance(theirs, Tensor):
            raise ValueError(f"{part}.{key}: expected a tensor, got {type(theirs).__name__}")
        if theirs.shape == mine.shape:
            ready[key] = theirs
        elif part == "txt_enc" and key == EMBED_KEY and _one_row_short(theirs, mine):
            ready[key] = _pad_mask_row(theirs, mine)
        else:
            hint = ""
            if part == "txt_enc" and key == EMBED_KEY and _one_row_short(mine, theirs):
                hint = " (the checkpoint has a <mask> row: build SGRAF with add_mask_token=True)"
            raise ValueError(f"{part}.{key}: checkpoint shape {tuple(theirs.shape)} does not "
                             f"match model shape {tuple(mine.shape)}{hint}")
    return ready


def _one_row_short(small: Tensor, big: Tensor) -> bool:
    """True if ``small`` equals ``big`` with its last row removed, shape-wise."""
    return (small.dim() == 2 and small.shape[1] == big.shape[1]
            and small.shape[0] + 1 == big.shape[0])


def _pad_mask_row(theirs: Tensor, mine: Tensor) -> Tensor:
    """Checkpoint rows ``0..V-1`` plus the model's own ``<mask>`` row ``V``."""
    warnings.warn(f"txt_enc.{EMBED_KEY}: checkpoint has {theirs.shape[0]} rows and the model "
                  f"{mine.shape[0]}; copied the first {theirs.shape[0]} rows, the <mask> row "
                  "keeps its initialisation", stacklevel=4)
    merged = mine.clone()
    merged[: theirs.shape[0]] = theirs.to(merged.dtype)
    return merged
