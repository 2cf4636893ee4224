"""What an ensemble averages, and in which order (spec 4.2.9, 4.3.5, 4.4.5, 4.6.7, 5.4).

Two rules:

* ``"score"``: the sigmoid similarity matrices (NCR's A + B, RCL's and CRCL's "SGRAF").
* ``"evidence"``: DECL's evidence ``exp(tanh(z) / tau)`` of the raw score ``z`` before the
  sigmoid (``tau`` = 0.1). Averaging evidence is not averaging sigmoids: the two are
  monotone in ``z`` for one model (same ranking) but their means rank pairs differently.

Averaging is hierarchical: the networks of one checkpoint (NCR's A and B) are averaged first
(that is the number the paper reports for that model), then the models are averaged with
equal weight, so a two-network model does not count twice.

Precision. The evidence is computed from the raw scores themselves, in float64, never by
inverting a stored sigmoid: a float32 sigmoid rounds to exactly 1.0 for ``z`` above about
16.6 (and loses relative precision of ``1 - s`` well before), so ``logit(sigmoid(z))``
would give ``inf`` or a perturbed ``z``. ``tanh`` saturates in float32 at ``|z|`` of about
9, and the evidence near ``e^10`` is resolved by float32 only to about ``|z| < 9.7``; in
float64 both hold to ``|z|`` of about 19, so fewer pairs tie at the top evidence. Means are
accumulated in float64, as the official numpy code does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from ncl.evaluation.similarity import ensemble

Combine = Literal["auto", "score", "evidence"]
Rule = Literal["score", "evidence"]


def resolve_combine(combine: Combine, is_decl: Sequence[bool]) -> Rule:
    """The rule to apply to a set of checkpoints.

    ``"auto"`` is ``"evidence"`` when every checkpoint is a DECL checkpoint (DECL's own
    ensemble, spec 4.6.7) and ``"score"`` otherwise (NCR, RCL, CRCL and any mix, spec 5.4).

    Args:
        combine: ``"auto"``, ``"score"`` or ``"evidence"``.
        is_decl: One flag per checkpoint.

    Raises:
        ValueError: No checkpoint.
    """
    if len(is_decl) == 0:
        raise ValueError("is_decl must hold one flag per checkpoint, got none")
    if combine == "auto":
        return "evidence" if all(is_decl) else "score"
    return combine  # type: ignore[return-value]


def evidence(logits: Tensor, tau: float = 0.1, chunk_rows: int = 1024) -> Tensor:
    """DECL's evidence ``exp(tanh(z) / tau)`` (spec 4.6.1), in float64.

    Args:
        logits: Raw scores ``z`` before the sigmoid, shape (N_img, N_cap), any float dtype.
        tau: Temperature (DECL: 0.1, so the evidence lies in ``[e^-10, e^10]``).
        chunk_rows: Rows converted at a time, so the float64 temporaries stay small.

    Returns:
        (N_img, N_cap) float64 evidence, on the device of ``logits``.

    Raises:
        ValueError: ``tau`` is not positive.

    Example:
        >>> evidence(torch.tensor([[0.0, 100.0]]), tau=0.1)
        tensor([[1.0000e+00, 2.2026e+04]], dtype=torch.float64)
    """
    if not tau > 0:
        raise ValueError(f"tau must be > 0, got {tau!r}")
    out = torch.empty(logits.shape, dtype=torch.float64, device=logits.device)
    for start in range(0, logits.shape[0], chunk_rows):
        block = logits[start:start + chunk_rows].to(torch.float64)
        out[start:start + chunk_rows] = torch.exp(torch.tanh(block) / tau)
    return out


def hierarchical_mean(groups: Sequence[Sequence[Tensor]]) -> tuple[list[Tensor], Tensor]:
    """Average within each group, then the group averages with equal weight.

    Args:
        groups: One group per model (checkpoint), each holding its networks' (N_img, N_cap)
            matrices, e.g. ``[[A, B], [R]]`` for an NCR checkpoint and an RCL one.

    Returns:
        ``(model_means, overall)``: each group's float64 mean (a one-network group's own
        matrix, not copied), and the float64 mean of those, ``(mean(A, B) + R) / 2`` in the
        example (not ``(A + B + R) / 3``).

    Raises:
        ValueError: No group, an empty group, or matrices of different shapes.
    """
    if len(groups) == 0 or any(len(g) == 0 for g in groups):
        raise ValueError("groups must be a non-empty list of non-empty lists of matrices")
    means = [g[0] if len(g) == 1 else ensemble(list(g), dtype=torch.float64) for g in groups]
    return means, ensemble(means, dtype=torch.float64)
