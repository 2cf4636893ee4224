"""Reading official NCR/RCL/CRCL/DECL checkpoints into :class:`ncl.models.SGRAF` (spec 3.4),
and the networks of ncl's own Lightning ``.ckpt`` files.

An official checkpoint is a ``torch.save``'d dict holding each network as a list of three
state dicts ``[img_enc, txt_enc, sim_enc]`` and the training options as a pickled
``argparse.Namespace`` under ``"opt"``. An ncl checkpoint is a Lightning dict whose
``state_dict`` holds network ``k`` under ``nets.<k>.`` (one network for RCL, CRCL and the
baselines, two for NCR/LNC). Both are read with PyTorch's restricted (``weights_only``)
unpickler with only ``argparse.Namespace`` allow-listed, so no code of the official
repositories is imported and no arbitrary object can be constructed; ncl's own checkpoints
hold only tensors and plain containers (``ncl_training_state`` included) and need nothing
more.
"""

from __future__ import annotations

import argparse
import pickle
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor, nn

from ncl.models.sgraf import SGRAF
from ncl.models.state_dicts import EMBED_KEY, prepare_state, strip_prefix

PARTS = ("img_enc", "txt_enc", "sim_enc")
NET_KEY = re.compile(r"^nets\.(\d+)\.(.+)$")
"""``nets.<k>.<parameter>``: network ``k`` of an ncl method's ``state_dict``."""
DECL_OPTIONS = ("lambda1", "lambda2", "mu")
"""``opt`` fields only DECL has (spec 4.6.5): NCR, RCL, CRCL and ReCon have none of them
(ReCon shares ``eta``, RCL/CRCL ``tau``, so those two do not identify DECL)."""
DECL_TAU = 0.1
"""DECL's evidence temperature ``tau`` (spec 4.6.1), used when ``opt.tau`` is absent."""

CheckpointFormat = Literal["official", "ncl"]


def read_official_checkpoint(path: str | Path) -> dict:
    """Load an official ``.pth.tar`` checkpoint onto the CPU, safely.

    Also reads ncl's Lightning ``.ckpt`` files (see :func:`read_checkpoint_file`).

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
    # Memory-map zip-format files (every torch >= 1.6 save): tensors are read when copied
    # into a model, so the optimiser state of a Lightning checkpoint costs no memory.
    # Official checkpoints of older torch versions use the legacy format, which cannot be.
    mmap = zipfile.is_zipfile(path)
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        raise ValueError(f"path: {path} is not a checkpoint the restricted unpickler accepts "
                         f"(only tensors, containers and argparse.Namespace): {err}") from err
    except Exception as err:  # a truncated or foreign file: torch raises many kinds
        raise ValueError(f"path: {path} cannot be read ({type(err).__name__}: "
                         f"{' '.join(str(err).split())[:200]}); it may be truncated or not a "
                         f"checkpoint") from err
    if not isinstance(ckpt, dict):
        raise ValueError(f"path: {path} holds a {type(ckpt).__name__}, expected a dict")
    return ckpt


read_checkpoint_file = read_official_checkpoint
"""Read an official ``.pth.tar`` or an ncl ``.ckpt`` file (the same safe loader)."""


def checkpoint_format(ckpt: Mapping) -> CheckpointFormat:
    """Which kind of checkpoint ``ckpt`` is, from its keys (not the file name).

    Returns:
        ``"ncl"`` for a Lightning checkpoint (a ``state_dict`` entry), ``"official"`` for
        NCR/RCL/CRCL/DECL files (``model`` or ``model_A``/``model_B``, spec 3.4).

    Raises:
        ValueError: Neither layout; the keys found are named.
    """
    if "state_dict" in ckpt:
        return "ncl"
    if any(key in ckpt for key in ("model", "model_A", "model_B")):
        return "official"
    raise ValueError("neither an ncl Lightning checkpoint ('state_dict') nor an official one "
                     f"('model' or 'model_A'/'model_B'); found keys {sorted(map(str, ckpt))}")


def ncl_state_dicts(ckpt: Mapping) -> list[dict[str, Tensor]]:
    """The networks of an ncl checkpoint, each as the state dict of one backbone.

    Args:
        ckpt: A Lightning checkpoint dict (:func:`read_checkpoint_file`).

    Returns:
        One state dict per ``nets.<k>`` in ``k`` order, keys without the ``nets.<k>.``
        prefix: one for RCL, CRCL and the baselines, two (A, B) for NCR/LNC.

    Raises:
        ValueError: No ``nets.<k>.`` entries, or the network numbers have gaps.
    """
    state = ckpt.get("state_dict")
    if not isinstance(state, Mapping):
        raise ValueError("ckpt['state_dict'] must be a dict of tensors")
    networks: dict[int, dict[str, Tensor]] = {}
    for key, value in state.items():
        match = NET_KEY.match(str(key))
        if match:  # other entries (method buffers) are not part of any network
            networks.setdefault(int(match.group(1)), {})[match.group(2)] = value
    if not networks:
        raise ValueError("the state_dict has no 'nets.<k>.' entries: not a checkpoint of an ncl "
                         "retrieval method")
    if sorted(networks) != list(range(len(networks))):
        raise ValueError(f"the state_dict's networks are numbered {sorted(networks)}, "
                         f"expected 0..{len(networks) - 1}")
    return [networks[k] for k in range(len(networks))]


def load_ncl_into(model: nn.Module, state: Mapping[str, Tensor], prefix: str = "") -> None:
    """Copy one network of an ncl checkpoint into ``model``, checking everything first.

    Args:
        model: The target backbone, built with the options it was trained with.
        state: Its state dict (from :func:`ncl_state_dicts`).
        prefix: Prepended to key names in messages (e.g. ``"nets.0."``).

    Raises:
        ValueError: Missing or unexpected keys (named), or the first shape mismatch (the
            tensor and both shapes named; a hint when only the ``<mask>`` row differs).
    """
    own = model.state_dict()
    missing = [prefix + k for k in own if k not in state]
    unexpected = [prefix + k for k in state if k not in own]
    if missing or unexpected:
        raise ValueError(f"the state dict does not match the backbone: missing keys {missing}, "
                         f"unexpected keys {unexpected} (is the backbone class or module_name "
                         "the one it was trained with?)")
    for key, mine in own.items():
        theirs = state[key]
        if not isinstance(theirs, Tensor):
            raise ValueError(f"{prefix}{key}: expected a tensor, got {type(theirs).__name__}")
        if theirs.shape != mine.shape:
            hint = ""
            if key.endswith(EMBED_KEY) and mine.dim() == 2 and abs(theirs.shape[0] - mine.shape[0]) == 1:
                hint = " (one row apart: set add_mask_token as in training)"
            raise ValueError(f"{prefix}{key}: checkpoint shape {tuple(theirs.shape)} does not "
                             f"match model shape {tuple(mine.shape)}{hint}")
    model.load_state_dict(dict(state), strict=True)


def is_decl_checkpoint(ckpt: Mapping) -> bool:
    """True for a DECL checkpoint, whose ensemble averages evidence (spec 4.6.7, 5.4).

    An official file is DECL's when its ``opt`` has all of :data:`DECL_OPTIONS`
    (``lambda1``, ``lambda2``, ``mu``; spec 4.6.5), which no other official repository
    defines; an ncl file when its method's class is named ``DECL``
    (``hyper_parameters._class_path``).
    """
    if checkpoint_format(ckpt) == "ncl":
        path = str((ckpt.get("hyper_parameters") or {}).get("_class_path", ""))
        return path.rsplit(".", 1)[-1].upper() == "DECL"
    try:
        options = official_options(ckpt)
    except ValueError:
        return False
    return all(name in options for name in DECL_OPTIONS)


def decl_tau(ckpt: Mapping) -> float:
    """The evidence temperature of a DECL checkpoint: ``opt.tau`` (which DECL may hold as a
    string, spec 7.3), or :data:`DECL_TAU` when absent.

    Raises:
        ValueError: ``opt.tau`` is not a positive number.
    """
    try:
        tau = official_options(ckpt).get("tau", DECL_TAU)
    except ValueError:
        tau = (ckpt.get("hyper_parameters") or {}).get("tau", DECL_TAU)
    try:
        value = float(tau)
    except (TypeError, ValueError):
        raise ValueError(f"opt.tau must be a number, got {tau!r}") from None
    if not value > 0:
        raise ValueError(f"opt.tau must be > 0, got {value}")
    return value


def official_state_dicts(ckpt: Mapping, parts: int | None = 3) -> list[list[dict]]:
    """The networks of a checkpoint, each as ``[img_enc, txt_enc, sim_enc]`` state dicts.

    Args:
        ckpt: A dict from :func:`read_official_checkpoint`.
        parts: State dicts expected per network (3 for SGRAF); ``None`` accepts any
            non-empty list (a backbone with its own ``load_official_state`` checks it).

    Returns:
        ``[model_A, model_B]`` for NCR, ``[model]`` for RCL, CRCL and DECL.

    Raises:
        ValueError: Neither ``model`` nor both ``model_A``/``model_B`` are present, or an
            entry is not a list of ``parts`` state dicts.
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
        is_list = isinstance(entry, list | tuple)
        count_ok = is_list and (len(entry) == parts if parts is not None else len(entry) > 0)
        if not count_ok or not all(isinstance(sd, Mapping) for sd in entry):
            raise ValueError(f"ckpt['{name}'] must be a list of {parts or 'some'} state dicts"
                             + (" [img_enc, txt_enc, sim_enc]" if parts == 3 else ""))
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
        prepared.append(prepare_state(part, getattr(model, part), strip_prefix(state)))
    for part, state in zip(PARTS, prepared):
        getattr(model, part).load_state_dict(state, strict=True)
