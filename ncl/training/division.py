"""Co-divide of NCR/LNC as plain functions and data (no Lightning): per-sample losses over
the whole training set, GMM clean probabilities, the clean/noisy split, and LNC's Randomly
Noise Abandon (LNC Eq. 1-3 and 7, Alg. 1; spec 4.2.3-4.2.5).

The losses come from :func:`ncl.training.passes.per_sample_pass` in eval mode without
gradients. Under DDP each rank computes the losses of whole batches dealt to it, the losses
are gathered **by dataset index**, the GMM is fitted on every rank on identical input, and
rank 0's probabilities are broadcast so that every rank holds bit-identical divisions.
The method owns the resulting :class:`Division` (its training state); the callback
:class:`ncl.callbacks.co_divide.CoDivide` decides when it is computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import Dataset

from ncl.division import (
    CleanRule,
    gmm_clean_probability,
    noise_abandon_mask,
    split_by_probability,
)
from ncl.losses import triplet_loss
from ncl.training.distributed import broadcast_
from ncl.training.passes import PerSampleFn, local_values, per_sample_pass
from ncl.training.plans import division_batches


@dataclass
class Division:
    """The division made for one epoch (before its first batch).

    Attributes:
        epoch: the (Lightning) epoch it was made for.
        losses: ``(K, N)`` raw per-sample losses of each network (spec 4.2.4).
        prob: ``(K, N)`` clean probability ``w`` from each network's losses (LNC Eq. 3).
        clean: ``(K, N)`` bool predicted-clean masks (threshold + official fallback).
        keep: ``(N,)`` bool warm-up keep mask of Randomly Noise Abandon, or ``None``.
    """

    epoch: int
    losses: Tensor
    prob: Tensor
    clean: Tensor
    keep: Tensor | None = None

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "losses": self.losses, "prob": self.prob,
                "clean": self.clean, "keep": self.keep}


def mean_hinge(margin: float) -> PerSampleFn:
    """NCR's per-sample "eval_loss" (spec 4.2.1, 4.2.4) as a per-sample function:
    ``l_i = mean_j C_s[i, j] + mean_r C_im[r, i]`` over the whole batch, zero diagonal included."""
    def fn(net: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        # image_lengths only when the batch's region counts differ (collate); SGRAF never gets it
        extra = {"image_lengths": batch["image_lengths"]} if "image_lengths" in batch else {}
        sims = net(batch["images"], batch["tokens"], batch["lengths"], **extra)  # (B, B)
        return triplet_loss(sims.float(), margin=margin, negatives="mean")  # (B,)
    return fn


@torch.no_grad()
def local_losses(net: nn.Module, pairs: Dataset, batches: Sequence[np.ndarray],
                 device: torch.device, margin: float = 0.2, num_workers: int = 0) -> tuple[Tensor, Tensor]:
    """Per-sample mean hinge of ``net`` (eval mode) over the given batches.

    Returns:
        ``(index, loss)``: ``(n,)`` int64 dataset indices and ``(n,)`` float32 losses, on
        ``device``.
    """
    return local_values(net, pairs, batches, mean_hinge(margin), device, num_workers)


def division_losses(nets: Sequence[nn.Module], pairs: Dataset, batch_size: int, seed: int,
                    epoch: int, device: torch.device, margin: float = 0.2, shuffle: bool = True,
                    rank: int = 0, world: int = 1, num_workers: int = 0) -> Tensor:
    """Per-sample losses of every network over the whole training set, gathered by index.

    Each network gets its own shuffle (the official code iterates its shuffled loader once
    per network). Batches are formed globally and dealt whole to ranks, so the result is the
    same for any number of processes (:func:`ncl.training.plans.division_batches`).

    Args:
        nets: the networks (their train/eval modes are restored afterwards).
        pairs: the noisy training pairs (items as :class:`~ncl.data.datasets.PairDataset`).
        batch_size: batch size of the loss pass (the training batch size, as the official).
        seed, epoch: seed of the shuffles.
        device: where the networks live.
        margin: the hinge margin (0.2).
        shuffle: shuffled batches (official) or index order.
        rank, world: DDP position (collectives only when ``world > 1``).
        num_workers: DataLoader workers for reading the pairs.

    Returns:
        ``(K, N)`` float32 on ``device``, identical on every rank.
    """
    n = len(pairs)
    batches = [division_batches(n, batch_size, seed, epoch, k, shuffle, rank, world)
               for k in range(len(nets))]
    return per_sample_pass(nets, pairs, batches, mean_hinge(margin), device, num_workers)


def divide(losses: Tensor, threshold: float = 0.5, clean_rule: CleanRule = "greater",
           gmm_seed: int | None = 0, max_iter: int = 10, tol: float = 1e-2,
           reg_covar: float = 5e-4) -> tuple[Tensor, Tensor]:
    """GMM clean probability and predicted-clean mask of every network's losses.

    Args:
        losses: ``(K, N)`` per-sample losses.
        threshold, clean_rule: the co-divide threshold (0.5, official ``>``).
        gmm_seed, max_iter, tol, reg_covar: the GMM (official 10 / 1e-2 / 5e-4, spec 4.2.4).

    Returns:
        ``(prob, clean)``, each ``(K, N)`` (float32 and bool), on the device of ``losses``.
    """
    probs = torch.stack([gmm_clean_probability(row, max_iter, tol, reg_covar, gmm_seed).float()
                         for row in losses])
    broadcast_(probs)  # bit-identical divisions on every rank, whatever BLAS did
    clean = torch.stack([split_by_probability(p, threshold, clean_rule) for p in probs])
    return probs, clean


@dataclass(frozen=True)
class DivisionConfig:
    """Settings of the co-divide (spec 4.2.4; LNC Eq. 7).

    Attributes:
        margin: margin of the per-sample losses (0.2).
        p_threshold: threshold on the clean probability (0.5).
        clean_rule: ``greater`` (official ``w > t``) or ``greater_equal`` (LNC Alg. 1).
        gmm_seed: ``random_state`` of the GMM; ``None`` draws from numpy's global RNG as the
            official code does (then only rank 0's fit is used under DDP).
        gmm_max_iter, gmm_tol, gmm_reg_covar: GMM settings (10, 1e-2, 5e-4).
        shuffle: per-sample losses over shuffled batches (official) or in index order.
        batch_size: batch size of the loss pass; ``None`` uses the training batch size.
        seed: seed of the shuffles and of the noise-abandon draw.
        abandon_fraction: fraction of the doubly-noisy pairs dropped (0.5).
        abandon_threshold: a pair is noisy for a network when ``w < abandon_threshold``.
    """

    margin: float = 0.2
    p_threshold: float = 0.5
    clean_rule: CleanRule = "greater"
    gmm_seed: int | None = 0
    gmm_max_iter: int = 10
    gmm_tol: float = 1e-2
    gmm_reg_covar: float = 5e-4
    shuffle: bool = True
    batch_size: int | None = None
    seed: int = 0
    abandon_fraction: float = 0.5
    abandon_threshold: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.p_threshold <= 1.0:
            raise ValueError(f"p_threshold must lie in [0, 1], got {self.p_threshold}")
        if not 0.0 <= self.abandon_fraction <= 1.0:
            raise ValueError(f"abandon_fraction must lie in [0, 1], got {self.abandon_fraction}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")


def abandon_mask(prob: Tensor, epoch: int, config: DivisionConfig) -> Tensor:
    """Randomly Noise Abandon keep mask from two networks' probabilities (LNC Eq. 7).

    The draw uses a generator seeded by ``(seed, epoch)``: the same on every rank and after
    a resume.
    """
    if prob.shape[0] != 2:
        raise ValueError(f"noise abandon needs two networks' probabilities, got {prob.shape[0]}")
    noisy = prob.cpu() < config.abandon_threshold  # (2, N), strict as Eq. 7
    generator = torch.Generator().manual_seed(config.seed * 1_000_003 + epoch)
    return noise_abandon_mask(noisy[0], noisy[1], config.abandon_fraction, generator=generator)


def compute_division(config: DivisionConfig, nets: Sequence[nn.Module], pairs: Dataset,
                     batch_size: int, epoch: int, device: torch.device, rank: int = 0,
                     world: int = 1, num_workers: int = 0, abandon: bool = False) -> Division:
    """Run the loss pass, the GMM, the split and (if ``abandon``) the RNA draw for ``epoch``.

    Returns:
        The :class:`Division` (tensors on the CPU), identical on every rank.
    """
    losses = division_losses(nets, pairs, config.batch_size or batch_size, config.seed, epoch,
                             device, config.margin, config.shuffle, rank, world, num_workers)
    prob, clean = divide(losses, config.p_threshold, config.clean_rule, config.gmm_seed,
                         config.gmm_max_iter, config.gmm_tol, config.gmm_reg_covar)
    keep = abandon_mask(prob, epoch, config) if abandon else None
    return Division(epoch, losses.cpu(), prob.cpu(), clean.cpu(), None if keep is None else keep.cpu())
