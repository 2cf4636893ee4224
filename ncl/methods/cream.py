"""CREAM (Ma et al., TIP 2024): consistency refining and mining with two SGRAF networks.

Official code: XLearning-SCU/2024-TIP-CREAM (``train.py``, ``InfoNCELoss.py``, ``model.py``,
``data.py``, ``run.py``); ncl's reading of it, quirk by quirk, is ``docs/methods/cream.md``.

* Warm-up (``warmup_epochs``, 5): A then B, each one pass over its own shuffle of every pair,
  plain InfoNCE (``T = 0.07``, :func:`~ncl.losses.cream.per_sample_infonce`, mean); then the
  official warm-up selection (``warmup_selection``): the last warm-up epoch whose validation
  rSum *and* six recalls all beat every earlier epoch's is loaded back into both networks
  before the first division (no such epoch: fresh networks).
* Every co-training epoch: a division (:class:`~ncl.callbacks.division.GMMDivision`): both
  networks in eval mode over one shuffle of the training set, ``l_i = L^r_ii + L^c_ii``, a GMM
  per network, the agreement split into clean / hard / noisy
  (:func:`~ncl.division.cream.agreement_split`), one split for both networks.
* A trains a whole epoch, then B (:mod:`ncl.training.cream_plans`). An iteration of network
  ``k``: its targets in eval mode without gradient (:mod:`ncl.division.cream`), the filter
  (:func:`~ncl.losses.cream.batch_filter`, :func:`~ncl.losses.cream.step_filters`), then up to
  three optimiser steps, each its own forward, backward, clip and step: the clean batch, the
  hard batch (from co-training epoch ``hard_start_epoch``), the noisy batch (from
  ``noisy_start_epoch``), each with the soft-label InfoNCE
  (:func:`~ncl.losses.cream.soft_label_infonce`).
* Evaluation averages the two networks' similarities (the base's ensemble).

State (checkpointed, identical on every rank): the division, and during the warm-up the
selection's running maxima and the selected epoch's weights.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, get_args

import torch
from torch import Tensor

from ncl.callbacks.protocols import EpochDiagnostics
from ncl.data.datasets import Batch
from ncl.division.cream import agreement_split, clean_targets, hard_targets, mined_targets
from ncl.errors import ConfigError
from ncl.losses.cream import batch_filter, per_sample_infonce, soft_label_infonce, step_filters
from ncl.methods.base import BackboneFactory
from ncl.methods.cream_support import SplitCoTraining, subset_report
from ncl.methods.declaration import BENCHMARK_WARMUP, MethodSpec, RegressionCase, Row, TINY_RUN_ARGS
from ncl.methods.skeleton import check_ranges
from ncl.models.contracts import forward_batch
from ncl.streams import declare_stream
from ncl.training.passes import eval_mode

WarmupSelection = Literal["official", "last"]

# The grid rows: the official hard and noisy starts (co-training epochs 10 and 15 of 40, a
# quarter and three eighths of the co-training) scaled to the benchmark's 9 co-training epochs
# (14 - 5 warm-up: 2 and 3) and synthetic-small's 5 (8 - 3: 1 and 2), rounded down.
BENCHMARK_STARTS = ("--model.hard_start_epoch=2", "--model.noisy_start_epoch=3")
SMALL_STARTS = ("--model.hard_start_epoch=1", "--model.noisy_start_epoch=2")

#: Stream ids: the division pass's shuffle, the fresh networks of an unselected warm-up.
DIVISION_STREAM = declare_stream(75, "cream.division")
REINIT_STREAM = declare_stream(76, "cream.reinit")


class CREAM(SplitCoTraining):
    """CREAM LightningModule (two networks A and B, manual optimisation).

    Args:
        vocab_size, backbone: as :class:`~ncl.methods.base.RetrievalMethod`, and so are its
            options: Adam 2e-4, clip 2.0 per optimiser step, ``lr_update`` 10 (times 0.1 every
            10 co-training epochs; the warm-up at lr0), ``select_warmup`` false (the official
            best model is among the co-training epochs).
        warmup_epochs: InfoNCE warm-up epochs (5). ``trainer.max_epochs`` = warm-up +
            co-training epochs (40; COCO 20).
        temperature: ``T`` of every InfoNCE (0.07; hard-coded in the official model, whose
            ``--temperature`` option is never read).
        p_threshold: each network's GMM threshold (0.5, official 1 % rule).
        hard_start_epoch: co-training epoch (0-based) from which the hard batch trains (10); it
            also sets the clean filter ``max(hard_start_epoch - epoch, filter)``.
        noisy_start_epoch: co-training epoch from which the noisy batch trains (15).
        soft_label: the soft-label InfoNCE (official default true; the option is ``type=bool``,
            so any value given on the official command line is true). False: plain InfoNCE
            on every batch, the targets unused.
        smooth_label: the uniform soft negatives ``(1 - y_i) / (B - 1)`` instead of the
            similarity-shaped ones (official default false; ``type=bool`` as above).
        clean_fraction_rule: the clean fraction above which the clean and hard filters are 0
            (0.85).
        soft_label_eps: the constant added to the row and column sums of the weights (1e-6).
        warmup_selection: ``official`` (see above) or ``last`` (keep the last warm-up epoch).
        gmm_seed: ``random_state`` of the GMMs; the official code sets none (``None``: numpy's
            global stream, not reproducible on resume); 0 by default.
        division_shuffle: the division pass over a shuffle of the pairs (official: the shuffled
            warm-up loader, so a pair's loss depends on its batch-mates) or in index order.
        seed: seed of the batch plans and the division's shuffle; ``None``: the run's.
    """

    spec: ClassVar[MethodSpec] = MethodSpec(
        rows=(Row("cream", "CREAM-{}", order=160, warmup=True, paper_config="cream_{bb}_{ds}",
                  divides="agreement", small_backbones=("SGR",),
                  overrides=("--model=ncl.methods.cream.CREAM", f"--model.warmup_epochs={BENCHMARK_WARMUP}",
                             *BENCHMARK_STARTS),
                  small=SMALL_STARTS),),
        tiny={"cream": {"warmup_epochs": 1, "hard_start_epoch": 0, "noisy_start_epoch": 1}},
        regression={"cream": RegressionCase("cream_sgr_f30k.yaml", (
            *TINY_RUN_ARGS, "--model.warmup_epochs=2", "--model.hard_start_epoch=0",
            "--model.noisy_start_epoch=1"))},
        page="cream.md", config_prefixes=("cream_",))

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *, warmup_epochs: int = 5,
                 temperature: float = 0.07, p_threshold: float = 0.5, hard_start_epoch: int = 10,
                 noisy_start_epoch: int = 15, soft_label: bool = True, smooth_label: bool = False,
                 clean_fraction_rule: float = 0.85, soft_label_eps: float = 1e-6,
                 warmup_selection: WarmupSelection = "official", gmm_seed: int | None = 0,
                 division_shuffle: bool = True, seed: int | None = None, lr_update: int = 10,
                 **kwargs: Any) -> None:
        super().__init__(vocab_size, backbone, n_networks=2, lr_update=lr_update, **kwargs)
        self.save_hyperparameters(ignore=["backbone", "optimizer"])
        _check_ranges(self.hparams)
        self.init_state(seed)

    division_stream, reinit_stream = DIVISION_STREAM, REINIT_STREAM

    def split(self, prob: Tensor) -> Tensor:
        """The agreement split (:func:`~ncl.division.cream.agreement_split`), one for both."""
        return agreement_split(prob, self.hparams.p_threshold)

    def iteration_targets(self, k: int, clean: Batch, hard: Batch | None, noisy: Batch | None
                          ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Network ``k``'s targets of the three batches, both networks in eval mode, no gradient."""
        net, peer = self.nets[k], self.nets[1 - k]
        prob = self.division.prob_on(clean["index"].device)  # (2, N)
        with torch.no_grad(), eval_mode(net, peer):
            t_c = clean_targets(prob[1 - k][clean["index"]], self.predict_pairs(net, clean))
            t_h = t_u = None
            if hard is not None:
                t_h = hard_targets(prob[0][hard["index"]], prob[1][hard["index"]],
                                   self.predict_pairs(net, hard))
            if noisy is not None:
                t_u = mined_targets(self.predict_pairs(net, noisy), self.predict_pairs(peer, noisy))
        return t_c, t_h, t_u

    def cotrain_step(self, k: int, clean: Batch, hard: Batch | None, hard_fresh: bool,
                     noisy: Batch | None) -> None:
        """One iteration of network ``k`` (official ``train_one_epoch``): targets, filters, then
        the clean step, the hard step (from ``hard_start_epoch``, a fresh batch of two or more)
        and the noisy step (from ``noisy_start_epoch``, a batch of two or more)."""
        hp, epoch = self.hparams, self.cotrain_epoch()
        t_c, t_h, t_u = self.iteration_targets(k, clean, hard, noisy)
        sizes = self.division.sizes()
        counts = (sizes["clean"], sizes["hard"] if hard is not None else 0,
                  sizes["noisy"] if noisy is not None else 0)
        means = (float(t_c.mean()), float(t_h.mean()) if t_h is not None else 0.0,
                 float(t_u.mean()) if t_u is not None else 0.0)
        filters = step_filters(batch_filter(means, counts), sizes["clean"] / self.division.subset.numel(),
                               epoch, hp.hard_start_epoch, hp.clean_fraction_rule)
        logs = {"loss_clean": self.soft_step(k, clean, t_c, filters.clean),
                "target_clean": t_c.mean(), "filter": filters.noisy}
        if epoch >= hp.hard_start_epoch and hard is not None and hard_fresh and len(hard["index"]) > 1:
            logs["loss_hard"] = self.soft_step(k, hard, t_h, filters.hard)
        if epoch >= hp.noisy_start_epoch and noisy is not None and len(noisy["index"]) > 1:
            logs["loss_noisy"] = self.soft_step(k, noisy, t_u, filters.noisy)
        self.log_net(k, logs, int(clean["index"].shape[0]))

    def soft_step(self, k: int, batch: Batch, targets: Tensor, filter_value: float) -> Tensor:
        """One optimiser step of network ``k`` (train mode) on one batch; returns the loss."""
        hp = self.hparams
        sims = forward_batch(self.nets[k], batch)
        if hp.soft_label:
            loss = soft_label_infonce(sims, targets, hp.temperature, filter_value,
                                      hp.soft_label_eps, hp.smooth_label)
        else:
            loss = per_sample_infonce(sims, hp.temperature).mean()
        self.optimize(k, loss)
        return loss.detach()

    # ------------------------------------------------------------------ diagnostics
    def epoch_diagnostics(self, epoch: int, true_clean: Tensor | None) -> EpochDiagnostics:
        """The division made for ``epoch``: subset sizes (``cream/{clean,hard,noisy}``), with the
        ground truth the truly noisy pairs in each, the noisy subset as the detected noise."""
        division = self.division
        if division is None or division.epoch != epoch:
            return EpochDiagnostics()
        return subset_report(division, division.subset, self.network_names, self.hparams.gmm_seed,
                             true_clean, "cream")


def _check_ranges(hp: Any) -> None:
    """Raise ConfigError naming the offending ``model.*`` option."""
    if hp.warmup_selection not in get_args(WarmupSelection):
        raise ConfigError(f"model.warmup_selection must be one of {get_args(WarmupSelection)}, "
                          f"got {hp.warmup_selection!r}")
    check_ranges(hp, integers={"warmup_epochs": 0, "hard_start_epoch": 0, "noisy_start_epoch": 0},
                 positive=["temperature"], nonnegative=["soft_label_eps"],
                 unit=["p_threshold", "clean_fraction_rule"])
