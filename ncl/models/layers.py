"""Normalisations and initialisers shared by the SGRAF modules.

Spec section "Notation": ``l2norm(x) = x / (sqrt(sum x^2) + 1e-8)`` and
``l1norm(x) = x / (sum |x| + 1e-8)``; the epsilon is added to the norm, never inside the
square root. Spec 3.1-3.3 give the initialisations.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NORM_EPS = 1e-8


@contextmanager
def float32_region(device: torch.device) -> Iterator[None]:
    """Autocast off for ``device``: what runs inside stays in its inputs' dtype.

    The precision rule (``docs/precision.md``): under ``bf16-mixed``/``16-mixed`` the
    encoders and the similarity head run their matrix products in the low dtype, but the
    score every loss, ranking and division reads is computed in float32. A bf16 score
    carries about 0.002-0.004 of rounding; divided by tau = 0.05 (RCL, CRCL, InfoNCE) that is
    0.04-0.08 in the logits, and it reorders near-tied rankings.
    """
    with torch.autocast(device_type=device.type, enabled=False):
        yield


def at_least_float32(x: Tensor) -> Tensor:
    """``x`` in float32 if it is in a lower-precision float (bf16, fp16); float64 stays."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def float32_linear(x: Tensor, layer: nn.Linear) -> Tensor:
    """``layer(x)`` in float32 whatever autocast is active (see :func:`float32_region`).

    In float32 (or float64) this is ``F.linear(x, W, b)``, the very call ``nn.Linear`` makes:
    values are the same to the bit.

    Args:
        x: ``(..., in_features)``, any floating dtype.
        layer: the linear map; its parameters are float32.

    Returns:
        ``(..., out_features)`` float32 (float64 for a float64 model).
    """
    bias = None if layer.bias is None else at_least_float32(layer.bias)
    with float32_region(x.device):
        return F.linear(at_least_float32(x), at_least_float32(layer.weight), bias)


def l2norm(x: Tensor, dim: int = -1, eps: float = NORM_EPS) -> Tensor:
    """Divide ``x`` by its Euclidean norm along ``dim`` plus ``eps`` (spec, notation).

    ``torch.linalg.vector_norm`` is used rather than ``sqrt(sum(x**2))`` because its backward
    is defined (zero) at an all-zero vector, which padded word positions are; the forward
    value is the same formula.

    Args:
        x: Any tensor.
        dim: Axis to normalise.
        eps: Added to the norm (not inside the square root).

    Returns:
        Tensor of the shape of ``x``.
    """
    return x / (torch.linalg.vector_norm(x, ord=2, dim=dim, keepdim=True) + eps)


def l1norm(x: Tensor, dim: int = -1, eps: float = NORM_EPS) -> Tensor:
    """Divide ``x`` by its L1 norm along ``dim`` plus ``eps`` (spec, notation).

    Args:
        x: Any tensor.
        dim: Axis to normalise.
        eps: Added to the norm.

    Returns:
        Tensor of the shape of ``x``.
    """
    return x / (x.abs().sum(dim=dim, keepdim=True) + eps)


def init_linear_uniform(linear: nn.Linear) -> None:
    """Weights ``U(-r, r)`` with ``r = sqrt(6 / (fan_in + fan_out))``, bias 0 (spec 3.1, 3.3)."""
    bound = math.sqrt(6.0 / (linear.in_features + linear.out_features))
    with torch.no_grad():
        linear.weight.uniform_(-bound, bound)
        if linear.bias is not None:
            linear.bias.zero_()


def init_batchnorm(bn: nn.BatchNorm1d) -> None:
    """BatchNorm weight 1 and bias 0 (spec 3.3)."""
    with torch.no_grad():
        bn.weight.fill_(1.0)
        bn.bias.zero_()


def init_similarity_weights(module: nn.Module) -> None:
    """Apply the similarity-module initialisation to every Linear and BatchNorm1d inside.

    Spec 3.3: no layer of the similarity encoder keeps PyTorch's default initialisation.

    Args:
        module: Any module; its Linear and BatchNorm1d descendants are re-initialised.
    """
    for sub in module.modules():
        if isinstance(sub, nn.Linear):
            init_linear_uniform(sub)
        elif isinstance(sub, nn.BatchNorm1d):
            init_batchnorm(sub)
