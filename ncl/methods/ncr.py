"""NCR (NeurIPS 2021) and LNC (IJCV 2024): co-teaching with co-divide, co-rectify and the
soft-margin triplet loss (spec 4.2; LNC Sect. 3, Alg. 1).

One class, :class:`NCR`; LNC is the same class with ``momentum_regularization`` and
``noise_abandon`` switched on (and its own schedules, see ``configs/lnc_sgr_*.yaml``).

Epochs ``0 .. warmup_epochs - 1`` are warm-up: each network makes one pass over its own
shuffle of the (noise-abandoned) training set with the summed mean-hinge triplet loss
(+ lambda * momentum regulariser). Every later epoch starts with co-divide (per-sample
losses, GMM, split; made by :class:`~ncl.callbacks.co_divide.CoDivide` at the end of the
previous epoch), then network A trains on B's division, then B on A's: labelled batches from the peer's clean set with rectified
labels ``w*1 + (1-w)*P`` (Eq. 8), unlabelled batches from the peer's noisy set with
``(P^A + P^B)/2``, each recast into soft margins (Eq. 11) of the hardest-negative triplet
(Eq. 10). Test/validation average the two networks' similarity matrices (spec 4.2.9).

The epoch's batches come from a plan built by this module (registered with the DataModule's
``use_train_plan`` for the duration of ``fit``); see
``docs/methods/ncr_lnc.md`` for how it matches the official labelled/unlabelled loaders and
for the DDP design.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from ncl.callbacks.co_divide import CoDivide
from ncl.data.contracts import RetrievalData, retrieval_data
from ncl.training.division import Division, DivisionConfig, compute_division
from ncl.training.state import PerSampleState
from ncl.callbacks.diagnostics import DivisionDiagnostics
from ncl.training.distributed import average_gradients, broadcast_
from ncl.callbacks.momentum import MomentumTargets
from ncl.training.passes import eval_mode
from ncl.training.plans import PlanLoader, Step, StepDataset, cotrain_plan, warmup_plan
from ncl.data.datasets import Batch, PairDataset
from ncl.data.samplers import global_seed
from ncl.division import (
    CleanRule,
    PredictionForm,
    memorization_prediction,
    momentum_regularizer,
    rectify_labels,
    rectify_labels_official_2022,
    rectify_labels_official_2023,
    rectify_noisy_labels,
)
from ncl.errors import ConfigError, TrainingError
from ncl.losses import RecastKind, soft_margin, soft_margin_triplet_loss, triplet_loss
from ncl.methods.base import BackboneFactory, RetrievalMethod, default_optimizer

UnlabelledUpdate = Literal["separate_step", "summed"]
MrReduction = Literal["sum", "mean"]
#: Which soft margins the co-training losses use (spec 4.2.7, docs/methods/ncr_lnc.md):
#: the paper's per-sample margins, or one of the three versions of the released code.
NcrMarginMode = Literal["per_sample", "official_2023", "official_2022_p0", "official_2021_fixed"]
NCR_MARGIN_MODES: tuple[str, ...] = ("per_sample", "official_2023", "official_2022_p0",
                                     "official_2021_fixed")
#: Labelled-target rule of each mode (``official_2021_fixed`` computes the 2022 targets, as
#: its code did, but never uses them as margins).
_RECTIFY = {"per_sample": rectify_labels, "official_2023": rectify_labels_official_2023,
            "official_2022_p0": rectify_labels_official_2022,
            "official_2021_fixed": rectify_labels_official_2022}


def lr_factor(epoch: int, warmup_epochs: int, lr_update: int) -> float:
    """Learning-rate multiplier of ``epoch`` (spec 4.1): warm-up epochs run at ``lr0`` and
    are not counted; co-training epoch ``c`` runs at ``lr0 * 0.1 ** (c // lr_update)``."""
    return 0.1 ** (max(epoch - warmup_epochs, 0) // lr_update)


def psi4_boundary(target_clean: Tensor, target_noisy: Tensor | None) -> float:
    """``div`` of Psi4 (LNC Eq. 11): midpoint of the mean rectified label of the clean batch
    and that of the noisy batch ("adaptively determined by average values of noisy and clean
    subsets obtained by co-divide", LNC Sect. 3.4); the clean mean alone without a noisy batch.
    """
    clean = float(target_clean.mean())
    div = clean if target_noisy is None else (clean + float(target_noisy.mean())) / 2
    return min(max(div, 0.0), 1.0)


def mr_prediction(sims: Tensor, margin: float = 0.2, form: PredictionForm = "hinge",
                  detach_normalizer: bool = True) -> Tensor:
    """Prediction ``P`` used by the momentum regulariser (LNC Eq. 4 with Eq. 9), with gradient.

    ``P_i = clip(s_i, 0, alpha) / tau`` clipped to [0, 1], with ``tau`` the mean of the
    ``B // 10 + 1`` largest clipped scores (as :func:`ncl.division.memorization_prediction`,
    same values). With ``detach_normalizer`` ``tau`` is a constant for the gradient: pulling
    ``P_i`` towards its target then moves pair ``i``'s own score only. Through ``tau`` every
    ``P`` can also be raised by pulling the batch's best pairs *down* (a smaller ``tau``),
    which works against the ranking objective. The paper does not say which is meant.

    Args:
        sims: ``(B, B)`` similarities, with gradient.
        margin: alpha (0.2).
        form: ``hinge`` (from the per-sample mean hinge, code) or ``linear`` (Eq. 9 text).
        detach_normalizer: treat ``tau`` as a constant.

    Returns:
        ``(B,)`` predictions in [0, 1].
    """
    if not detach_normalizer:
        return memorization_prediction(sims, margin, form)
    if form == "hinge":
        raw = margin - triplet_loss(sims, margin, negatives="mean") / 2  # (B,)
    else:  # Eq. 9: positive minus the mean of its row and column negatives (divided by b)
        b, diag = sims.shape[0], sims.diagonal()
        raw = diag - ((sims.sum(1) - diag) / b + (sims.sum(0) - diag) / b) / 2
    raw = raw.clamp(0.0, margin)
    tau = raw.detach().topk(raw.numel() // 10 + 1).values.mean()
    if not bool(tau > 0):
        return torch.zeros_like(raw)
    return (raw / tau).clamp(0.0, 1.0)


class NCR(RetrievalMethod):
    """NCR / LNC LightningModule (two SGRAF networks A and B, manual optimisation).

    Args:
        vocab_size, backbone, optimizer, lr_update, grad_clip, eval_shard_size: as
            :class:`~ncl.methods.base.RetrievalMethod` (Adam 2e-4, clip 2.0; spec 4.2.2).
            The step schedule counts co-training epochs only (spec 4.1).
        warmup_epochs: warm-up epochs before co-divide starts (NCR F30K 5, COCO/CC152K 10;
            LNC 3 / 10 / 5). ``trainer.max_epochs`` = warm-up + co-training epochs.
        margin: alpha, the triplet margin and largest soft margin (0.2).
        soft_margin: recasting function Psi: ``linear`` (Psi1), ``exponential`` (Psi2, the
            official default), ``sin`` (Psi3), ``sigmoid`` (Psi4, boundary from
            :func:`psi4_boundary`).
        soft_margin_base: ``m`` of Psi2 (10).
        ncr_margin_mode: ``per_sample`` (paper: ``y_i = w_i + (1-w_i) P_i``, each anchor its
            own margin), or the released code at three dates (spec 4.2.7):
            ``official_2023`` (since 60256ba: ``T_ij = w_i + (1-w_i) P_j`` broadcast B x B),
            ``official_2022_p0`` (31dd08e..60256ba: ``T_i = w_i + (1-w_i) P_0``, the batch's
            first prediction for every pair, a (B, 1) column indexed by the image row) or
            ``official_2021_fixed`` (the code released with the paper, up to 31dd08e: the
            soft margins are computed but the hinges use the fixed ``margin``, for the
            labelled and the unlabelled loss). In every ``official_*`` mode the unlabelled
            margins are a (B, 1) column indexed by the image row.
        prediction_form: P from the mean hinge (``hinge``, code) or LNC Eq. 9 (``linear``).
        p_threshold, clean_rule: co-divide threshold 0.5, ``greater`` (code) or
            ``greater_equal`` (LNC Alg. 1); the official 1 % fallback always applies.
        gmm_seed: ``random_state`` of the GMM; ``None`` = numpy's global RNG (official).
        division_shuffle: per-sample losses over shuffled batches (official) or index order.
        unlabelled_start: co-training epoch from which the noisy-subset loss is used;
            ``None`` = ``num_epochs // 2`` (official code), ``0`` = from the start (LNC Alg. 1).
        unlabelled_update: ``separate_step`` (official: a second backward and optimiser step
            per iteration) or ``summed`` (one step on labelled + unlabelled loss).
        momentum_regularization: LNC's warm-up regulariser (Eq. 4-6).
        mr_momentum: beta of Eq. 5 (paper: no value given).
        mr_weight: lambda of Eq. 6 (paper: no value given).
        mr_reduction: reduce ``(P_i - gamma_i)^2`` over the batch by ``mean`` (Eq. 4's 1/N)
            or ``sum`` (like the summed triplet, so lambda weighs the two terms per pair; it
            stopped warm-up learning on the synthetic benchmark).
        mr_detach_normalizer: no gradient through P's batch normaliser tau in the regulariser
            (:func:`mr_prediction`; the paper does not say).
        noise_abandon: LNC's Randomly Noise Abandon in warm-up epochs >= 1 (Eq. 7).
        abandon_fraction: fraction of the doubly-noisy pairs dropped (0.5).
        seed: seed of every shuffle of the batch plans and of the abandon draw; ``None``
            (default): the run's ``seed_everything``, so that repeats over seeds also vary
            the plans (the shipped configs set ``seed_everything: 0``: the same as ``0``).
        diagnostics: log division sizes and (with ground truth) noise-detection P/R/F1.
        loss_figure: also save a per-sample loss histogram + GMM figure per division.
        select_warmup: whether a warm-up epoch may become the best checkpoint. ``false``
            (the shipped configs; the official code selects among co-training epochs only)
            logs its validation under ``val_warmup/*``, so ``val/rsum`` exists only from
            the first co-training epoch. The class default ``true`` keeps the behaviour of
            ncl <= 0.1 for code that builds NCR without a config (docs/methods/ncr_lnc.md).
    """

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = default_optimizer, lr_update: int = 30,
                 grad_clip: float = 2.0, eval_shard_size: int = 1000, warmup_epochs: int = 5,
                 margin: float = 0.2, soft_margin: RecastKind = "exponential",
                 soft_margin_base: float = 10.0, ncr_margin_mode: NcrMarginMode = "per_sample",
                 prediction_form: PredictionForm = "hinge", p_threshold: float = 0.5,
                 clean_rule: CleanRule = "greater", gmm_seed: int | None = 0,
                 division_shuffle: bool = True, unlabelled_start: int | None = None,
                 unlabelled_update: UnlabelledUpdate = "separate_step",
                 momentum_regularization: bool = False, mr_momentum: float = 0.5,
                 mr_weight: float = 1.0, mr_reduction: MrReduction = "mean",
                 mr_detach_normalizer: bool = True, noise_abandon: bool = False,
                 abandon_fraction: float = 0.5, seed: int | None = None,
                 diagnostics: bool = True, loss_figure: bool = False,
                 select_warmup: bool = True) -> None:
        super().__init__(vocab_size=vocab_size, backbone=backbone, optimizer=optimizer, lr_update=lr_update,
                         grad_clip=grad_clip, eval_shard_size=eval_shard_size,
                         n_networks=2)
        self.save_hyperparameters(ignore=["backbone", "optimizer"])
        _check_args(warmup_epochs, margin, soft_margin, soft_margin_base, ncr_margin_mode,
                    prediction_form, unlabelled_start, unlabelled_update, mr_momentum, mr_weight,
                    mr_reduction, abandon_fraction)
        self.automatic_optimization = False
        # seed_everything runs before the CLI builds the model, so the run's seed is known here
        self.plan_seed = global_seed() if seed is None else seed
        self.division_config = DivisionConfig(
            margin=margin, p_threshold=p_threshold, clean_rule=clean_rule, gmm_seed=gmm_seed,
            shuffle=division_shuffle, seed=self.plan_seed, abandon_fraction=abandon_fraction)
        # Training state (checkpointed with the method, identical on every rank):
        self.division: Division | None = None  # the latest division (for ``division.epoch``)
        self.momentum_targets = PerSampleState(2, fill=1.0) if momentum_regularization else None

    # ------------------------------------------------------------------ Lightning wiring
    def configure_callbacks(self) -> list[L.Callback]:
        """The callbacks this method depends on: co-divide at every epoch end, the momentum
        targets' update after every step (LNC), and the division diagnostics."""
        hp = self.hparams
        callbacks: list[L.Callback] = [CoDivide()]
        if self.momentum_targets is not None:
            callbacks.append(MomentumTargets(hp.mr_momentum))
        if hp.diagnostics:
            callbacks.append(DivisionDiagnostics(hp.loss_figure, hp.gmm_seed))
        return callbacks

    # ------------------------------------------------------------------ training state
    def division_kind(self, epoch: int) -> Literal["divide", "abandon"] | None:
        """What ``epoch`` needs: a co-divide (co-training), LNC's abandon mask (warm-up
        epochs >= 1 with Randomly Noise Abandon), or nothing."""
        hp = self.hparams
        if epoch >= hp.warmup_epochs:
            return "divide"
        return "abandon" if hp.noise_abandon and epoch >= 1 else None

    def prepare_division(self, epoch: int) -> None:
        """Make ``self.division`` epoch ``epoch``'s division if the epoch needs one and it is
        not already there (called by :class:`~ncl.callbacks.co_divide.CoDivide` at the end of
        the previous epoch, and by the batch plan as a fallback)."""
        kind = self.division_kind(epoch)
        have = self.division is not None and self.division.epoch == epoch
        if kind is None or (have and (kind == "divide" or self.division.keep is not None)):
            return
        trainer = self.trainer
        dm = retrieval_data(trainer, "NCR/LNC")
        self.division = compute_division(
            self.division_config, list(self.nets), dm.train_pairs(), dm.batch_size, epoch,
            self.device, trainer.global_rank, trainer.world_size, dm.num_workers,
            abandon=kind == "abandon")

    def training_state(self) -> dict[str, Any]:
        return {"division": None if self.division is None else self.division.state(),
                "momentum_targets": None if self.momentum_targets is None
                else self.momentum_targets.state_dict()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        callbacks = state.get("legacy_callbacks") or {}  # checkpoints of ncl <= 0.1's callbacks
        if "division" not in state and "CoDivide" in callbacks:
            state = {"division": callbacks["CoDivide"].get("division"),
                     "momentum_targets": ({"values": callbacks["MomentumTargets"]["gamma"]}
                                          if "MomentumTargets" in callbacks else None)}
        saved = state.get("division")
        self.division = None if saved is None else Division(**saved)
        if self.momentum_targets is not None and state.get("momentum_targets") is not None:
            self.momentum_targets.load_state_dict(state["momentum_targets"])

    def setup(self, stage: str) -> None:
        """For ``fit``: take over the DataModule's training loader (see module docstring)."""
        super().setup(stage)
        if stage != "fit":
            return
        dm = retrieval_data(self.trainer, "NCR/LNC")
        # A new plan (and division) every epoch: the loader must be rebuilt every epoch.
        self.trainer.reload_dataloaders_every_n_epochs = 1
        dm.use_train_plan(self.co_teaching_dataloader)
        if self.momentum_targets is not None and not self.momentum_targets.ready:
            self.momentum_targets.reset(len(dm.train_pairs()))  # gamma^0 = 1 (a resume overwrites)

    def teardown(self, stage: str) -> None:
        dm = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        if isinstance(dm, RetrievalData):
            dm.use_train_plan(None)

    # ------------------------------------------------------------------ schedule
    @property
    def in_warmup(self) -> bool:
        return self.current_epoch < self.hparams.warmup_epochs

    def is_warmup_epoch(self, epoch: int) -> bool:
        """Epochs ``0 .. warmup_epochs - 1`` (model selection skips them unless
        ``select_warmup``; :meth:`~ncl.methods.base.RetrievalMethod.is_warmup_epoch`)."""
        return epoch < self.hparams.warmup_epochs

    def unlabelled_loss_on(self) -> bool:
        """Whether the noisy-subset loss is used in the current co-training epoch."""
        start = self.hparams.unlabelled_start
        if start is None:
            max_epochs = self.trainer.max_epochs
            if max_epochs is None or max_epochs < 0:
                raise ConfigError("model.unlabelled_start=null needs trainer.max_epochs "
                                  "(the official start is num_epochs // 2)")
            start = (max_epochs - self.hparams.warmup_epochs) // 2
        return self.current_epoch - self.hparams.warmup_epochs >= start

    def lr_factor(self, epoch: int) -> float:
        """Warm-up epochs at ``lr0``, then the step schedule over co-training epochs."""
        return lr_factor(epoch, self.hparams.warmup_epochs, self.hparams.lr_update)

    def on_train_epoch_start(self) -> None:
        super().on_train_epoch_start()  # reseeds and applies lr_factor (manual optimisation)
        self.log("train/lr_factor", self.lr_factor(self.current_epoch), on_step=False,
                 on_epoch=True, sync_dist=True)

    # ------------------------------------------------------------------ batch plan
    def co_teaching_dataloader(self, pairs: PairDataset) -> PlanLoader:
        """This epoch's loader over ``pairs``: warm-up passes or the co-divided plan."""
        hp, trainer = self.hparams, self.trainer
        dm = retrieval_data(trainer, "NCR/LNC")
        epoch = self.current_epoch
        where = dict(rank=trainer.global_rank, world=trainer.world_size)
        if self.in_warmup:
            pool = np.arange(len(pairs))
            if hp.noise_abandon and epoch >= 1:  # LNC Alg. 1 l. 6-9: from the 2nd warm-up epoch
                self.prepare_division(epoch)
                pool = np.flatnonzero(self.division.keep.numpy())
            steps = warmup_plan([pool, pool], dm.batch_size, self.plan_seed, epoch, **where)
        else:
            self.prepare_division(epoch)
            division = self.division
            check_cotraining_possible(division.clean, epoch)
            needs_unlabelled = self.unlabelled_loss_on() or hp.soft_margin == "sigmoid"
            steps = cotrain_plan([c.numpy() for c in division.clean], dm.batch_size, self.plan_seed,
                                 epoch, with_unlabelled=needs_unlabelled, **where)
        return PlanLoader(StepDataset(pairs, self._limit(steps)), dm.num_workers)

    def _limit(self, steps: list[Step]) -> list[Step]:
        """Share an integer ``trainer.limit_train_batches`` evenly between A and B.

        The plan runs all of A's steps before B's, so Lightning's own cut would otherwise
        leave B untrained. A fractional limit is left to Lightning (it truncates B first).
        """
        limit = self.trainer.limit_train_batches
        if not isinstance(limit, int) or limit >= len(steps):
            return steps
        per_net, taken, kept = math.ceil(limit / 2), [0, 0], []
        for step in steps:
            if taken[step.net] < per_net:
                kept.append(step)
                taken[step.net] += 1
        return kept

    # ------------------------------------------------------------------ training
    def training_step(self, batch: dict, batch_idx: int) -> dict[str, Any] | None:
        k = int(batch["net"])
        if self.in_warmup:
            return self.warmup_step(k, batch["labelled"])
        self.cotrain_step(k, batch["labelled"], batch.get("unlabelled"))
        return None

    def warmup_step(self, k: int, batch: Batch) -> dict[str, Any] | None:
        """Summed mean-hinge triplet (spec 4.2.1 "warmup") + lambda * MR (LNC Eq. 4-6).

        Returns:
            With LNC's regulariser, ``{"momentum_update": (k, index, P)}``: the targets move
            after the step (:class:`~ncl.callbacks.momentum.MomentumTargets`).
        """
        hp = self.hparams
        sims = self.batch_similarity(batch, self.nets[k])  # (B, B)
        loss = triplet_loss(sims, hp.margin, negatives="mean").sum()
        logs = {"warmup_triplet": loss.detach()}
        output = None
        if self.momentum_targets is not None:
            pred = mr_prediction(sims, hp.margin, hp.prediction_form, hp.mr_detach_normalizer)
            mr = momentum_regularizer(pred, self.momentum_targets.get(k, batch["index"]))
            mr = mr.sum() if hp.mr_reduction == "sum" else mr.mean()
            loss = loss + hp.mr_weight * mr
            output = {"momentum_update": (k, batch["index"], pred.detach())}
            logs["warmup_mr"] = mr.detach()
        self.optimize(k, loss)
        self.log_net(k, logs, sims.shape[0])
        return output

    def rectified_targets(self, k: int, labelled: Batch, unlabelled: Batch | None
                          ) -> tuple[Tensor, Tensor | None]:
        """Co-rectify (LNC Eq. 8-9; spec 4.2.6 step 1), both networks in eval mode, no grad.

        Returns:
            The labelled targets, ``(B_l,)`` (``per_sample``: ``w_i + (1-w_i) P_i``;
            ``official_2022_p0`` and ``official_2021_fixed``: ``w_i + (1-w_i) P_0``) or
            ``(B_l, B_l)`` (``official_2023``), and the unlabelled targets ``(B_u,)`` or
            ``None``.
        """
        hp = self.hparams
        net, peer = self.nets[k], self.nets[1 - k]
        w = self.division.prob[1 - k][labelled["index"].cpu()].to(self.device)  # peer's
        with torch.no_grad(), eval_mode(net, peer):
            p_l = memorization_prediction(self.batch_similarity(labelled, net), hp.margin,
                                          hp.prediction_form)
            target_l = _RECTIFY[hp.ncr_margin_mode](w.to(p_l.dtype), p_l)
            target_u = None
            if unlabelled is not None:
                p_uk = memorization_prediction(self.batch_similarity(unlabelled, net), hp.margin,
                                               hp.prediction_form)
                p_uj = memorization_prediction(self.batch_similarity(unlabelled, peer), hp.margin,
                                               hp.prediction_form)
                target_u = rectify_noisy_labels(p_uk, p_uj)
        return target_l.clamp(0, 1), None if target_u is None else target_u.clamp(0, 1)

    def margins(self, target: Tensor, div: float | None) -> Tensor:
        """Soft margins ``Psi(target)`` (LNC Eq. 11), shaped for ``ncr_margin_mode``.

        A ``(B,)`` target stays ``(B,)`` in ``per_sample`` mode (each anchor its own margin)
        and becomes the code's ``(B, 1)`` column, indexed by the image row in both hinges, in
        the ``official_*`` modes; ``official_2023``'s ``(B, B)`` labelled targets stay
        ``(B, B)``. ``official_2021_fixed`` returns the fixed ``margin`` as a ``(B, 1)``
        column whatever the targets: the code of 2021 built ``Psi(target)`` and then used
        ``self.margin`` in the hinges (spec 4.2.7).
        """
        hp = self.hparams
        if hp.ncr_margin_mode == "official_2021_fixed":
            return torch.full((target.shape[0], 1), float(hp.margin), dtype=target.dtype,
                              device=target.device)
        m = soft_margin(target, alpha=hp.margin, kind=hp.soft_margin, base=hp.soft_margin_base, div=div)
        if hp.ncr_margin_mode != "per_sample" and m.dim() == 1:
            m = m.unsqueeze(1)  # (B, 1)
        return m

    def soft_loss(self, k: int, batch: Batch, margins: Tensor) -> Tensor:
        """Summed hardest-negative soft-margin triplet (LNC Eq. 10; spec 4.2.1 "train").

        ``margins`` from :meth:`margins`: ``(B,)`` per anchor (``per_sample``) or a tensor
        broadcast against ``S`` in both hinges, as the code does (``official_*`` modes).
        """
        sims = self.batch_similarity(batch, self.nets[k])  # (B, B), train mode
        layout = "per_sample" if self.hparams.ncr_margin_mode == "per_sample" else "official_2023"
        return soft_margin_triplet_loss(sims, margins, layout, "hardest").sum()

    def cotrain_step(self, k: int, labelled: Batch, unlabelled: Batch | None) -> None:
        """One iteration of network ``k`` on its peer's division (spec 4.2.6)."""
        hp = self.hparams
        use_unlabelled = unlabelled is not None and self.unlabelled_loss_on()
        target_l, target_u = self.rectified_targets(k, labelled, unlabelled)
        div = psi4_boundary(target_l, target_u) if hp.soft_margin == "sigmoid" else None
        loss_l = self.soft_loss(k, labelled, self.margins(target_l, div))
        logs = {"loss_labelled": loss_l.detach(), "target_labelled": target_l.mean()}
        if not use_unlabelled:
            self.optimize(k, loss_l)
        elif hp.unlabelled_update == "separate_step":
            self.optimize(k, loss_l)  # the official code steps twice; the 2nd forward sees new weights
            loss_u = self.soft_loss(k, unlabelled, self.margins(target_u, div))
            self.optimize(k, loss_u)
            logs["loss_unlabelled"] = loss_u.detach()
        else:
            loss_u = self.soft_loss(k, unlabelled, self.margins(target_u, div))
            self.optimize(k, loss_l + loss_u)
            logs["loss_unlabelled"] = loss_u.detach()
        if target_u is not None:
            logs["target_unlabelled"] = target_u.mean()
        self.log_net(k, logs, labelled["index"].shape[0])

    def optimize(self, k: int, loss: Tensor) -> None:
        """Backward, DDP gradient average of network ``k`` only, then the step, which clips
        first (:meth:`on_before_optimizer_step`)."""
        opt = self.optimizers()[k]
        opt.zero_grad()
        with self._no_ddp_sync():
            self.manual_backward(loss)
        average_gradients(self.nets[k])
        opt.step()
        # DDP broadcasts rank 0's buffers before a forward only after a synced backward, and
        # every backward here is no_sync: without this each rank's BatchNorm running
        # statistics would follow its own batches, and validation or a division pass sharded
        # over the ranks would mix networks that differ from the checkpoint (rank 0's).
        for buffer in self.nets[k].buffers():
            broadcast_(buffer)

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Clip the stepping network's global gradient norm at ``grad_clip`` (spec 4.1).

        Clipping here rather than before ``opt.step()``: Lightning calls this hook inside the
        step, after the precision plugin has unscaled the gradients (``16-mixed``: the loss
        was multiplied by the GradScaler's scale, 2**16 at first). Clipping before the step
        would clip the scaled gradients, i.e. at ``grad_clip / scale`` in true units. With
        ``32`` and ``bf16-mixed`` (no scaler) the hook also runs just before the step, so
        nothing changes there. ``optimizer`` holds network ``k``'s parameters only.
        """
        if self.hparams.grad_clip > 0:
            self.clip_gradients(optimizer, gradient_clip_val=self.hparams.grad_clip,
                                gradient_clip_algorithm="norm")

    @contextmanager
    def _no_ddp_sync(self) -> Iterator[None]:
        """Keep DDP's reducer out of the backward: only one network gets gradients per step,
        so its gradients are averaged by :func:`average_gradients` instead."""
        model = self.trainer.strategy.model
        with model.no_sync() if isinstance(model, DistributedDataParallel) else nullcontext():
            yield

    def log_net(self, k: int, values: dict[str, Tensor], batch_size: int) -> None:
        name = self.network_names[k]
        # sync_dist: the epoch means average over ranks (one all-reduce per key per epoch).
        self.log_dict({f"train/{name}/{key}": v for key, v in values.items()}, on_step=True,
                      on_epoch=True, batch_size=batch_size, sync_dist=True)


def _check_args(warmup_epochs: int, margin: float, soft_margin: str, soft_margin_base: float,
                ncr_margin_mode: str, prediction_form: str, unlabelled_start: int | None,
                unlabelled_update: str, mr_momentum: float, mr_weight: float, mr_reduction: str,
                abandon_fraction: float) -> None:
    """Raise ConfigError (a ValueError) naming the offending ``model.*`` option."""
    choices = {"soft_margin": (soft_margin, ("linear", "exponential", "sin", "sigmoid")),
               "ncr_margin_mode": (ncr_margin_mode, NCR_MARGIN_MODES),
               "prediction_form": (prediction_form, ("hinge", "linear")),
               "unlabelled_update": (unlabelled_update, ("separate_step", "summed")),
               "mr_reduction": (mr_reduction, ("sum", "mean"))}
    for name, (value, allowed) in choices.items():
        if value not in allowed:
            raise ConfigError(f"model.{name} must be one of {allowed}, got {value!r}")
    if warmup_epochs < 0:
        raise ConfigError(f"model.warmup_epochs must be >= 0, got {warmup_epochs}")
    if not margin > 0:
        raise ConfigError(f"model.margin must be > 0, got {margin}")
    if not soft_margin_base > 1:
        raise ConfigError(f"model.soft_margin_base (m of Psi2) must be > 1, got {soft_margin_base}")
    if unlabelled_start is not None and unlabelled_start < 0:
        raise ConfigError(f"model.unlabelled_start must be >= 0 or null, got {unlabelled_start}")
    if not 0.0 <= mr_momentum <= 1.0:
        raise ConfigError(f"model.mr_momentum must lie in [0, 1], got {mr_momentum}")
    if mr_weight < 0:
        raise ConfigError(f"model.mr_weight must be >= 0, got {mr_weight}")
    if not 0.0 <= abandon_fraction <= 1.0:
        raise ConfigError(f"model.abandon_fraction must lie in [0, 1], got {abandon_fraction}")


def check_cotraining_possible(clean: Tensor, epoch: int) -> None:
    """Raise one clear error when the co-divide left no network a batch to train on.

    Args:
        clean: ``(K, N)`` bool, network ``k``'s clean pairs (trained on by its peer).
        epoch: the epoch, for the message.

    Without this Lightning would end ``fit`` quietly ("no training batches", exit 0), which
    looks like a finished run.
    """
    counts = [int(c.sum()) for c in clean]
    if all(n < 2 for n in counts):
        kept = ", ".join(f"{n}" for n in counts)
        raise TrainingError(
            f"NCR/LNC epoch {epoch}: the co-divide called {kept} of {clean.shape[1]} pairs clean "
            f"(per network); co-training needs at least 2 to form a batch. The division has "
            f"collapsed (see division/* in metrics.csv): more warm-up epochs, a lower learning "
            f"rate or a larger training set usually help.")
