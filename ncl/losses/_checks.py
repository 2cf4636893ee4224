"""Input checks shared by the loss functions (each raises ValueError naming the argument)."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def check_square(sims: Tensor, name: str = "sims") -> int:
    """Require a square floating-point (B, B) similarity matrix with B >= 1.

    Returns:
        The batch size B.

    Raises:
        ValueError: if ``sims`` is not a tensor, not floating point, not 2-D or not square.
    """
    if not isinstance(sims, Tensor):
        raise ValueError(f"`{name}` must be a torch.Tensor, got {type(sims).__name__}")
    if not sims.is_floating_point():
        raise ValueError(f"`{name}` must be a floating-point tensor, got dtype {sims.dtype}")
    if sims.dim() != 2 or sims.shape[0] != sims.shape[1] or sims.shape[0] == 0:
        raise ValueError(
            f"`{name}` must be a non-empty square (B, B) matrix "
            f"(rows = images, columns = captions), got shape {tuple(sims.shape)}"
        )
    return int(sims.shape[0])


def check_positive(value: float, name: str) -> None:
    """Require a finite Python number > 0."""
    if not (math.isfinite(float(value)) and float(value) > 0.0):
        raise ValueError(f"`{name}` must be a finite number > 0, got {value}")


def check_non_negative(value: float, name: str) -> None:
    """Require a finite Python number >= 0."""
    if not (math.isfinite(float(value)) and float(value) >= 0.0):
        raise ValueError(f"`{name}` must be a finite number >= 0, got {value}")


def check_choice(value: str, choices: tuple[str, ...], name: str) -> None:
    """Require ``value`` to be one of ``choices``."""
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}, got {value!r}")


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """At least float32: softmax-type losses on half-precision sims are computed in float32."""
    return torch.promote_types(dtype, torch.float32)
