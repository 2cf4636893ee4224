"""Checking an official state dict against a model before anything is copied (spec 3.4, 3.6).

Shared by the SGRAF loader (:func:`ncl.models.checkpoint.load_official_into`) and
:meth:`ncl.models.vse_infinity.VSEInfinity.load_official_state`: both accept a DataParallel
``module.`` prefix, missing BatchNorm ``num_batches_tracked`` counters, and a checkpoint
without the ``<mask>`` embedding row loaded into a model with it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

from torch import Tensor, nn

EMBED_KEY = "embed.weight"


def strip_prefix(state: Mapping) -> dict:
    """Drop a ``module.`` prefix that ``nn.DataParallel`` adds to every key."""
    if state and all(str(k).startswith("module.") for k in state):
        return {k[len("module."):]: v for k, v in state.items()}
    return dict(state)


def prepare_state(part: str, target: nn.Module, state: Mapping) -> dict[str, Tensor]:
    """Check ``state`` against ``target``'s and return a dict ready for strict loading.

    Args:
        part: the sub-module's official name (``img_enc``, ``txt_enc``, ``sim_enc``), for
            messages and to find the text side's embedding.
        target: the sub-module to load into.
        state: its official state dict (prefix already stripped).

    Raises:
        ValueError: missing or unexpected keys (all named), a non-tensor value, or the first
            shape mismatch (tensor and both shapes named, with a hint for the ``<mask>`` row).
    """
    own = target.state_dict()
    missing = [k for k in own if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        raise ValueError(f"{part}: state dict does not match the model: missing keys "
                         f"{missing}, unexpected keys {unexpected}")
    ready = {}
    for key, mine in own.items():
        theirs = state.get(key, mine)  # only a num_batches_tracked counter may be absent
        if not isinstance(theirs, Tensor):
            raise ValueError(f"{part}.{key}: expected a tensor, got {type(theirs).__name__}")
        if theirs.shape == mine.shape:
            ready[key] = theirs
        elif part == "txt_enc" and key == EMBED_KEY and _one_row_short(theirs, mine):
            ready[key] = _pad_mask_row(theirs, mine)
        else:
            hint = ""
            if part == "txt_enc" and key == EMBED_KEY and _one_row_short(mine, theirs):
                hint = (" (the checkpoint has a <mask> row: build the backbone with "
                        "add_mask_token=True)")
            raise ValueError(f"{part}.{key}: checkpoint shape {tuple(theirs.shape)} does not "
                             f"match model shape {tuple(mine.shape)}{hint}")
    return ready


def _one_row_short(small: Tensor, big: Tensor) -> bool:
    """True if ``small`` has the shape of ``big`` minus its last row."""
    return (small.dim() == 2 and big.dim() == 2 and small.shape[1] == big.shape[1]
            and small.shape[0] + 1 == big.shape[0])


def _pad_mask_row(theirs: Tensor, mine: Tensor) -> Tensor:
    """Checkpoint rows ``0..V-1`` plus the model's own ``<mask>`` row ``V``."""
    warnings.warn(f"txt_enc.{EMBED_KEY}: checkpoint has {theirs.shape[0]} rows and the model "
                  f"{mine.shape[0]}; copied the first {theirs.shape[0]} rows, the <mask> row "
                  "keeps its initialisation", stacklevel=4)
    merged = mine.clone()
    merged[: theirs.shape[0]] = theirs.to(merged.dtype)
    return merged
