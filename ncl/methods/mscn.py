"""MSCN: noisy correspondence learning with meta similarity correction (Han et al., CVPR 2023;
official code hhc1997/MSCN at 01febc2, the reference where the paper is silent:
``docs/methods/mscn.md``).

Two SGRAF networks A and B, each with a meta network (:class:`~ncl.models.mscn_meta.MetaSimilarity`)
in place of SGRAF's last layer: the *corrected similarity* ``S = meta(vec)``. Evaluation averages
both networks' corrected similarities.

* Warm-up (``warmup_epochs``): A then B, one pass each over a shuffle of the training pairs at
  ``warmup_batch_size``, the summed mean-negative triplet on ``S``; network and meta network
  step together (both Adam at the network's lr, each clipped at ``grad_clip``).
* Then both optimisers start anew (``reset_optimizers``), the meta network's at ``meta_lr``.
* Before every co-training epoch each network purifies the data
  (:func:`~ncl.division.mscn.purify`): a Beta mixture started from its meta set's corrected
  similarities (meta pairs vs non-corresponding pairs), fitted on the training pairs', clean iff
  posterior > 0.5. B trains on A's clean pairs, then A on B's.
* Each co-training step (every ``meta_interval``-th): the second-order meta step
  (:func:`~ncl.training.meta_step.meta_gradient`): the network's loss through the meta network,
  one pseudo update of the network (``pseudo_update``), the meta batch's BCE through the updated
  network, the meta network's step; then the network's real step with the meta network frozen.
  The loss is the hardest-negative triplet with the adaptive margins of the corrected
  similarities of the batch's own pairs (:mod:`ncl.losses.mscn`).

The meta set comes from the DataModule (:mod:`ncl.data.meta_split`) or, with
``meta_train_images``, from training images the method sets aside itself.
"""

from __future__ import annotations

from contextlib import nullcontext
from functools import partial
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn.parallel import DistributedDataParallel

from ncl.callbacks.protocols import EpochDiagnostics, LabelView
from ncl.data.contracts import retrieval_data
from ncl.data.datasets import Batch, PairDataset
from ncl.data.meta_split import MetaPairs, MetaSet, draw_train_pairs
from ncl.data.samplers import rng_for
from ncl.division.co_divide import Division
from ncl.division.detection import mean_over_networks
from ncl.division.mscn import purify
from ncl.division.stats import division_stats
from ncl.errors import ConfigError
from ncl.evaluation.metric import Embeddings, score_networks
from ncl.evaluation.nonfinite import EvalSite
from ncl.losses.mscn import MarginIndex, adaptive_margins, adaptive_triplet, meta_bce
from ncl.losses.triplet import triplet_loss
from ncl.methods.base import BackboneFactory, RetrievalMethod, default_optimizer
from ncl.methods.co_teaching import PlannedCoTeaching
from ncl.methods.declaration import (BENCHMARK_WARMUP, TINY_ADAM_ARGS, TINY_DATA_ARGS, TINY_SGRAF_ARGS,
                                    MethodSpec, RegressionCase, Row)
from ncl.methods.mscn_support import (META_DRAW_STREAM, NET_A, NET_B, MscnStepDataset, cotrain_steps,
                                      meta_pairs, negative_draw, warmup_steps)
from ncl.methods.skeleton import check_ranges
from ncl.models.mscn_meta import (MetaSimilarity, corrected_batch, corrected_from_embeddings,
                                  corrected_pairs)
from ncl.training.distributed import average_gradients, broadcast_buffers_
from ncl.training.meta_step import adam_update, meta_gradient, sgd_update
from ncl.training.passes import PassSpec, run_pass
from ncl.training.plans import PlanLoader, limit_steps

PseudoUpdate = Literal["sgd", "adam"]


class _Corrected(nn.Module):
    """A network and its meta network as one module (eval mode and buffers for passes)."""

    def __init__(self, net: nn.Module, meta: nn.Module) -> None:
        super().__init__()
        self.net, self.meta = net, meta


def _pair_values(module: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    return corrected_pairs(module.net, module.meta, batch).float()


class MSCN(PlannedCoTeaching, RetrievalMethod):
    """MSCN LightningModule (networks A, B and their meta networks; manual optimisation).

    Args:
        vocab_size, backbone: as :class:`~ncl.methods.base.RetrievalMethod` (SGR or SAF; the
            backbone's own ``sim_eval_w`` is unused), and its options (Adam 2e-4, clip 2.0,
            ``lr_update`` 30: times 0.1 every 30 epochs after the warm-up).
        warmup_epochs: warm-up epochs (5).
        warmup_batch_size: batch of the warm-up (``None``: twice ``data.batch_size``, official).
        margin: alpha, the triplet margin (0.2).
        margin_index: the adaptive margin of entry ``[i, j]`` is caption ``j``'s (``column``,
            official code) or the anchor's (``anchor``) (:func:`~ncl.losses.mscn.adaptive_triplet`).
        meta_lr: the meta networks' Adam learning rate after the warm-up (17e-6), on the same
            step schedule; in the warm-up they run at the networks' learning rate.
        meta_hidden: hidden units of the meta network (64).
        meta_interval: a meta step every this many co-training steps (1).
        pseudo_update: the pseudo network's update: ``sgd`` (``theta - lr g``, what the official
            ``MetaAdam.meta_step`` computes) or ``adam`` (one Adam step from the real optimiser's
            state).
        reset_optimizers: new Adam states for all optimisers when co-training starts (official).
        bmm_max_iter, bmm_tol: EM of the purification's Beta mixture (10, 1e-2).
        p_threshold: clean iff the clean component's posterior exceeds it (0.5).
        meta_train_images: ``None``: the DataModule's meta split
            (:mod:`ncl.data.meta_split`); a number: that many training images set aside by the
            method (one caption each joins the meta set, all their captions leave training).
        division_batch_size: batch of the purification passes (``None``: 64 x the batch size,
            the official sequential loader).
        seed: seed of the plans and draws (``None``: the run's ``seed_everything``).
    """

    spec: ClassVar[MethodSpec] = MethodSpec(
        # the quickstart data with a meta split of 100 dev pairs (2 % of its 5,000 training
        # captions, as F30K's 2,900 of 145,000); the meta lr 10x as the quickstart's lr
        rows=(Row("mscn", "MSCN-{}", order=180, warmup=True, paper_config="mscn_{bb}_{ds}",
                  small_backbones=("SGR",), divides="meta purification",
                  overrides=("--model=ncl.methods.mscn.MSCN", f"--model.warmup_epochs={BENCHMARK_WARMUP}",
                             "--data=ncl.data.meta_split.MetaSplitSyntheticDataModule",
                             "--data.meta_size=100", "--model.meta_lr=0.0002")),),
        # meta step every other step (both paths), meta network moved visibly
        tiny={"mscn": {"warmup_epochs": 1, "meta_train_images": 6, "meta_interval": 2,
                       "meta_lr": 1e-3}},
        # the DataModule's meta split (20 dev pairs) here, the method's own in the tiny case
        regression={"mscn": RegressionCase("mscn_sgr_f30k.yaml", (
            *TINY_SGRAF_ARGS, "--data=ncl.data.meta_split.MetaSplitSyntheticDataModule",
            *TINY_DATA_ARGS[1:], "--data.meta_size=20", *TINY_ADAM_ARGS,
            "--model.warmup_epochs=1", "--model.meta_lr=0.001"))},
        page="mscn.md", config_prefixes=("mscn_",))
    #: A plan step holds network k's training batch and, when due, its meta batch.
    batch_key, extra_key = "train", "meta"

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = default_optimizer, lr_update: int = 30,
                 warmup_epochs: int = 5, warmup_batch_size: int | None = None, margin: float = 0.2,
                 margin_index: MarginIndex = "column", meta_lr: float = 17e-6, meta_hidden: int = 64,
                 meta_interval: int = 1, pseudo_update: PseudoUpdate = "sgd",
                 reset_optimizers: bool = True, bmm_max_iter: int = 10, bmm_tol: float = 1e-2,
                 p_threshold: float = 0.5, meta_train_images: int | None = None,
                 division_batch_size: int | None = None, seed: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(vocab_size, backbone, optimizer=optimizer, lr_update=lr_update,
                         n_networks=2, **kwargs)
        self.save_hyperparameters(ignore=["backbone", "optimizer"])
        _check_ranges(self.hparams)
        self.automatic_optimization = False
        head = getattr(getattr(self.nets[0], "sim_enc", None), "sim_tranloc_w", None)
        if not isinstance(head, nn.Linear):
            raise ConfigError("MSCN needs an SGRAF backbone (ncl.models.SGRAF: SGR or SAF): its "
                              "meta network scores SGRAF's similarity vectors")
        sim_dim = head.out_features
        self.meta_nets = nn.ModuleList([MetaSimilarity(sim_dim, meta_hidden) for _ in range(2)])
        # Training state (checkpointed): the purification the current epoch trains on.
        self.division: Division | None = None
        self._meta: MetaSet | None = None

    # ------------------------------------------------------------------ Lightning wiring
    @property
    def plan_seed(self) -> int:
        return self.training_seed if self.hparams.seed is None else int(self.hparams.seed)

    def extra_optimizers(self) -> list[torch.optim.Optimizer]:
        """The meta networks' Adam (``meta_lr``; the warm-up sets the networks' rate)."""
        return [torch.optim.Adam(m.parameters(), lr=self.hparams.meta_lr) for m in self.meta_nets]

    def setup(self, stage: str) -> None:
        """For ``fit``: refuse float16 loss scaling (the meta networks' gradients are taken
        outside it) and take over the training loader."""
        super().setup(stage)
        if stage == "fit" and str(self.trainer.precision).startswith("16"):
            raise ConfigError("MSCN trains in trainer.precision 32 or bf16-mixed: its meta step "
                              f"takes gradients outside float16 loss scaling, got {self.trainer.precision}")
        if stage == "fit":
            self.take_train_loader(self.mscn_dataloader, "MSCN")

    #: lr0 in the warm-up, then the step schedule (official ``epoch // lr_update`` after it).
    default_lr_schedule, logs_lr_factor = "after_warmup", True

    def on_train_epoch_start(self) -> None:
        """Learning rates (the meta networks at the networks' rate in the warm-up); the fresh
        optimisers of the first co-training epoch."""
        super().on_train_epoch_start()
        opts = [o.optimizer for o in self.optimizers()]
        epoch, hp = self.current_epoch, self.hparams
        if self.is_warmup_epoch(epoch):
            for net_opt, meta_opt in zip(opts[:2], opts[2:]):
                for group in meta_opt.param_groups:
                    group["lr"] = net_opt.param_groups[0]["lr"]
        elif epoch == hp.warmup_epochs and hp.reset_optimizers and hp.warmup_epochs > 0:
            for opt in opts:
                opt.state.clear()

    def selectable(self, epoch: int) -> bool:
        """Co-training epochs and the last warm-up epoch (the official code validates once
        after the warm-up and keeps that model if no later one beats it)."""
        return super().selectable(epoch) or epoch == self.hparams.warmup_epochs - 1

    # ------------------------------------------------------------------ meta set
    def meta_set(self) -> MetaSet:
        """The DataModule's meta split, or the method's own (``meta_train_images``)."""
        if self._meta is None:
            dm = retrieval_data(self.trainer, "MSCN")
            n = self.hparams.meta_train_images
            if n is not None:
                split = dm.train_pairs().split
                rng = rng_for(self.plan_seed, 0, META_DRAW_STREAM, 0)
                caps, imgs, removed = draw_train_pairs(split.n_images, split.im_div, int(n), rng)
                self._meta = MetaSet((split,), np.zeros_like(caps), caps, imgs, removed)
            elif callable(getattr(dm, "meta_set", None)):
                self._meta = dm.meta_set()
            else:
                raise ConfigError("MSCN needs a meta set: use a DataModule with a meta split "
                                  "(data=ncl.data.meta_split.MetaSplitPrecompDataModule or "
                                  "MetaSplitSyntheticDataModule) or set model.meta_train_images")
        return self._meta

    def train_keep(self, n: int) -> np.ndarray:
        """``(N,)`` bool: training captions that stay in training (not in the meta set)."""
        removed = self.meta_set().train_removed
        return np.ones(n, dtype=bool) if removed is None else ~removed

    def epoch_meta(self, epoch: int, net: int, purpose: str) -> MetaPairs:
        """Network ``net``'s meta set with the negatives in effect (``purpose``)."""
        dm = retrieval_data(self.trainer, "MSCN")
        pairs = dm.train_pairs()
        _, written_for = dm.train_images()
        keep = self.train_keep(len(pairs))
        images = np.unique(written_for[keep])
        draw = negative_draw(epoch - self.hparams.warmup_epochs, net, purpose)
        return meta_pairs(self.meta_set(), pairs.split, np.flatnonzero(keep), written_for, images,
                          self.plan_seed, draw)

    # ------------------------------------------------------------------ purification
    def purify_epoch(self, epoch: int) -> Division:
        """Both networks' purification for co-training epoch ``epoch`` (eval mode)."""
        trainer, hp = self.trainer, self.hparams
        dm = retrieval_data(trainer, "MSCN")
        pairs = dm.train_pairs()
        keep = torch.from_numpy(self.train_keep(len(pairs)))
        size = hp.division_batch_size or 64 * dm.batch_size
        modules = [_Corrected(n, m) for n, m in zip(self.nets, self.meta_nets)]
        values, probs, cleans = [], [], []
        for k in (NET_A, NET_B):
            spec = PassSpec(_pair_values, (k,), size, False, 0, self.plan_seed)
            run = partial(run_pass, spec, modules, epoch=epoch, device=self.device,
                          rank=trainer.global_rank, world=trainer.world_size,
                          num_workers=dm.num_workers)
            train_values = run(pairs=pairs, description=f"MSCN purification ({k})")[0].cpu()
            metas = self.epoch_meta(epoch, k, "purify")
            meta_values = run(pairs=metas, description=f"MSCN meta pairs ({k})")[0].cpu()
            labels = metas.labels(torch.arange(len(metas)))
            result = purify(train_values[keep], meta_values, labels, hp.bmm_max_iter, hp.bmm_tol,
                            hp.p_threshold)
            prob = torch.zeros(len(pairs))
            prob[keep] = result.prob
            values.append(train_values)
            probs.append(prob)
            cleans.append(prob > hp.p_threshold)
        return Division(epoch, torch.stack(values), torch.stack(probs), torch.stack(cleans))

    def mscn_dataloader(self, pairs: PairDataset) -> PlanLoader:
        """This epoch's loader: warm-up passes, or the purified passes with meta batches (the
        purification is made here: the loader is built before any epoch-start hook)."""
        trainer, epoch, hp = self.trainer, self.current_epoch, self.hparams
        dm = retrieval_data(trainer, "MSCN")
        keep = self.train_keep(len(pairs))
        rank, world = trainer.global_rank, trainer.world_size
        if self.is_warmup_epoch(epoch):
            size = hp.warmup_batch_size or 2 * dm.batch_size
            steps = warmup_steps(np.flatnonzero(keep), size, self.plan_seed, epoch, rank, world)
            metas = {}
        else:
            if self.division is None or self.division.epoch != epoch:
                self.division = self.purify_epoch(epoch)
            clean = self.division.clean.numpy() & keep[None, :]
            metas = {k: self.epoch_meta(epoch, k, "train") for k in (NET_A, NET_B)}
            steps = cotrain_steps((clean[0], clean[1]), (len(metas[0]), len(metas[1])),
                                  dm.batch_size, hp.meta_interval, self.plan_seed, epoch, rank, world)
        steps = limit_steps(steps, trainer.limit_train_batches)  # both networks get their share
        return PlanLoader(MscnStepDataset(pairs, metas, steps), dm.num_workers,
                          pin_memory=self.device.type == "cuda")

    # ------------------------------------------------------------------ training
    def warmup_step(self, k: int, batch: Batch) -> None:
        """Summed mean-negative triplet on the corrected similarities; network and meta
        network step together."""
        sims = corrected_batch(self.nets[k], self.meta_nets[k], batch)
        loss = triplet_loss(sims, self.hparams.margin, negatives="mean").sum()
        opts = self.optimizers()
        net_opt, meta_opt = opts[k], opts[2 + k]
        net_opt.zero_grad()
        meta_opt.zero_grad()
        model = self.trainer.strategy.model  # outside DDP's reducer: one network per step
        with model.no_sync() if isinstance(model, DistributedDataParallel) else nullcontext():
            self.manual_backward(loss)
        average_gradients(self.nets[k])
        net_opt.step()  # clipped in on_before_optimizer_step
        self.step_meta(k)
        broadcast_buffers_(self.nets[k])
        self.log_net(k, {"warmup_triplet": loss.detach()}, sims.shape[0])

    def train_loss(self, batch: Batch, net: nn.Module, meta: Any) -> Tensor:
        """The co-training loss of a batch: adaptive-margin hardest-negative triplet, summed."""
        hp = self.hparams
        sims = corrected_batch(net, meta, batch)  # (B, B)
        margins = adaptive_margins(sims.diagonal(), hp.margin)
        return adaptive_triplet(sims, margins, hp.margin_index).sum()

    def meta_loss(self, batch: Batch, net: nn.Module, meta: nn.Module) -> Tensor:
        """BCE of the meta batch's corrected pair similarities."""
        return meta_bce(corrected_pairs(net, meta, batch), batch["label"])

    def meta_update(self, k: int, batch: Batch, meta_batch: Batch) -> Tensor:
        """The second-order meta step of meta network ``k``; returns the meta loss."""
        opts = self.optimizers()
        net_opt, meta_opt, meta = opts[k].optimizer, opts[2 + k], self.meta_nets[k]
        if self.hparams.pseudo_update == "sgd":
            update = sgd_update(net_opt.param_groups[0]["lr"])
        else:
            update = adam_update(net_opt, dict(self.nets[k].named_parameters()))
        with torch.backends.cudnn.flags(enabled=False):  # cuDNN's GRU has no double backward
            loss, grads = meta_gradient(self.nets[k], meta, partial(self.train_loss, batch),
                                        partial(self.meta_loss, meta_batch), update)
        meta_opt.zero_grad()
        for p, g in zip(meta.parameters(), grads):
            p.grad = g
        self.step_meta(k)
        return loss

    def step_meta(self, k: int) -> None:
        """Average meta network ``k``'s gradients over the ranks, clip them in the warm-up only
        (official), step its Adam. The raw optimiser: ``trainer.global_step`` counts the
        networks' steps, and no loss scaling touches these gradients."""
        meta = self.meta_nets[k]
        average_gradients(meta)
        if self.is_warmup_epoch(self.current_epoch) and self.hparams.grad_clip > 0:
            nn.utils.clip_grad_norm_(meta.parameters(), self.hparams.grad_clip)
        self.optimizers()[2 + k].optimizer.step()

    def cotrain_step(self, k: int, batch: Batch, meta_batch: Batch | None) -> None:
        logs: dict[str, Tensor] = {}
        if meta_batch is not None:
            logs["meta_bce"] = self.meta_update(k, batch, meta_batch)
        meta = self.meta_nets[k]
        frozen = {n: p.detach() for n, p in meta.named_parameters()}
        loss = self.train_loss(batch, self.nets[k], partial(functional_call, meta, frozen))
        self.step_module(self.optimizers()[k], self.nets[k], loss)
        logs["loss"] = loss.detach()
        self.log_net(k, logs, batch["index"].shape[0])

    # ------------------------------------------------------------------ state
    def training_state(self) -> dict[str, Any]:
        return {"division": None if self.division is None else self.division.state()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        self.division = Division.from_state(state.get("division"))

    # ------------------------------------------------------------------ evaluation
    def similarities(self, emb: Embeddings, site: EvalSite) -> dict[str, Tensor]:
        """Each network's corrected similarities, then their mean (official ``validate``)."""
        scorers = [(name, partial(corrected_from_embeddings, net, meta)) for name, net, meta
                   in zip(self.network_names, self.nets, self.meta_nets)]
        return score_networks(scorers, emb, self.hparams.eval_shard_size, self.device, site)

    def batch_scores(self, batch: dict[str, Tensor]) -> Tensor:
        """``(B, B)`` float64 mean of both networks' corrected similarities (``ncl predict``)."""
        return self._model_mean([corrected_batch(n, m, batch).double()
                                 for n, m in zip(self.nets, self.meta_nets)])

    # ------------------------------------------------------------------ diagnostics
    def epoch_diagnostics(self, epoch: int, true_clean: Tensor | None) -> EpochDiagnostics:
        """The purification the epoch trains on: sizes and, with ground truth, detection."""
        division = self.division
        if division is None or division.epoch != epoch:
            return EpochDiagnostics()
        names = self.network_names
        scalars = division_stats(division, names, true_clean)
        labels = [LabelView(f"clean posterior of network {n}'s meta-initialised Beta mixture", p,
                            "clean probability") for n, p in zip(names, division.prob)]
        return EpochDiagnostics(scalars, dict(zip(names, division.clean)), None, labels,
                                noise_detection=mean_over_networks(scalars, names))


def _check_ranges(hp: Any) -> None:
    """Raise ConfigError naming the offending ``model.*`` option."""
    check_ranges(hp, integers={"warmup_epochs": 0, "meta_interval": 1, "meta_hidden": 1,
                               "bmm_max_iter": 1},
                 positive=["margin", "meta_lr", "bmm_tol"], open_unit=["p_threshold"],
                 batch_sizes=["warmup_batch_size", "division_batch_size"])
    if hp.meta_train_images is not None and hp.meta_train_images < 1:
        raise ConfigError(f"model.meta_train_images must be >= 1 or null, got {hp.meta_train_images}")
    if hp.pseudo_update not in ("sgd", "adam"):
        raise ConfigError(f"model.pseudo_update must be 'sgd' or 'adam', got {hp.pseudo_update!r}")
    if hp.margin_index not in ("column", "anchor"):
        raise ConfigError(f"model.margin_index must be 'column' or 'anchor', got {hp.margin_index!r}")
