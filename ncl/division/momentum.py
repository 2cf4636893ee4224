"""LNC momentum regularisation for the warm-up (LNC Eq. 4-6).

* Eq. 5: per-sample target ``gamma_i^tau = beta * gamma_i^(tau-1) + (1 - beta) * P_i^tau``
  with ``gamma_i^0 = 1``.
* Eq. 4: ``L_mr = (1/N) ||P(v_i, t_i) - gamma_i||^2``: the squared L2 distance between the
  model's **prediction** P (Eq. 9, with gradient) and its momentum target, averaged over
  the samples (of the mini-batch, in practice).
* Eq. 6: ``L_w = L_tri + lambda * L_mr``; the caller applies lambda and the mean.

The paper gives no values for beta and lambda, and does not say whether gamma is updated
per epoch or per step; ``tau`` is called an epoch. Use the target from before the current
update (``gamma^(tau-1)``) in Eq. 4, then update it with the detached prediction.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ncl.division._checks import check_finite, check_same_shape, check_unit_interval, check_vector


def initial_momentum_targets(num_samples: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """``gamma^0 = 1`` for every training pair (LNC Eq. 5).

    Args:
        num_samples: N, the training-set size (>= 1).
        dtype: floating dtype of the result.

    Returns:
        (N,) ones.
    """
    if num_samples < 1:
        raise ValueError(f"`num_samples` must be >= 1, got {num_samples}")
    return torch.ones(num_samples, dtype=dtype)


def momentum_update(targets: Tensor, predictions: Tensor, momentum: float) -> Tensor:
    """One momentum step of the targets (LNC Eq. 5).

    ``gamma_new = momentum * targets + (1 - momentum) * predictions``; the result is
    detached because it is state (a target), never something to back-propagate through.

    Args:
        targets: (B,) current targets ``gamma^(tau-1)`` of the batch's samples.
        predictions: (B,) predictions ``P^tau`` of the same samples.
        momentum: beta in [0, 1]; 1 keeps the targets, 0 replaces them.

    Returns:
        (B,) new targets, detached.
    """
    _check_pair(targets, predictions)
    check_unit_interval(momentum, "momentum")
    return (momentum * targets + (1 - momentum) * predictions).detach()


def momentum_regularizer(predictions: Tensor, targets: Tensor) -> Tensor:
    """Per-sample momentum regularisation ``(P_i - gamma_i)^2`` (LNC Eq. 4, unreduced).

    Gradient flows into ``predictions`` only; ``targets`` are detached. Eq. 4's ``1/N``
    is the caller's ``.mean()``; Eq. 6's ``lambda`` is the caller's too.

    Args:
        predictions: (B,) predictions P of the network being warmed up (with grad).
        targets: (B,) momentum targets gamma of the same samples.

    Returns:
        (B,) non-negative per-sample terms.
    """
    _check_pair(targets, predictions)
    return (predictions - targets.detach()) ** 2


def _check_pair(targets: Tensor, predictions: Tensor) -> None:
    check_vector(targets, "targets")
    check_vector(predictions, "predictions")
    check_same_shape(targets, predictions, "targets", "predictions")
    check_finite(targets, "targets")
    check_finite(predictions, "predictions")
