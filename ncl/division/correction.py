"""CRCL's Self-refining Correspondence Correction (SCC) of the soft labels (CRCL Eq. 10-12).

Every training pair ``i`` carries a soft correspondence label ``y_i`` (a per-sample state table,
initialised to 1 and carried across SR pieces). Each update mixes it with the model's own
estimate ``p_hat_i = (p_ii^o + p_ii^<>) / 2`` (Eq. 10; computed by
:func:`ncl.losses.average_matching_probability`), freezes it for the first ``e_f`` epochs of a
piece, and zeroes confident noise (``y < 0.1``, Eq. 12) before ACL uses it.

Three rules (``rule``):

* ``"official"`` (spec 4.4.2 steps 4-6): applied **every step** to the batch's slice of the
  table, with the **current** step's estimate. The thresholded label is written back (so a
  label at 0 recovers only if ``0.2 p >= 0.1``), except in epoch ``e_f - 1`` of piece 0, where
  the unthresholded estimate ``p`` is written (the code's counterpart of Eq. 11's second case).
* ``"paper"`` (Eq. 11-12): applied **once per epoch** to the whole table, with the estimate
  recorded during the **previous** epoch (``p_hat^(j, t-1)``). Piece 0 resets the label to that
  estimate at epoch ``e_f`` (0-based; ``t = e_f + 1``), later epochs use momentum. The table
  keeps the unthresholded ``y``; Eq. 12's threshold only shapes the label ACL sees.
* ``"prediction"``: no correction (official ``--mc`` off; the paper's "without SCC" of
  Fig. 1): the label is the current estimate, not thresholded, and is also stored.

The paper rule's estimates come from an eval-mode pass over the training set whose per-sample
function is :func:`matching_estimate`.

Epochs are 0-based within a piece (``epoch_in_piece = t - 1``); pieces are 0-based
(``piece = j - 1``). See :class:`ncl.training.pieces.PieceSchedule` for the mapping from global
epochs, and ``docs/methods/crcl.md`` for the full comparison.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, get_args

import torch
from torch import Tensor, nn

from ncl.division._checks import check_finite, check_same_shape, check_unit_interval, check_vector
from ncl.division.momentum import momentum_update
from ncl.losses.crcl import AclForm, average_matching_probability
from ncl.models.contracts import forward_batch
from ncl.training.passes import PerSampleFn

CorrectionRule = Literal["paper", "official", "prediction"]


class CorrectedLabels(NamedTuple):
    """The result of one correction, both (B,) (or (N,)), detached.

    Attributes:
        for_loss: ``y_hat`` (Eq. 12), the label ACL weights and exponentiates with.
        stored: what goes back into the per-sample table (``move_gt`` in the official code).
    """

    for_loss: Tensor
    stored: Tensor


def initial_correspondence_labels(num_samples: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """All labels start at 1: every pair is assumed matched at the start of piece 0 (Sec. 2.3).

    Args:
        num_samples: N, the number of training pairs (captions), >= 1.
        dtype: floating dtype of the table.

    Returns:
        (N,) ones.
    """
    if num_samples < 1:
        raise ValueError(f"`num_samples` must be >= 1, got {num_samples}")
    return torch.ones(num_samples, dtype=dtype)


def momentum_correction(labels: Tensor, estimate: Tensor, momentum: float = 0.8) -> Tensor:
    """Momentum Correction, Eq. 10: ``y_new = beta * y + (1 - beta) * p_hat``, detached.

    Args:
        labels: (B,) current labels ``y``.
        estimate: (B,) estimates ``p_hat`` of the same pairs.
        momentum: beta in [0, 1] (0.8 in the official code, ``--alpha``).

    Returns:
        (B,) corrected labels.
    """
    return momentum_update(labels, estimate, momentum)


def filter_confident_noise(labels: Tensor, threshold: float = 0.1) -> Tensor:
    """Eq. 12: labels strictly below ``threshold`` (epsilon = 0.1) become 0, others are kept.

    ``threshold = 0`` disables the filter (the official ``--confident`` off).

    Args:
        labels: (B,) labels ``y``.
        threshold: epsilon in [0, 1].

    Returns:
        (B,) ``y_hat``, detached.
    """
    check_vector(labels, "labels")
    check_unit_interval(threshold, "threshold")
    return torch.where(labels < threshold, torch.zeros_like(labels), labels).detach()


def _check_inputs(
    labels: Tensor, estimate: Tensor, piece: int, epoch_in_piece: int, freeze_epochs: int
) -> None:
    for x, name in ((labels, "labels"), (estimate, "estimate")):
        check_vector(x, name)
        if not x.is_floating_point():
            raise ValueError(f"`{name}` must be a floating-point tensor, got dtype {x.dtype}")
        check_finite(x, name)  # the official code exits on NaN labels; fail loudly instead
        if not bool(((x >= 0) & (x <= 1)).all()):
            raise ValueError(f"`{name}` must lie in [0, 1]")
    check_same_shape(labels, estimate, "labels", "estimate")
    for value, name in ((piece, "piece"), (epoch_in_piece, "epoch_in_piece"),
                        (freeze_epochs, "freeze_epochs")):
        if int(value) != value or value < 0:
            raise ValueError(f"`{name}` must be an integer >= 0, got {value}")


def _official(labels: Tensor, estimate: Tensor, piece: int, epoch: int, freeze: int,
              momentum: float, threshold: float) -> CorrectedLabels:
    """Spec 4.4.2 steps 4-6, one training step's batch slice."""
    y = labels.detach() if epoch < freeze else momentum_correction(labels, estimate, momentum)
    y_hat = filter_confident_noise(y, threshold)
    if piece == 0 and epoch == freeze - 1:
        return CorrectedLabels(y_hat, estimate.detach().clone())  # unthresholded p, step 6
    return CorrectedLabels(y_hat, y_hat)


def _paper(labels: Tensor, estimate: Tensor, piece: int, epoch: int, freeze: int,
           momentum: float, threshold: float) -> CorrectedLabels:
    """Eq. 11-12 at the start of 0-based epoch ``epoch`` (= t - 1), with last epoch's p_hat."""
    if freeze < 1:
        raise ValueError(
            "the paper rule needs `freeze_epochs` >= 1: with e_f = 0, Eq. 11 would need an "
            "estimate from before the piece's first epoch"
        )
    if epoch < freeze:  # t <= e_f: the label the previous piece ended with (1 in piece 0)
        y = labels.detach().clone()
    elif piece == 0 and epoch == freeze:  # j = 1, t = e_f + 1: reset to the estimate
        y = estimate.detach().clone()
    else:
        y = momentum_correction(labels, estimate, momentum)
    return CorrectedLabels(filter_confident_noise(y, threshold), y)


def correct_labels(
    labels: Tensor,
    estimate: Tensor,
    piece: int,
    epoch_in_piece: int,
    *,
    rule: CorrectionRule = "official",
    freeze_epochs: int = 2,
    momentum: float = 0.8,
    threshold: float = 0.1,
) -> CorrectedLabels:
    """One SCC update of a slice of the label table (CRCL Eq. 10-12; spec 4.4.2 steps 4-6).

    ``rule="official"`` (call every training step with the batch's slice and the step's
    estimate ``p``; 0-based epoch ``e`` in the piece):

    * label for the loss: ``y = labels`` if ``e < e_f``, else ``beta labels + (1 - beta) p``;
      then ``y_hat = 0 where y < eps`` (the filter applies in frozen epochs too);
    * stored: ``p`` in epoch ``e_f - 1`` of piece 0, otherwise ``y_hat``.

    ``rule="paper"`` (call once at the start of every epoch ``e`` = t - 1 with the whole table
    ``y^(j, t-1)`` and the estimates ``p_hat^(j, t-1)`` recorded during epoch ``e - 1``):

    * ``y = labels`` if ``e < e_f`` (Eq. 11, first case: the previous piece's last label, or 1);
      ``y = p_hat`` if ``piece == 0`` and ``e == e_f`` (second case); else Eq. 10 (third case);
    * stored: ``y`` (unthresholded); label for the loss: Eq. 12 applied to ``y``.

    ``rule="prediction"``: both are ``estimate`` (no correction, no filter).

    Args:
        labels: (B,) or (N,) current labels in [0, 1] (the table's slice).
        estimate: (B,) or (N,) estimates ``p_hat`` in [0, 1] of the same pairs (ignored where the
            rule freezes the labels).
        piece: 0-based SR piece index ``j - 1``.
        epoch_in_piece: 0-based epoch within the piece, ``t - 1``.
        rule: ``"official"``, ``"paper"`` or ``"prediction"`` (see above).
        freeze_epochs: ``e_f`` (official ``--warm_epoch``, 2); >= 1 for the paper rule.
        momentum: beta in [0, 1] (official ``--alpha``, 0.8).
        threshold: epsilon in [0, 1] of Eq. 12 (0.1); 0 turns the filter off.

    Returns:
        :class:`CorrectedLabels` ``(for_loss, stored)``, both detached, shaped like ``labels``.
    """
    if rule not in get_args(CorrectionRule):
        raise ValueError(f"`rule` must be one of {get_args(CorrectionRule)}, got {rule!r}")
    _check_inputs(labels, estimate, piece, epoch_in_piece, freeze_epochs)
    check_unit_interval(momentum, "momentum")
    check_unit_interval(threshold, "threshold")
    if rule == "prediction":
        p = estimate.detach().clone()
        return CorrectedLabels(p, p)
    update = _official if rule == "official" else _paper
    return update(labels, estimate, piece, epoch_in_piece, freeze_epochs, momentum, threshold)


def matching_estimate(tau: float, form: AclForm) -> PerSampleFn:
    """The per-sample function of the estimate pass: ``(B,)`` ``p_hat_i`` of Eq. 10 in the batch."""
    def fn(net: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        return average_matching_probability(forward_batch(net, batch).float(), tau, form)
    return fn
