"""Divisions by a two-component mixture, as pure functions and data.

* :func:`gmm_probabilities` - the mixture of any :class:`~ncl.callbacks.division.GMMDivision`:
  one two-component GMM per network on its min-max normalised per-sample values (LNC Eq. 1-3;
  ReCon Eq. 6); the callback broadcasts rank 0's posteriors so that every rank holds the same
  division.
* NCR/LNC's co-divide (spec 4.2.3-4.2.5): :func:`mean_hinge` (the per-sample loss of the pass),
  :func:`split_clean` (the clean/noisy threshold), :func:`abandon_mask` (LNC's Randomly Noise
  Abandon, Eq. 7), the :class:`Division` the method keeps in its training state (L2RM's and
  ReCon's too; :func:`co_divide_record` makes NCR's, :func:`division_made_for` says whether one
  serves an epoch) and :func:`co_rectify`, the targets a network trains on with its peer's
  division.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ncl.division.abandon import noise_abandon_mask
from ncl.division.prediction import PredictionForm, memorization_prediction
from ncl.division.rectify import rectify_by_mode, rectify_noisy_labels
from ncl.division.gmm import gmm_clean_probability
from ncl.division.split import CleanRule, split_by_probability
from ncl.losses.triplet import NcrMarginMode, triplet_loss
from ncl.models.contracts import forward_batch
from ncl.training.passes import eval_mode

#: ``(net, batch) -> (B,)`` per-sample values (:class:`ncl.training.passes.PassSpec`'s ``fn``).
PerSampleFn = Callable[[nn.Module, dict[str, Tensor]], Tensor]


@dataclass
class Division:
    """A division of the training set made for one epoch (before its first batch): the record
    NCR/LNC's co-divide, L2RM's Beta-mixture division and ReCon's three-way division
    (:class:`~ncl.division.three_way.ThreeWayDivision`, which adds its subsets) share. CPU
    tensors, identical on every rank, checkpointed through :meth:`state`.

    Attributes:
        epoch: the (Lightning) epoch it was made for.
        losses: ``(K, N)`` raw per-sample values each network's mixture was fitted on (NCR's
            mean hinge, spec 4.2.4; ReCon's ``l^CM``); ``K = 1`` for a one-network method.
        prob: ``(K, N)`` clean probability from each network's mixture (LNC Eq. 3).
        clean: ``(K, N)`` bool predicted-clean masks (threshold + official fallback).
        keep: ``(N,)`` bool warm-up keep mask of Randomly Noise Abandon, or ``None``.
    """

    epoch: int
    losses: Tensor
    prob: Tensor
    clean: Tensor
    keep: Tensor | None = None
    # ``prob`` on the training device (:meth:`prob_on`): a copy, not state.
    _device_prob: Tensor | None = field(default=None, init=False, repr=False, compare=False)

    def prob_on(self, device: torch.device) -> Tensor:
        """``(K, N)`` :attr:`prob` on ``device``, copied once per record (and device): a method
        that reads the clean probabilities of every batch's pairs then makes one host -> device
        copy per division rather than a device -> host copy of the batch's indices every step."""
        if self._device_prob is None or self._device_prob.device != device:
            self._device_prob = self.prob.to(device)
        return self._device_prob

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "losses": self.losses, "prob": self.prob,
                "clean": self.clean, "keep": self.keep}

    @classmethod
    def from_state(cls, saved: dict[str, Any] | None) -> Division | None:
        """The record :meth:`state` wrote (``None`` stays ``None``)."""
        return None if saved is None else cls(**saved)


def division_made_for(division: Division | None, epoch: int, needs_keep: bool = False) -> bool:
    """Whether ``division`` serves ``epoch``: it exists, was made for that epoch and, when
    ``needs_keep`` (an LNC warm-up epoch trains on the abandon draw), holds a keep mask."""
    if division is None or division.epoch != epoch:
        return False
    return not needs_keep or division.keep is not None


def mean_hinge(margin: float) -> PerSampleFn:
    """NCR's per-sample "eval_loss" (spec 4.2.1, 4.2.4) as a per-sample function:
    ``l_i = mean_j C_s[i, j] + mean_r C_im[r, i]`` over the whole batch, zero diagonal included."""
    def fn(net: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        sims = forward_batch(net, batch).float()  # (B, B)
        return triplet_loss(sims, margin=margin, negatives="mean")  # (B,)
    return fn


def gmm_probabilities(values: Tensor, seed: int | None = 0, max_iter: int = 10, tol: float = 1e-2,
                      reg_covar: float = 5e-4) -> Tensor:
    """Clean probability of every sample from each row's own mixture (LNC Eq. 3; ReCon Eq. 6).

    Args:
        values: ``(K, N)`` per-sample values (losses) of ``K`` networks.
        seed: ``random_state`` of every fit (``None``: numpy's global stream, official).
        max_iter, tol, reg_covar: the official 10 / 1e-2 / 5e-4 (spec 4.2.4).

    Returns:
        ``(K, N)`` float32 on the device of ``values``. Under DDP the fits may differ between
        ranks (``seed=None``, another BLAS): broadcast rank 0's, as GMMDivision does.
    """
    return torch.stack([gmm_clean_probability(row, max_iter, tol, reg_covar, seed).float()
                        for row in values])


def split_clean(prob: Tensor, threshold: float = 0.5, clean_rule: CleanRule = "greater") -> Tensor:
    """``(K, N)`` bool predicted-clean masks of ``(K, N)`` probabilities (co-divide threshold,
    official ``w > t``, with its 1 % fallback: :func:`ncl.division.split_by_probability`)."""
    return torch.stack([split_by_probability(p, threshold, clean_rule) for p in prob])


def divide(losses: Tensor, threshold: float = 0.5, clean_rule: CleanRule = "greater",
           gmm_seed: int | None = 0) -> tuple[Tensor, Tensor]:
    """``(prob, clean)`` of ``(K, N)`` losses: :func:`gmm_probabilities`, :func:`split_clean`."""
    prob = gmm_probabilities(losses, gmm_seed)
    return prob, split_clean(prob, threshold, clean_rule)


def abandon_mask(prob: Tensor, epoch: int, seed: int, fraction: float = 0.5,
                 threshold: float = 0.5) -> Tensor:
    """Randomly Noise Abandon keep mask from two networks' probabilities (LNC Eq. 7).

    A pair is noisy for a network when ``w < threshold`` (strict, Eq. 7); ``fraction`` of the
    pairs noisy for both is dropped. The draw uses a generator seeded by ``(seed, epoch)``: the
    same on every rank and after a resume.

    Returns:
        ``(N,)`` bool, True = the pair stays in the warm-up set.
    """
    if prob.shape[0] != 2:
        raise ValueError(f"noise abandon needs two networks' probabilities, got {prob.shape[0]}")
    noisy = prob.cpu() < threshold  # (2, N)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return noise_abandon_mask(noisy[0], noisy[1], fraction, generator=generator)


def co_divide_record(epoch: int, values: Tensor, prob: Tensor, threshold: float = 0.5,
                     clean_rule: CleanRule = "greater", *, abandon: bool = False, seed: int = 0,
                     fraction: float = 0.5) -> Division:
    """NCR/LNC's :class:`Division` for ``epoch`` from ``(2, N)`` per-sample ``values`` and clean
    probabilities ``prob``: the clean masks of :func:`split_clean` and, with ``abandon`` (an LNC
    warm-up epoch), the keep mask of :func:`abandon_mask` (drawn from ``seed``, first)."""
    keep = abandon_mask(prob, epoch, seed, fraction) if abandon else None
    return Division(epoch, values, prob, split_clean(prob, threshold, clean_rule), keep)


def co_rectify(net: nn.Module, peer: nn.Module, w: Tensor, labelled: dict[str, Tensor],
               unlabelled: dict[str, Tensor] | None, margin: float, form: PredictionForm,
               mode: NcrMarginMode) -> tuple[Tensor, Tensor | None]:
    """Co-rectify (LNC Eq. 8-9; spec 4.2.6 step 1): both networks in eval mode, no gradient.

    Args:
        net, peer: the network that trains and its peer (whose division ``w`` comes from).
        w: ``(B_l,)`` the peer's clean probabilities of the labelled batch.
        labelled, unlabelled: collated batches (``unlabelled`` may be ``None``).
        margin, form: of the memorisation prediction ``P`` (Eq. 9).
        mode: ``ncr_margin_mode`` (:func:`~ncl.division.rectify.rectify_by_mode`).

    Returns:
        The labelled targets ``(B_l,)`` (``(B_l, B_l)`` for ``official_2023``) and the
        unlabelled targets ``(B_u,)`` (``(P^A + P^B) / 2``) or ``None``, clamped to [0, 1].
    """
    def predict(batch: dict[str, Tensor], model: nn.Module) -> Tensor:  # P of Eq. 9, (B,)
        return memorization_prediction(forward_batch(model, batch), margin, form)

    with torch.no_grad(), eval_mode(net, peer):
        p_l = predict(labelled, net)
        target_l = rectify_by_mode(mode, w.to(p_l.dtype), p_l)
        target_u = None
        if unlabelled is not None:
            target_u = rectify_noisy_labels(predict(unlabelled, net), predict(unlabelled, peer))
    return target_l.clamp(0, 1), None if target_u is None else target_u.clamp(0, 1)
