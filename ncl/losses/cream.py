"""CREAM's (TIP 2024) InfoNCE pieces as pure functions of a ``(B, B)`` similarity matrix.

Conventions: ``sims`` is ``(B, B)``, rows = images, columns = captions, diagonal = the
annotated pairs (SGRAF's sigmoid scores in CREAM). With ``Z = sims / T``:

* ``L^r = -log_softmax(Z, dim=1)`` (image ``i`` queries the captions: the official
  ``loss_text_retrieval``) and ``L^c = -log_softmax(Z, dim=0)`` (caption ``j`` queries the
  images: ``loss_image_retrieval``), both ``(B, B)``: :func:`infonce_log_losses`;
* the per-sample loss ``l_i = L^r_ii + L^c_ii`` (warm-up, division pass):
  :func:`per_sample_infonce`;
* the prediction ``p_i = clamp((P^r_ii + P^c_ii) / 2, 0, 1)`` with ``P = exp(-L)``:
  :func:`infonce_prediction`;
* the soft-label weights (official ``soft_label=True, smooth_label=False``): off the diagonal
  ``W^r_ij = (1 - y_i) S°_ij / (sum_k S°_ik + eps)`` and ``W^c_ij = (1 - y_j) S°_ij /
  (sum_k S°_kj + eps)`` (``S°``: ``sims`` with a zero diagonal, *not* detached, as the official
  ``similarity = scores.clone()``), entries below ``filter`` zeroed, plus ``diag(y)``:
  :func:`soft_label_weights`; the uniform variant (``smooth_label=True``):
  ``(1 - y_i) / (B - 1)`` off the diagonal;
* the loss ``sum_ij (L^r_ij W^r_ij + L^c_ij W^c_ij) / B``: :func:`soft_label_infonce`;
* the filter of a co-training iteration (:func:`batch_filter`, :func:`step_filters`).

One InfoNCE: these are written on ``torch.log_softmax`` by rows and by columns and kept apart
(:func:`infonce_log_losses`) so that they can be switched to ncl's shared InfoNCE function
(direction, temperature, per-pair weights) once it exists; the official code forms
``exp(S / T)`` and divides, which is the same in exact arithmetic (``T = 0.07`` and ``S`` in
``(0, 1)`` never overflow).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ncl.losses._checks import check_positive, check_square, work_dtype


def infonce_log_losses(sims: Tensor, temperature: float = 0.07) -> tuple[Tensor, Tensor]:
    """``(L^r, L^c)``: ``-log_softmax(sims / T)`` by rows and by columns, each ``(B, B)`` in
    the orientation of ``sims`` (``L^c[i, j]`` is caption ``j``'s loss for image ``i``)."""
    check_square(sims)
    check_positive(temperature, "temperature")
    logits = sims.to(work_dtype(sims.dtype)) / temperature
    return -torch.log_softmax(logits, dim=1), -torch.log_softmax(logits, dim=0)


def per_sample_infonce(sims: Tensor, temperature: float = 0.07) -> Tensor:
    """``l_i = L^r_ii + L^c_ii`` (B,): the warm-up loss per pair (its mean is the official
    ``mode="warmup"`` scalar) and the division pass's value (``mode="eval_loss"``)."""
    rows, cols = infonce_log_losses(sims, temperature)
    return rows.diagonal() + cols.diagonal()


def infonce_prediction(sims: Tensor, temperature: float = 0.07) -> Tensor:
    """``p_i = clamp((P^r_ii + P^c_ii) / 2, 0, 1)`` (B,), the official ``mode="predict"``:
    the mean of the row and column softmax probabilities of the annotated pair."""
    rows, cols = infonce_log_losses(sims, temperature)
    return ((torch.exp(-rows.diagonal()) + torch.exp(-cols.diagonal())) / 2).clamp(0, 1)


def soft_label_weights(sims: Tensor, labels: Tensor, filter_value: float = 0.0,
                       eps: float = 1e-6, smooth: bool = False) -> tuple[Tensor, Tensor]:
    """CREAM's soft targets ``(W^r, W^c)`` (each (B, B)) for targets ``y`` (B,).

    Args:
        sims: ``(B, B)`` similarities; the weights keep their gradient (official).
        labels: ``(B,)`` targets ``y`` in [0, 1] (no gradient expected).
        filter_value: off-diagonal weights below it are zeroed (official ``weight < filter``;
            the similarity form only).
        eps: added to each row / column sum (official 1e-6).
        smooth: the uniform form ``(1 - y_i) / (B - 1)`` in both directions (official
            ``smooth_label=True``; no filter).

    Returns:
        ``(W^r, W^c)``: row ``i`` of ``W^r`` spreads ``1 - y_i`` over image ``i``'s other
        captions, column ``j`` of ``W^c`` spreads ``1 - y_j`` over caption ``j``'s other images;
        both carry ``y`` on the diagonal.
    """
    check_square(sims)
    size = sims.shape[0]
    y = labels.to(sims.dtype).reshape(-1)
    if y.numel() != size:
        raise ValueError(f"labels must hold one target per pair ({size}), got {tuple(labels.shape)}")
    eye = torch.eye(size, dtype=torch.bool, device=sims.device)
    positive = torch.diag(y)
    if smooth:
        off = ((1 - y) / max(size - 1, 1)).unsqueeze(1).expand(size, size).masked_fill(eye, 0.0)
        return positive + off, positive + off.t()
    plain = sims.masked_fill(eye, 0.0)  # S°
    rows = (1 - y).unsqueeze(1) * plain / (plain.sum(dim=1, keepdim=True) + eps)
    cols = (1 - y).unsqueeze(0) * plain / (plain.sum(dim=0, keepdim=True) + eps)
    zero = torch.zeros((), dtype=sims.dtype, device=sims.device)
    rows = torch.where(rows < filter_value, zero, rows)
    cols = torch.where(cols < filter_value, zero, cols)
    return rows + positive, cols + positive


def soft_label_infonce(sims: Tensor, labels: Tensor, temperature: float = 0.07,
                       filter_value: float = 0.0, eps: float = 1e-6, smooth: bool = False) -> Tensor:
    """``sum_ij (L^r_ij W^r_ij + L^c_ij W^c_ij) / B`` (a scalar; official ``mode="train"``
    with ``soft_label=True``), weights from :func:`soft_label_weights`."""
    rows, cols = infonce_log_losses(sims, temperature)
    w_rows, w_cols = soft_label_weights(sims, labels, filter_value, eps, smooth)
    return ((rows * w_rows.to(rows.dtype)).sum() + (cols * w_cols.to(cols.dtype)).sum()) / sims.shape[0]


def batch_filter(target_means: tuple[float, float, float], sizes: tuple[int, int, int]) -> float:
    """The official ``filter``: the mean of the three batches' target means, each weighted by
    its *subset's* size (clean, hard, noisy); a subset of size 0 adds nothing.

    Args:
        target_means: mean target of this iteration's clean, hard and noisy batch.
        sizes: ``(|C|, |H|, |N|)``, the sizes of the whole subsets.
    """
    total = sum(sizes)
    if total <= 0:
        raise ValueError(f"the subsets are empty: {sizes}")
    return sum(m * n for m, n in zip(target_means, sizes) if n) / total


@dataclass(frozen=True)
class StepFilters:
    """The filter of each of an iteration's three losses."""

    clean: float
    hard: float
    noisy: float


def step_filters(filter_value: float, clean_fraction: float, epoch: int, hard_start_epoch: int,
                 fraction_rule: float = 0.85) -> StepFilters:
    """The three filters of a co-training iteration (official ``train_one_epoch``).

    If the clean subset holds more than ``fraction_rule`` of the pairs, the clean and hard
    filters are 0 (every soft negative kept); otherwise the clean filter is
    ``max(hard_start_epoch - epoch, filter)`` (>= 1 before the hard start: no soft negative
    survives) and the hard one ``filter``. The noisy filter is always ``filter``.

    Args:
        filter_value: :func:`batch_filter`.
        clean_fraction: ``|C| / N``.
        epoch: the co-training epoch (0-based, warm-up not counted).
        hard_start_epoch: the co-training epoch from which the hard subset trains (10).
        fraction_rule: the clean fraction above which the filters are 0 (0.85).
    """
    if clean_fraction > fraction_rule:
        return StepFilters(0.0, 0.0, filter_value)
    return StepFilters(max(float(hard_start_epoch - epoch), filter_value), filter_value, filter_value)
