"""PC²'s per-sample pieces (docs/methods/pc2.md steps 4, 5, 7, 8): the distribution bank, the
oscillation of the pseudo-classification, the labelled targets of the combined division, the
pseudo-caption matching and the division record.

Shapes: ``N`` training pairs, ``C`` pseudo-classes (``proj_dim``), ``K`` networks (2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from ncl.division.co_divide import Division, gmm_probabilities, split_clean
from ncl.training.distributed import all_gather_rows, last_occurrences

#: Where co-training writes into the bank (quirk Q1): ``subset``, the official positions inside
#: the peer's clean / noisy subsets; ``dataset``, the pairs' own dataset indices.
BankIndex = Literal["subset", "dataset"]


class DistributionBank:
    """Per network, the latest pseudo-prediction written for every pair (the official
    ``distri_bank_{A,B}`` dicts): ``values (K, N, C)`` float32 and ``present (K, N)`` bool, on the
    CPU, identical on every rank (each write gathers every rank's rows, applied in rank order,
    the last write of an index winning). Checkpointed through :meth:`state_dict`.

    Args:
        num_rows: K.
        num_classes: C.
    """

    def __init__(self, num_rows: int, num_classes: int) -> None:
        if num_rows < 1 or num_classes < 1:
            raise ValueError(f"num_rows and num_classes must be >= 1, got {num_rows}, {num_classes}")
        self.num_rows, self.num_classes = num_rows, num_classes
        self.values: Tensor | None = None
        self.present: Tensor | None = None

    @property
    def ready(self) -> bool:
        return self.values is not None

    def reset(self, num_samples: int) -> None:
        """An empty bank for ``num_samples`` pairs."""
        self.values = torch.zeros(self.num_rows, num_samples, self.num_classes)
        self.present = torch.zeros(self.num_rows, num_samples, dtype=torch.bool)

    def write(self, row: int, index: Tensor, values: Tensor) -> None:
        """Overwrite row ``row`` at ``index`` (``(B,)``) with ``values`` (``(B, C)``), with every
        rank's rows; a repeated index keeps its last value."""
        if self.values is None or self.present is None:
            raise RuntimeError("DistributionBank used before reset()")
        index, values = all_gather_rows(index.long(), values.detach().float())
        index, values = index.cpu(), values.cpu()
        last = last_occurrences(index)
        self.values[row, index[last]] = values[last]
        self.present[row, index[last]] = True

    def oscillation(self, row: int, prediction: Tensor) -> Tensor:
        """:func:`oscillation` of ``prediction`` (``(N, C)``) against row ``row``."""
        if self.values is None or self.present is None:
            raise RuntimeError("DistributionBank used before reset()")
        return oscillation(prediction.float().cpu(), self.values[row], self.present[row])

    def state_dict(self) -> dict[str, Any]:
        return {"values": self.values, "present": self.present}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        values, present = state.get("values"), state.get("present")
        if values is not None and tuple(values.shape[::2]) != (self.num_rows, self.num_classes):
            raise ValueError(f"saved bank has shape {tuple(values.shape)}, expected "
                             f"({self.num_rows}, N, {self.num_classes})")
        self.values = None if values is None else values.float().cpu()
        self.present = None if present is None else present.bool().cpu()


def oscillation(prediction: Tensor, bank: Tensor, present: Tensor) -> Tensor:
    """``o_i = KL(p_i || b_i) = sum_c p_ic (log p_ic - log b_ic)`` (official
    ``F.kl_div(b.log(), p, reduction="sum")`` per pair), 0 where the bank holds nothing.

    Args:
        prediction: ``(N, C)`` current pseudo-predictions ``p``.
        bank: ``(N, C)`` stored ones ``b``.
        present: ``(N,)`` bool, whether the bank holds pair ``i``.

    Returns:
        ``(N,)``.
    """
    if prediction.shape != bank.shape or present.shape != prediction.shape[:1]:
        raise ValueError(f"shapes do not fit: prediction {tuple(prediction.shape)}, bank "
                         f"{tuple(bank.shape)}, present {tuple(present.shape)}")
    kl = F.kl_div(bank.log(), prediction, reduction="none").sum(dim=1)
    return torch.where(present, kl, torch.zeros_like(kl))


def labelled_targets(prob: Tensor, stable_prob: Tensor, stable: Tensor) -> Tensor:
    """The labelled pairs' soft labels ``y = w + (1 - w) c [c stable]`` (official ``ptl`` with the
    constant label 1): ``w`` the loss GMM's, ``c`` the oscillation GMM's clean probability,
    ``stable`` its split; all ``(B,)``, returns ``(B,)``."""
    return prob + (1 - prob) * stable_prob * stable.to(prob.dtype)


def match_pseudo_captions(pred_u: Tensor, pred_l: Tensor, floor: float = 0.5
                          ) -> tuple[Tensor, Tensor]:
    """Pseudo-captions: each unlabelled image takes the labelled pair whose image prediction is
    nearest by cosine (first index on ties), and that cosine as its label, 0 below ``floor``.

    Args:
        pred_u: ``(B_u, C)`` the unlabelled images' pseudo-predictions.
        pred_l: ``(B_l, C)`` the labelled (donor) images'.
        floor: labels below it become 0 (official 0.5).

    Returns:
        ``(donor, label)``: ``(B_u,)`` donor positions in the labelled batch and ``(B_u,)``
        labels, with gradients through the kept cosines.
    """
    cos = F.cosine_similarity(pred_u.unsqueeze(1), pred_l.unsqueeze(0), dim=-1, eps=1e-8)
    donor = cos.detach().argmax(dim=1)
    label = cos.gather(1, donor.unsqueeze(1)).squeeze(1)
    return donor, torch.where(label < floor, torch.zeros_like(label), label)


def subset_positions(subset: Tensor, index: Tensor) -> Tensor:
    """Each of ``index``'s pairs' position inside the subset ``subset`` (``(N,)`` bool) in index
    order: the id the official ``labeled``/``unlabeled`` datasets hand out (quirk Q1).
    ``index`` must lie in the subset. Returns ``(B,)`` int64 on ``index``'s device."""
    ranks = subset.long().cumsum(0) - 1
    chosen = index.cpu()
    if not bool(subset[chosen].all()):
        raise ValueError("subset_positions: an index lies outside the subset")
    return ranks[chosen].to(index.device)


@dataclass
class PC2Division:
    """A PC² division for one epoch: the loss co-divide and the oscillation's split.

    Attributes:
        loss: the co-divide of the mean hinges (``prob`` = ``w``, ``clean``), a
            :class:`~ncl.division.co_divide.Division`.
        oscillation: ``(K, N)`` the oscillations the second GMM was fitted on.
        stable_prob: ``(K, N)`` ``c``, the oscillation GMM's low-mean posterior.
        stable: ``(K, N)`` bool, ``c > p_threshold`` with the 1 % fallback.
    """

    loss: Division
    oscillation: Tensor
    stable_prob: Tensor
    stable: Tensor

    @property
    def epoch(self) -> int:
        return self.loss.epoch

    def state(self) -> dict[str, Any]:
        return {"loss": self.loss.state(), "oscillation": self.oscillation,
                "stable_prob": self.stable_prob, "stable": self.stable}

    @classmethod
    def from_state(cls, saved: dict[str, Any] | None) -> PC2Division | None:
        if saved is None:
            return None
        loss = Division.from_state(saved["loss"])
        assert loss is not None
        return cls(loss, saved["oscillation"], saved["stable_prob"], saved["stable"])


def pc2_division(epoch: int, losses: Tensor, oscillations: Tensor, threshold: float = 0.5,
                 gmm_seed: int | None = 0, share: Callable[[Tensor], Tensor] = lambda t: t
                 ) -> PC2Division:
    """The combined division of ``epoch`` (docs/methods/pc2.md step 5): per network a GMM on
    the min-max normalised losses (``w``, ``clean = w > threshold``) and one on the
    oscillations (``c``, ``stable = c > threshold``), each split with NCR's 1 % fallback.

    Args:
        losses, oscillations: ``(K, N)``.
        threshold: ``p_threshold`` (0.5).
        gmm_seed: ``random_state`` of every fit (``None``: numpy's global stream, official).
        share: applied to each ``(K, N)`` probability table before the splits (rank 0's
            broadcast under DDP).
    """
    prob = share(gmm_probabilities(losses, gmm_seed))
    stable_prob = share(gmm_probabilities(oscillations, gmm_seed))
    return PC2Division(Division(epoch, losses, prob, split_clean(prob, threshold)),
                       oscillations, stable_prob, split_clean(stable_prob, threshold))
