"""IN2R (ICML 2026): rectifying noisy pairs from intra-modal neighbours, on a VSE network (the
official code, github.com/liuyyy111/IN2R at 909e532, is the reference: docs/methods/in2r.md).

Two networks A and B co-teach as in NCR:

* warm-up epochs: each network one pass over its own shuffle of every pair with
  ``infonce(S) + infonce(S_II) + infonce(S_TT)`` (:func:`~ncl.losses.in2r.warmup_loss`, two
  forward passes of the batch);
* before every later epoch :class:`~ncl.callbacks.division.GMMDivision` co-divides: each
  network's per-sample mean hinge (eval mode), min-max normalised, a two-component GMM, clean
  iff ``w > p_threshold`` (with the official 1 % fallback); A trains on B's division, then B on
  A's. A step of network ``k`` takes a labelled batch of its peer's clean pairs and an
  unlabelled batch of its peer's noisy pairs:

  1. labelled loss (:func:`~ncl.losses.in2r.labelled_loss`): hardest-negative triplet on the
     pairs plus intra-modal triplets (margin 0.3) between two forward passes;
  2. queue: labelled pairs whose (peer's) clean probability is above network ``k``'s mean
     clean probability push their first-pass embeddings into ``k``'s queue;
  3. rectification (``i2t`` / ``t2i``): each unlabelled image retrieves its ``k`` nearest
     images in the **peer's** queue; ``k``'s i2t refiner turns their captions into a target;
     ``correction_weight * infonce(I_u T^T)``; the same from captions to images.

  One optimiser step per iteration on the sum; the refiners are extra parameter groups of the
  network's optimiser. Evaluation averages the two networks' similarities.

State (checkpointed): the division and the two queues, the same on every rank (a push
all-gathers the ranks' rows: :mod:`ncl.methods.in2r_support`).
"""

from __future__ import annotations

from functools import partial
from typing import Any, ClassVar, Literal

import lightning as L
import torch
from lightning.pytorch.cli import OptimizerCallable
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn
from torch.utils.data import Dataset

from ncl.callbacks.division import GMMDivision, divide_if_due
from ncl.callbacks.protocols import EpochDiagnostics, GMMSpec, PassSpec
from ncl.data.contracts import retrieval_data
from ncl.data.datasets import Batch, PairDataset
from ncl.data.samplers import epoch_seed, global_seed
from ncl.division import CleanRule
from ncl.division.co_divide import Division, co_divide_record, division_made_for, mean_hinge
from ncl.division.in2r_queue import (EmbeddingQueue, enqueue_mask, mean_clean_probability,
                                     nearest_neighbours, rectified_targets)
from ncl.errors import ConfigError
from ncl.losses.in2r import (CORRECTION_WEIGHT, IN2R_TAU, INTRA_MARGIN, labelled_loss,
                             rectified_loss, warmup_loss)
from ncl.methods.base import BackboneFactory, RetrievalMethod
from ncl.methods.co_teaching import PlannedCoTeaching
from ncl.methods.declaration import TINY_ADAM_ARGS, TINY_DATA_ARGS, MethodSpec, RegressionCase, Row
from ncl.methods.in2r_support import (augmented, check_pooled_backbone, check_queue_fits,
                                      gathered_push, load_word_vectors, queue_states,
                                      restored_queues)
from ncl.methods.reports import co_divide_report
from ncl.methods.skeleton import check_ranges
from ncl.models.contracts import encode_images
from ncl.models.in2r_refiner import GraphRefiner
from ncl.streams import declare_stream
from ncl.training.plans import DIVISION_STREAM, PlanLoader, StepDataset, co_teaching_plan

#: Stream of the division pass's augmentation draws (apart from the training loader's).
DIVISION_AUGMENT_STREAM = declare_stream(61, "in2r.division_augment")

Side = Literal["peer", "own"]
Refiner = Literal["graph", "mean"]


def in2r_optimizer(params: Any) -> torch.optim.Optimizer:
    """AdamW, lr 5e-4, weight decay 1e-4 (official ``VSE.__init__`` and ``run.py``)."""
    return torch.optim.AdamW(params, lr=5e-4, weight_decay=1e-4)


class IN2R(PlannedCoTeaching, RetrievalMethod):
    """IN2R LightningModule (two networks and four refiners, manual optimisation).

    Args:
        vocab_size, backbone: as :class:`~ncl.methods.base.RetrievalMethod`; the backbone must
            give pooled embeddings (:class:`~ncl.models.in2r_vse.In2rVSE`, the official VSE).
        optimizer: AdamW 5e-4, weight decay 1e-4 (official); the refiners join it.
        lr_update: lr x0.1 every ``lr_update`` co-training epochs (15; the warm-up runs at lr0).
        grad_clip: 2.0 on the network's parameters (see ``clip_refiners``).
        warmup_epochs: official ``--warmup_epoch`` 1. ``trainer.max_epochs`` = warm-up +
            co-training epochs (official 1 + 40).
        margin: alpha of the pair triplet and of the division's mean hinge (0.2).
        intra_margin: beta of the intra-modal triplets (0.3, hard-coded officially).
        intra_modal: the intra-modal terms of the warm-up and labelled losses (official: on).
        tau: temperature of ``infonce`` (0.05).
        p_threshold, clean_rule, gmm_seed: the co-divide (0.5, ``w > t``; GMM seed 0, the
            official fit has none).
        division_shuffle: the division pass over one shuffle shared by both networks (official).
        queue_size: entries of each network's queue (official 65536).
        k: neighbours retrieved per unlabelled sample (parser default 1; the paper's runs 5).
        i2t, t2i: the two rectification losses (parser defaults off: ``store_true`` flags; the
            shipped configs turn both on).
        correction_weight: lambda of each rectification loss (0.5, hard-coded officially).
        refiner: ``graph`` (GraphRefiner) or ``mean`` (normalised mean of the neighbours, the
            official commented-out alternative).
        refiner_heads, refiner_dropout: the GraphRefiner's heads (4) and dropout (0.1).
        retrieve_from: the queue the rectification searches: ``peer`` (code) or ``own``.
        enqueue_mean: the mean clean probability a pair's ``w`` must exceed to be queued: the
            network's ``own`` (code; ``w`` is the peer's) or the ``peer``'s (the same division).
        clip_refiners: clip the refiners with the network (code: not clipped).
        augmentation: the official training loader's augmentation (tokens and regions, 20 % each;
            :func:`~ncl.methods.in2r_support.augmented`).
        division_augmentation: the division pass reads augmented pairs too (official
            ``eval_train`` iterates the augmenting training loader), drawn from a stream of its
            own; off: the pairs as stored.
        seed: seed of the plans and the division shuffle; ``None``: the run's seed.
    """

    spec: ClassVar[MethodSpec] = MethodSpec(
        # the synthetic benchmark on IN2R's VSE (the quickstart's optimiser and sizes): the paper
        # configs' k and corrections, a queue of about 40 % of the 5,000 pairs (as 65536 of
        # F30K's 145,000), warm-up epochs selectable as in the other rows of the grid
        rows=(Row("in2r", "IN2R-{}", order=140, warmup=True, paper_config="in2r_vse_{ds}",
                  paper_backbones=("vse",), divides="co-divide", small_backbones=("VSE",),
                  overrides=("--model=ncl.methods.in2r.IN2R", "--model.backbone=ncl.models.in2r_vse.In2rVSE",
                             "--model.k=5", "--model.i2t=true", "--model.t2i=true",
                             "--model.queue_size=2048", "--model.select_warmup=true")),),
        # tiny: a queue of two batches (it wraps), k 2, both rectifications, the VSE backbone
        tiny={"in2r": {"warmup_epochs": 1, "queue_size": 32, "k": 2, "i2t": True, "t2i": True,
                       "backbone": {"class_path": "ncl.models.in2r_vse.In2rVSE", "init_args": {
                           "img_dim": 16, "word_dim": 8, "embed_size": 16}}}},
        regression={"in2r": RegressionCase("in2r_vse_f30k.yaml", (
            "--model.backbone.init_args.img_dim=16", "--model.backbone.init_args.word_dim=8",
            "--model.backbone.init_args.embed_size=16", *TINY_DATA_ARGS, *TINY_ADAM_ARGS,
            "--model.queue_size=32", "--model.k=2"))},
        page="in2r.md", config_prefixes=("in2r_",))

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = in2r_optimizer, lr_update: int = 15,
                 warmup_epochs: int = 1, margin: float = 0.2, intra_margin: float = INTRA_MARGIN,
                 intra_modal: bool = True, tau: float = IN2R_TAU, p_threshold: float = 0.5,
                 clean_rule: CleanRule = "greater", gmm_seed: int | None = 0,
                 division_shuffle: bool = True, queue_size: int = 65536, k: int = 1,
                 i2t: bool = False, t2i: bool = False, correction_weight: float = CORRECTION_WEIGHT,
                 refiner: Refiner = "graph", refiner_heads: int = 4, refiner_dropout: float = 0.1,
                 retrieve_from: Side = "peer", enqueue_mean: Side = "own",
                 clip_refiners: bool = False, augmentation: bool = True,
                 division_augmentation: bool = True, seed: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(vocab_size, backbone, optimizer=optimizer, lr_update=lr_update,
                         n_networks=2, **kwargs)
        self.save_hyperparameters(ignore=["backbone", "optimizer"])
        _check_ranges(self.hparams)
        self.automatic_optimization = False
        self.plan_seed = global_seed() if seed is None else seed
        dim = check_pooled_backbone(self.nets[0])
        self.refiners = nn.ModuleList([nn.ModuleDict({
            side: GraphRefiner(dim, refiner_heads, refiner_dropout) for side in ("i2t", "t2i")})
            for _ in self.nets])
        # Training state (checkpointed): the division and the queues (A's, B's), on every rank.
        self.division: Division | None = None
        self.queues: list[EmbeddingQueue | None] = [None, None]

    # ------------------------------------------------------------------ Lightning wiring
    def method_callbacks(self) -> list[L.Callback]:
        return [GMMDivision()]

    def setup(self, stage: str) -> None:
        super().setup(stage)
        if stage == "fit":
            dm = self.take_train_loader(self.in2r_dataloader, "IN2R")
            check_queue_fits(self.hparams.queue_size, self.hparams.k, dm.batch_size,
                             self.trainer.world_size)
            if self.trainer.ckpt_path is None:  # a resumed run restores the trained embeddings
                found = load_word_vectors(self.nets, getattr(dm, "vocab", None))
                if found is not None:
                    rank_zero_info(f"IN2R: GloVe vectors for {found} vocabulary words")

    def configure_optimizers(self) -> Any:
        """One optimiser per network with its refiners as a second parameter group (same lr,
        official ``add_param_group``), each with ``LambdaLR(lr_factor)`` over both groups."""
        opts = [self.optimizer_factory(net.parameters()) for net in self.nets]
        for opt, refiners in zip(opts, self.refiners):
            opt.add_param_group({"params": list(refiners.parameters())})
        return [{"optimizer": opt, "lr_scheduler": {"interval": "epoch", "scheduler":
                 torch.optim.lr_scheduler.LambdaLR(opt, self.lr_factor)}} for opt in opts]

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Clip the network's gradient norm at ``grad_clip`` (official ``clip_grad_norm_(net.params)``);
        the refiners too only with ``clip_refiners``."""
        if self.hparams.clip_refiners:
            return super().on_before_optimizer_step(optimizer)
        if self.hparams.grad_clip > 0:
            k = next(i for i, opt in enumerate(self.optimizers()) if opt.optimizer is optimizer)
            torch.nn.utils.clip_grad_norm_(self.nets[k].parameters(), self.hparams.grad_clip)

    #: Warm-up at lr0, then the step schedule over co-training epochs (official).
    default_lr_schedule, logs_lr_factor = "after_warmup", True

    def in2r_dataloader(self, pairs: PairDataset) -> PlanLoader:
        """This epoch's loader: warm-up passes or the co-divided plan (the division made here if
        missing: the loader is built before any epoch-start hook)."""
        trainer, epoch = self.trainer, self.current_epoch
        dm = retrieval_data(trainer, "IN2R")
        divide_if_due(trainer, self, epoch)
        cotrain = not self.is_warmup_epoch(epoch)
        steps = co_teaching_plan(len(pairs), dm.batch_size, self.plan_seed, epoch,
                                 clean=self.division.clean if cotrain else None,
                                 with_unlabelled=True, limit=trainer.limit_train_batches,
                                 rank=trainer.global_rank, world=trainer.world_size)
        source = (augmented(pairs, epoch, self.plan_seed, dm.vocab_size) if self.hparams.augmentation
                  else pairs)
        return PlanLoader(StepDataset(source, steps), dm.num_workers,
                          pin_memory=self.device.type == "cuda")

    # ------------------------------------------------------------------ division (GMMDivisible)
    def division_due(self, epoch: int) -> bool:
        return not self.is_warmup_epoch(epoch) and not division_made_for(self.division, epoch)

    def division_pass(self, epoch: int) -> tuple[PassSpec, GMMSpec]:
        """Each network's mean hinge over one shuffle of the training set (official
        ``eval_train``: one loader for both), cut into training-size batches; with
        ``division_augmentation`` the pairs augmented as the official training loader (which
        ``eval_train`` iterates) augments them, drawn from a stream of their own."""
        hp = self.hparams
        dm = retrieval_data(self.trainer, "IN2R")
        view = None
        if hp.division_augmentation:
            seed = epoch_seed(self.plan_seed, 0, DIVISION_AUGMENT_STREAM)
            view = partial(_augmented_view, seed=seed, vocab_size=dm.vocab_size)
        spec = PassSpec(mean_hinge(hp.margin), (0, 1), dm.batch_size, hp.division_shuffle,
                        DIVISION_STREAM, self.plan_seed, view=view)
        return spec, GMMSpec(seed=hp.gmm_seed)

    def accept_division(self, epoch: int, values: Tensor, clean_prob: Tensor) -> None:
        hp = self.hparams
        self.division = co_divide_record(epoch, values, clean_prob, hp.p_threshold, hp.clean_rule)

    # ------------------------------------------------------------------ state
    def training_state(self) -> dict[str, Any]:
        """The division and the queues (both identical on every rank)."""
        return {"division": None if self.division is None else self.division.state(),
                "queues": queue_states(self.queues)}

    def load_training_state(self, state: dict[str, Any]) -> None:
        self.division = Division.from_state(state.get("division"))
        fitting = self._trainer is not None and self.trainer.state.fn == "fit"  # evaluation needs none
        self.queues = (restored_queues(state.get("queues"), self.device) if fitting else None) or [None, None]

    # ------------------------------------------------------------------ training
    def embed(self, k: int, batch: Batch) -> tuple[Tensor, Tensor]:
        """Network ``k``'s ``(B, E)`` image and caption embeddings of a batch (train mode)."""
        net = self.nets[k]
        return encode_images(net, batch), net.encode_captions(batch["tokens"], batch["lengths"])

    def warmup_step(self, k: int, batch: Batch) -> None:
        """``infonce`` on the pairs and between two dropout views of each modality."""
        hp = self.hparams
        (i1, c1), (i2, c2) = self.embed(k, batch), self.embed(k, batch)
        terms = warmup_loss((i1, i2), (c1, c2), hp.tau, hp.intra_modal)
        loss = sum(terms.values())
        self.optimize(k, loss)
        self.log_net(k, {"warmup": loss.detach(), **{f"warmup_{n}": v.detach() for n, v in terms.items()}},
                     int(i1.shape[0]))

    def cotrain_step(self, k: int, labelled: Batch, unlabelled: Batch | None) -> None:
        """Labelled loss, queue push, rectification; one step (spec of the module docstring)."""
        hp = self.hparams
        (i1, c1), (i2, c2) = self.embed(k, labelled), self.embed(k, labelled)
        terms = labelled_loss((i1, i2), (c1, c2), hp.margin, hp.intra_margin, hp.intra_modal)
        logs = {f"labelled_{n}": v.detach() for n, v in terms.items()}
        loss = sum(terms.values())
        logs["queued"] = self.push(k, labelled["index"], i1, c1)
        if unlabelled is not None:  # forwarded even without rectification (BatchNorm statistics)
            rectified = self.rectification(k, *self.embed(k, unlabelled))
            for name, value in rectified.items():
                loss = loss + value
                logs[name] = value.detach()
        self.optimize(k, loss)
        self.log_net(k, {"loss": loss.detach(), **logs}, int(i1.shape[0]))

    def push(self, k: int, index: Tensor, images: Tensor, captions: Tensor) -> Tensor:
        """Queue the labelled pairs whose clean probability (from the division network ``k``
        trains on: the peer's) exceeds the ``enqueue_mean``, every rank's in rank order;
        returns how many of this rank's were queued."""
        div, hp = self.division, self.hparams
        w = div.prob_on(index.device)[1 - k][index]  # (B,) the peer's
        side = k if hp.enqueue_mean == "own" else 1 - k
        mask = enqueue_mask(w, mean_clean_probability(div.prob[side], div.clean[side]))
        if self.queues[k] is None:
            self.queues[k] = EmbeddingQueue.empty(hp.queue_size, int(images.shape[1]), images.device)
        self.queues[k].push(*gathered_push(images[mask].float(), captions[mask].float()))
        return mask.sum().float()

    def rectification(self, k: int, images: Tensor, captions: Tensor) -> dict[str, Tensor]:
        """The i2t and t2i losses of ``(B, E)`` unlabelled embeddings against targets from the
        ``retrieve_from`` queue; none while it holds fewer than ``k`` entries (official)."""
        hp = self.hparams
        queue = self.queues[1 - k if hp.retrieve_from == "peer" else k]
        if queue is None:
            return {}
        n, out = queue.filled, {}
        for side, query, keys, values in (("i2t", images, queue.images, queue.captions),
                                          ("t2i", captions, queue.captions, queue.images)):
            if not hp[side]:
                continue
            neighbours = nearest_neighbours(query, keys[:n], values[:n], hp.k)  # (B, k, E)
            if neighbours is None:
                continue
            refiner = self.refiners[k][side] if hp.refiner == "graph" else None
            out[f"rectified_{side}"] = rectified_loss(query, rectified_targets(neighbours, refiner),
                                                      hp.correction_weight, hp.tau)
        return out

    def optimize(self, k: int, loss: Tensor) -> None:
        """Backward, average (network ``k`` and its refiners) and step, outside DDP's reducer."""
        self.step_module(self.optimizers()[k], nn.ModuleList([self.nets[k], self.refiners[k]]), loss)

    # ------------------------------------------------------------------ diagnostics
    def epoch_diagnostics(self, epoch: int, true_clean: Tensor | None) -> EpochDiagnostics:
        """The co-divide epoch ``epoch`` trains on (sizes, detection P/R/F1, losses, ``w``)."""
        division = self.division if division_made_for(self.division, epoch) else None
        return co_divide_report(division, self.network_names, self.hparams.gmm_seed, true_clean)


def _augmented_view(pairs: PairDataset, epoch: int, *, seed: int, vocab_size: int) -> Dataset:
    """The division pass's pairs for ``epoch``: :func:`~ncl.methods.in2r_support.augmented`
    with the pass's own seed (a pure function of ``(seed, epoch, caption)``: exact on resume)."""
    return augmented(pairs, epoch, seed, vocab_size)


def _check_ranges(hp: Any) -> None:
    """Raise ConfigError naming the offending ``model.*`` option."""
    check_ranges(hp, integers={"warmup_epochs": 0, "queue_size": 1, "k": 1, "refiner_heads": 1},
                 positive=["margin", "intra_margin", "tau"], nonnegative=["correction_weight"],
                 unit=["p_threshold"])
    if not 0.0 <= hp.refiner_dropout < 1.0:
        raise ConfigError(f"model.refiner_dropout must lie in [0, 1), got {hp.refiner_dropout}")
