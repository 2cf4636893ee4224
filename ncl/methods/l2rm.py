"""L2RM: learning to rematch mismatched pairs (Han et al., CVPR 2024; official code
github.com/hhc1997/L2RM, the reference where the paper is silent: ``docs/methods/l2rm.md``).

One network (SGR or SAF, trained separately; "L2RM-SGRAF" averages their similarities at test
time through ``configs/eval_sgraf_*.yaml``) and a small learned cost function.

* Warm-up (``warmup_epochs``): every pair, the robust loss of
  :func:`~ncl.losses.l2rm.rce_warmup_loss` (reverse cross-entropy averaged with InfoNCE on the
  bidirectional softmax at ``tau``).
* Before every later epoch, :class:`~ncl.callbacks.division.GMMDivision` divides the training
  set: an eval-mode pass of each pair's mean hinge (:func:`~ncl.division.co_divide.mean_hinge`,
  the official ``eval_loss``), a two-component **Beta** mixture on the losses normalised to
  (0, 1) (:func:`~ncl.division.beta_mixture.beta_clean_probability`), clean iff the clean
  component's posterior > 0.5.
* Each step then takes a batch of predicted-clean pairs and one of predicted-noisy pairs
  (:func:`~ncl.training.plans.rematch_plan`) and runs the official three phases:

  A. the cost network learns on key points: a random 1-10 % of the clean batch's images put
     into a copy of the image queue, the summed cost at those (image, caption) pairs
     minimised (:mod:`ncl.transport.cost`; the retrieval network in eval mode, no gradient);
  B. the queue takes the noisy batch's images (first in, first out);
  C. the retrieval network: the hardest-negative triplet summed over the clean batch, plus the
     symmetric KL (:func:`~ncl.losses.l2rm.symmetric_kl_loss`) between its matching
     distributions of the noisy captions against the queue and the normalised partial
     transport plan (:func:`~ncl.transport.partial_ot.partial_ot`) of the learned cost,
     each noisy caption's own image masked out.

State (checkpointed): the division (a :class:`~ncl.division.co_divide.Division` with one row),
the cost network (a submodule, identical on every rank) and the image queue, per rank under DDP
(:mod:`ncl.methods.l2rm_support`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor

from ncl.callbacks.division import GMMDivision, divide_if_due
from ncl.callbacks.protocols import EpochDiagnostics, GMMSpec, PassSpec
from ncl.data.contracts import retrieval_data
from ncl.data.datasets import Batch, PairDataset
from ncl.division.co_divide import Division, division_made_for, mean_hinge
from ncl.losses.l2rm import rce_warmup_loss, symmetric_kl_loss
from ncl.losses.triplet import triplet_loss
from ncl.methods.base import BackboneFactory, RetrievalMethod, default_optimizer
from ncl.methods.l2rm_support import (check_queue_fits, epoch_plan, fill_queue,
                                      gather_queue_indices, legacy_division,
                                      masks_own_image, no_region_lengths, other_cost_width,
                                      rematch_accuracy)
from ncl.methods.reports import beta_division_report
from ncl.methods.skeleton import check_ranges
from ncl.methods.declaration import BENCHMARK_WARMUP, MethodSpec, RegressionCase, Row, TINY_RUN_ARGS
from ncl.models.contracts import forward_batch
from ncl.training.passes import eval_mode
from ncl.training.plans import PlanLoader, StepDataset
from ncl.streams import declare_stream
from ncl.transport.cost import (CostNetwork, ImageQueue, draw_key_points, insert_key_points,
                                key_point_cost_loss, learned_cost_plan)
from ncl.transport.partial_ot import PartialPlan

MaskOwnImage = Literal["auto", "on", "off"]

#: Stream ids of the method's own draws (:mod:`ncl.streams`): the division pass's
#: shuffle, the first queue, the key points of each step.
DIVISION_STREAM = declare_stream(51, "l2rm.division")
QUEUE_STREAM = declare_stream(52, "l2rm.queue")
KEY_STREAM = declare_stream(53, "l2rm.key_points")


class L2RM(RetrievalMethod):
    """L2RM LightningModule (one network and a cost network, manual optimisation).

    Args:
        vocab_size, backbone: as :class:`~ncl.methods.base.RetrievalMethod`; the backbone is
            SGR or SAF (any backbone whose ``forward(images, tokens, lengths)`` scores every
            image against every caption in (0, 1) works). Forwarded options too
            (``grad_clip`` 2.0 clips the retrieval network only, as the official code).
        optimizer: the retrieval network's (Adam, lr 2e-4, official).
        lr_update: both learning rates times 0.1 every ``lr_update`` epochs after the warm-up
            (official per dataset: F30K 15, COCO 10, CC152K 20); the warm-up runs at lr0.
        warmup_epochs: epochs of the robust warm-up loss (F30K 5, COCO and CC152K 10).
        margin: the triplet margin of the clean loss and of the division's mean hinge (0.2).
        tau: temperature of the warm-up loss and of the symmetric KL (0.05).
        queue_length: images in the queue (128); at least the per-process batch size.
        reg: the transport's entropic regularisation (``opt.py`` 0.07; F30K's script 0.01).
        rho: the transported mass (0.1).
        lr_cost: the cost network's Adam learning rate (2e-6), decayed with the main schedule.
        key_fraction: key points per step ``k ~ U{1 .. floor(key_fraction * B)}`` (0.1).
        mask_own_image: mask each noisy caption's own image in the plan: ``auto`` (official:
            when the data's ``noise_ratio`` is not 0; CC152K runs with 0), ``on`` or ``off``.
        sinkhorn_max_iter, sinkhorn_threshold: the official 1000 iterations and 1e-3 stop.
        dummy_scale: the dummy row and column cost ``dummy_scale * max(C)`` (100, official).
        bmm_max_iter, bmm_tol: the Beta mixture's first fit (10, 1e-2).
        bmm_refine_tol: the official second fit, EM continued until the summed
            log-likelihood gains at most this (0.1); ``None`` skips it (the issue text's "10
            iterations, tol 1e-2" alone).
        bmm_seed: seed of the mixture's k-means++ start (the official seeds numpy with 0).
        bmm_density_clamp: ``x`` clamped to ``[c, 1 - c]`` in the Beta density (fork 1e-6; 0: none).
        division_batch_size: batch of the division pass (``None``: the training batch size).
        (``diagnostics``, the base's: the division's quality and the rematching's.)
    """

    spec: ClassVar[MethodSpec] = MethodSpec(
        # 5 warm-up epochs, the queue as long as the batch (official 128 = 128), else defaults
        rows=(Row("l2rm", "L2RM-{}", order=120, warmup=True, paper_config="l2rm_{bb}_{ds}",
                  small_backbones=("SGR",),
                  divides="beta division",
                  overrides=("--model=ncl.methods.l2rm.L2RM", f"--model.warmup_epochs={BENCHMARK_WARMUP}",
                             "--model.queue_length=64"),
                  small=("--model.queue_length=16",)),),
        # state: division, cost network + optimiser, a queue of 2 batches (the FIFO shift
        # matters), key points per step; lr_cost raised so the cost network moves visibly
        tiny={"l2rm": {"warmup_epochs": 1, "queue_length": 32, "lr_cost": 1e-3}},
        regression={"l2rm": RegressionCase("l2rm_sgr_f30k.yaml", (
            *TINY_RUN_ARGS, "--model.warmup_epochs=1", "--model.queue_length=32",
            "--model.lr_cost=0.001"))},
        page="l2rm.md", config_prefixes=("l2rm_",))

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = default_optimizer, lr_update: int = 15,
                 warmup_epochs: int = 5, margin: float = 0.2, tau: float = 0.05,
                 queue_length: int = 128, reg: float = 0.07, rho: float = 0.1,
                 lr_cost: float = 2e-6, key_fraction: float = 0.1,
                 mask_own_image: MaskOwnImage = "auto", sinkhorn_max_iter: int = 1000,
                 sinkhorn_threshold: float = 1e-3, dummy_scale: float = 100.0,
                 bmm_max_iter: int = 10, bmm_tol: float = 1e-2, bmm_refine_tol: float | None = 0.1,
                 bmm_seed: int | None = 0, bmm_density_clamp: float = 1e-6,
                 division_batch_size: int | None = None, select_warmup: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(vocab_size, backbone, optimizer=optimizer, lr_update=lr_update,
                         n_networks=1, select_warmup=select_warmup, **kwargs)
        self.save_hyperparameters(ignore=["backbone", "optimizer"])
        _check_ranges(self.hparams)
        self.automatic_optimization = False
        # Training state (checkpointed):
        # Lazy until the batch size (its width) is known: setup("fit") or a checkpoint's shape.
        self.cost_net = CostNetwork()
        self.queue = ImageQueue(queue_length)
        self.division: Division | None = None  # (1, N) losses, Beta posteriors, clean mask
        self._saved_queues: Tensor | None = None  # every rank's queue, from a checkpoint

    # ------------------------------------------------------------------ Lightning wiring
    def method_callbacks(self) -> list[L.Callback]:
        """The Beta-mixture division before every epoch after the warm-up."""
        return [GMMDivision()]

    def setup(self, stage: str) -> None:
        """Give the cost network its width, the per-process batch size (before DDP wraps the
        model: it cannot wrap lazy parameters; a checkpoint of another width replaces it in
        :meth:`on_load_checkpoint`). For ``fit``: check the queue against the batch and take
        over the training loader (warm-up passes, then the clean/noisy plan)."""
        super().setup(stage)
        dm = retrieval_data(self.trainer, "L2RM")
        if self.cost_net.width is None:
            self.cost_net.materialize(int(dm.batch_size))
        if stage != "fit":
            return
        check_queue_fits(self.hparams.queue_length, dm.batch_size)
        self.take_train_loader(self.l2rm_dataloader, "L2RM")

    def extra_optimizers(self) -> list[torch.optim.Optimizer]:
        """The cost network's Adam (``lr_cost``), on the same schedule as the network's."""
        return [torch.optim.Adam(self.cost_net.parameters(), lr=self.hparams.lr_cost)]

    def clips(self, optimizer: torch.optim.Optimizer) -> bool:
        """Only the retrieval network is clipped (not the cost network, as the official code)."""
        return optimizer is self.optimizers()[0].optimizer

    # ------------------------------------------------------------------ schedule
    #: lr0 in the warm-up, then ``0.1 ** ((epoch - warmup) // lr_update)`` (official).
    default_lr_schedule, logs_lr_factor = "after_warmup", True

    def l2rm_dataloader(self, pairs: PairDataset) -> PlanLoader:
        """This epoch's loader: a shuffled pass over every pair (warm-up) or the clean/noisy
        plan of the epoch's division, made here if missing (the loader is built before any
        epoch-start hook; :func:`~ncl.callbacks.division.divide_if_due`)."""
        trainer, epoch = self.trainer, self.current_epoch
        dm = retrieval_data(trainer, "L2RM")
        warmup = self.is_warmup_epoch(epoch)
        if not warmup:
            divide_if_due(trainer, self, epoch)
        steps = epoch_plan(len(pairs), None if warmup else self.division.clean[0], dm.batch_size,
                           self.training_seed, epoch, trainer.global_rank, trainer.world_size,
                           warn=self.global_rank == 0)
        return PlanLoader(StepDataset(pairs, steps), dm.num_workers,
                          pin_memory=self.device.type == "cuda")

    # ------------------------------------------------------------------ division (GMMDivisible)
    def division_due(self, epoch: int) -> bool:
        return not self.is_warmup_epoch(epoch) and not division_made_for(self.division, epoch)

    def division_pass(self, epoch: int) -> tuple[PassSpec, GMMSpec]:
        """Every pair's mean hinge in eval mode over one shuffle cut into batches of the
        training size (the official ``eval_loss`` on a shuffled loader), and the Beta mixture."""
        hp = self.hparams
        size = hp.division_batch_size or retrieval_data(self.trainer, "L2RM").batch_size
        spec = PassSpec(mean_hinge(hp.margin), (0,), size, True, DIVISION_STREAM, self.training_seed)
        return spec, GMMSpec(0, hp.bmm_seed, hp.bmm_max_iter, hp.bmm_tol, mixture="beta",
                             refine_tol=hp.bmm_refine_tol, density_clamp=hp.bmm_density_clamp)

    def accept_division(self, epoch: int, values: Tensor, clean_prob: Tensor) -> None:
        """Clean iff the clean component's posterior > 0.5 (official, strict); ``values`` and
        ``clean_prob`` are ``(1, N)``."""
        prob = clean_prob.float()
        self.division = Division(epoch, values.float(), prob, prob > 0.5)

    # ------------------------------------------------------------------ state
    def training_state(self) -> dict[str, Any]:
        """The division (identical on every rank). The queue is per rank: every rank's is
        added to the checkpoint by :meth:`on_save_checkpoint`."""
        return {"division": None if self.division is None else self.division.state()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        """The division, also from a checkpoint of ncl before the shared Division record
        (``division_epoch``, ``clean_prob``, ``division_losses``, each ``(N,)``)."""
        self.division = Division.from_state(state["division"]) if "division" in state else \
            legacy_division(state)
        self._saved_queues = state.get("queues")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep every rank's queue (``queues``: ``(world, Q)`` pair indices, -1 while empty):
        the queue is per rank, and only rank 0 writes the file. Lightning calls this hook on
        every rank (``Trainer.save_checkpoint`` runs on all of them), so the gather is safe."""
        super().on_save_checkpoint(checkpoint)
        state = checkpoint.setdefault("ncl_training_state", {})
        state["queues"] = gather_queue_indices(self.queue, self.hparams.queue_length, self.device)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A checkpoint whose cost network has another width (its run's batch size): a resumed
        fit must keep that batch size; evaluation takes the checkpoint's cost network as it is."""
        width = other_cost_width(checkpoint, self.cost_net.width, self.trainer.state.fn == "fit")
        if width is not None:
            self.cost_net = CostNetwork(width).to(self.device)
        super().on_load_checkpoint(checkpoint)

    # ------------------------------------------------------------------ training
    def training_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        if self.is_warmup_epoch(self.current_epoch):
            self.warmup_step(batch["labelled"])
        else:
            self.rematch_step(batch["labelled"], batch.get("unlabelled"), batch_idx)

    def warmup_step(self, batch: Batch) -> None:
        """The robust warm-up loss on every pair of the batch."""
        sims = forward_batch(self.net, batch).float()  # (B, B)
        loss = rce_warmup_loss(sims, self.hparams.tau)
        self.step_module(self.optimizers()[0], self.net, loss)
        self.log_train({"loss": loss.detach(), "warmup": loss.detach()}, int(sims.shape[0]))

    def rematch_step(self, clean: Batch, noisy: Batch | None, batch_idx: int) -> None:
        """Phases A (cost network on key points), B (queue) and C (retrieval network); an idle
        epoch's single short batch (:func:`~ncl.methods.l2rm_support.idle_plan`) trains nothing."""
        hp = self.hparams
        if int(clean["index"].shape[0]) < self.cost_net.width:
            self.log("train/idle", 1.0, on_step=False, on_epoch=True, reduce_fx="max", batch_size=1)
            return
        net_opt, cost_opt = self.optimizers()
        logs: dict[str, Tensor | float] = {}
        if noisy is not None:
            no_region_lengths(clean, noisy)
            if not self.queue.ready:  # a checkpoint's (this rank's row) or drawn
                rng = np.random.default_rng([self.training_seed, self.current_epoch, QUEUE_STREAM,
                                             self.global_rank])
                fill_queue(self.queue, retrieval_data(self.trainer, "L2RM").train_pairs(),
                           self._saved_queues, rng, self.device)
                self._saved_queues = None
            logs["cost"] = self.cost_step(clean, batch_idx, cost_opt)
            self.queue.push(noisy["images"], noisy["index"])
        sims = forward_batch(self.net, clean).float()  # (B, B)
        loss_clean = triplet_loss(sims, hp.margin, "hardest").sum()
        loss = loss_clean
        if noisy is not None:
            queue_sims = self.net(self.queue.features, noisy["tokens"], noisy["lengths"]).float()
            plan = self.transport_plan(queue_sims.detach())  # (Q, B)
            loss_noisy = symmetric_kl_loss(queue_sims, plan.plan, hp.tau)
            loss = loss + loss_noisy
            logs.update({"noisy": loss_noisy.detach(), "transported": plan.mass,
                         "sinkhorn_iterations": float(plan.iterations)})
            data = retrieval_data(self.trainer, "L2RM")
            logs.update(rematch_accuracy(data, self.queue.indices, noisy["index"], plan.plan))
        self.step_module(net_opt, self.net, loss)
        self.log_train({"loss": loss.detach(), "clean": loss_clean.detach(), **logs},
                       int(sims.shape[0]))

    def cost_step(self, clean: Batch, batch_idx: int, opt: Any) -> Tensor:
        """Phase A: key points (clean images in random queue slots, a copy) supervise the cost
        network: the summed cost at those pairs is minimised; the retrieval network scores them
        in eval mode without gradient (official)."""
        width = int(clean["index"].shape[0])
        rng = np.random.default_rng([self.training_seed, self.current_epoch, KEY_STREAM,
                                     batch_idx, self.global_rank])
        slots, positions = draw_key_points(width, self.hparams.queue_length, rng,
                                            self.hparams.key_fraction)
        keys = insert_key_points(self.queue.features, clean["images"], slots.to(self.device),
                                 positions.to(self.device))
        with eval_mode(self.net), torch.no_grad():
            sims = self.net(keys, clean["tokens"], clean["lengths"]).float()  # (Q, B)
        loss = key_point_cost_loss(self.cost_net(sims), slots.to(self.device),
                                   positions.to(self.device))
        self.step_module(opt, self.cost_net, loss)
        return loss.detach()

    def transport_plan(self, sims: Tensor) -> PartialPlan:
        """The partial plan of the learned cost ``max(f(S), 1e-10)`` (no gradient), each
        noisy caption's own image masked when ``mask_own_image`` says so
        (:func:`~ncl.transport.cost.learned_cost_plan`)."""
        hp = self.hparams
        masked = masks_own_image(hp.mask_own_image, retrieval_data(self.trainer, "L2RM"))
        return learned_cost_plan(self.cost_net, sims, masked, hp.rho, hp.reg, hp.sinkhorn_max_iter,
                                 hp.sinkhorn_threshold, hp.dummy_scale)

    # ------------------------------------------------------------------ diagnostics
    def epoch_diagnostics(self, epoch: int, true_clean: Tensor | None) -> EpochDiagnostics:
        """The division epoch ``epoch`` trains on (:func:`~ncl.methods.reports.beta_division_report`)."""
        if self.is_warmup_epoch(epoch) or not division_made_for(self.division, epoch):
            return EpochDiagnostics()
        return beta_division_report(self.division, true_clean, self.hparams.bmm_seed)


def _check_ranges(hp: Any) -> None:
    """Raise ConfigError naming the offending ``model.*`` option."""
    check_ranges(hp, integers={"warmup_epochs": 0, "queue_length": 1, "sinkhorn_max_iter": 1,
                               "bmm_max_iter": 1}, nonnegative=["bmm_density_clamp"],
                 positive=["margin", "tau", "reg", "lr_cost", "sinkhorn_threshold", "dummy_scale",
                           "bmm_tol"], open_unit=["rho"], fractions=["key_fraction"],
                 optional_positive=["bmm_refine_tol"], batch_sizes=["division_batch_size"])
