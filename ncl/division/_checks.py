"""Small input checks shared by the division functions (ValueError with a clear message)."""

from __future__ import annotations

import torch
from torch import Tensor


def check_vector(x: Tensor, name: str, *, min_len: int = 1) -> None:
    """Require a 1-D tensor with at least ``min_len`` entries.

    Raises:
        ValueError: if ``x`` is not a tensor, not 1-D, or too short.
    """
    if not isinstance(x, Tensor):
        raise ValueError(f"`{name}` must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 1:
        raise ValueError(f"`{name}` must be 1-D (N,), got shape {tuple(x.shape)}")
    if x.numel() < min_len:
        raise ValueError(f"`{name}` needs at least {min_len} entries, got {x.numel()}")


def check_finite(x: Tensor, name: str) -> None:
    """Require every entry of ``x`` to be finite (no NaN, no +-Inf)."""
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"`{name}` contains {bad} NaN/Inf value(s); all entries must be finite")


def check_same_shape(a: Tensor, b: Tensor, name_a: str, name_b: str) -> None:
    """Require ``a`` and ``b`` to have identical shapes."""
    if a.shape != b.shape:
        raise ValueError(
            f"`{name_a}` and `{name_b}` must have the same shape, "
            f"got {tuple(a.shape)} and {tuple(b.shape)}"
        )


def check_bool(x: Tensor, name: str) -> None:
    """Require a boolean tensor."""
    if x.dtype != torch.bool:
        raise ValueError(f"`{name}` must be a bool tensor, got dtype {x.dtype}")


def check_unit_interval(value: float, name: str) -> None:
    """Require a Python number in [0, 1]."""
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"`{name}` must lie in [0, 1], got {value}")
