"""NCR (NeurIPS 2021) and LNC (IJCV 2024): co-teaching with co-divide, co-rectify and the
soft-margin triplet loss (spec 4.2; LNC Sect. 3, Alg. 1). LNC is NCR with
``momentum_regularization`` and ``noise_abandon`` (and its schedules, ``configs/lnc_*.yaml``).

Warm-up epochs: each network makes one pass over its own shuffle of the training set (less
LNC's abandoned pairs) with the summed mean-hinge triplet (+ lambda * momentum regulariser).
Every later epoch trains on a co-divide (per-sample losses, GMM, split;
:class:`~ncl.callbacks.division.GMMDivision`): A on B's division, then B on A's, labelled
batches of the peer's clean set with rectified labels ``w + (1-w) P`` (Eq. 8), unlabelled
batches of its noisy set with ``(P^A + P^B) / 2``, both recast into the soft margins (Eq. 11)
of the hardest-negative triplet (Eq. 10). The batches come from a plan per epoch
(:mod:`ncl.training.plans`; ``docs/methods/ncr_lnc.md``: the official loaders, DDP).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar, Literal

import lightning as L
from torch import Tensor

from ncl.callbacks.division import GMMDivision, divide_if_due
from ncl.callbacks.protocols import EpochDiagnostics, GMMSpec, PassSpec
from ncl.callbacks.refinement import MomentumRefinement
from ncl.data.contracts import retrieval_data
from ncl.data.datasets import Batch, PairDataset
from ncl.data.samplers import global_seed
from ncl.division import CleanRule, PredictionForm, momentum_regularizer, momentum_update, mr_prediction
from ncl.errors import ConfigError
from ncl.losses import (NcrMarginMode, RecastKind, ncr_soft_margins, ncr_soft_triplet,
                        psi4_boundary, triplet_loss)
from ncl.methods.base import BackboneFactory, RetrievalMethod
from ncl.methods.co_teaching import PlannedCoTeaching
from ncl.methods.declaration import BENCHMARK_WARMUP, MethodSpec, RegressionCase, Row, TINY_RUN_ARGS
from ncl.methods.reports import co_divide_report
from ncl.methods.skeleton import check_ranges
from ncl.division.co_divide import Division, co_divide_record, co_rectify, division_made_for, mean_hinge
from ncl.models.contracts import forward_batch
from ncl.training.plans import (DIVISION_STREAM, PlanLoader, StepDataset, co_teaching_plan,
                                unlabelled_loss_active)
from ncl.training.state import PerSampleState

UnlabelledUpdate = Literal["separate_step", "summed"]
MrReduction = Literal["sum", "mean"]


class NCR(PlannedCoTeaching, RetrievalMethod):
    """NCR / LNC LightningModule (two networks A and B, manual optimisation).

    Args:
        vocab_size, backbone: as :class:`~ncl.methods.base.RetrievalMethod`, and so are its
            options (Adam 2e-4, clip 2.0; the step schedule counts co-training epochs only,
            spec 4.1; ``select_warmup`` false: the official code selects among co-training
            epochs only; ``diagnostics``: division sizes and, with ground truth, noise-detection
            P/R/F1).
        warmup_epochs: warm-up epochs before co-divide starts (NCR F30K 5, COCO/CC152K 10;
            LNC 3 / 10 / 5). ``trainer.max_epochs`` = warm-up + co-training epochs.
        margin: alpha, the triplet margin and largest soft margin (0.2).
        soft_margin: Psi: ``linear`` (Psi1), ``exponential`` (Psi2, official default), ``sin``
            (Psi3), ``sigmoid`` (Psi4, boundary from :func:`~ncl.losses.psi4_boundary`).
        soft_margin_base: ``m`` of Psi2 (10).
        ncr_margin_mode: ``per_sample`` (paper: ``y_i = w_i + (1-w_i) P_i``, a margin per
            anchor) or the released code at three dates (spec 4.2.7): ``official_2023``
            (``T_ij = w_i + (1-w_i) P_j``), ``official_2022_p0`` (``w_i + (1-w_i) P_0``) or
            ``official_2021_fixed`` (the fixed ``margin``); the code's margins are a (B, 1)
            column indexed by the image row (:func:`~ncl.losses.ncr_soft_margins`).
        prediction_form: P from the mean hinge (``hinge``, code) or LNC Eq. 9 (``linear``).
        p_threshold: co-divide threshold on ``w`` (0.5; the official 1 % fallback applies).
        clean_rule: clean iff ``w > p_threshold`` (``greater``, code) or ``>=`` (LNC Alg. 1).
        gmm_seed: ``random_state`` of the GMM; ``None`` = numpy's global RNG (official).
        division_shuffle: per-sample losses over shuffled batches (official) or index order.
        unlabelled_start: co-training epoch from which the noisy-subset loss is used;
            ``None`` = ``num_epochs // 2`` (official code), ``0`` = from the start (LNC Alg. 1).
        unlabelled_update: ``separate_step`` (official: a second backward and optimiser step
            per iteration) or ``summed`` (one step on labelled + unlabelled loss).
        momentum_regularization: LNC's warm-up regulariser (Eq. 4-6).
        mr_momentum: beta of Eq. 5 (paper: no value given).
        mr_weight: lambda of Eq. 6 (paper: no value given).
        mr_reduction: reduce ``(P_i - gamma_i)^2`` over the batch by ``mean`` (Eq. 4's 1/N) or
            ``sum`` (lambda then weighs it per pair like the summed triplet; it stopped warm-up
            learning on the synthetic benchmark).
        mr_detach_normalizer: no gradient through P's batch normaliser tau in the regulariser
            (:func:`~ncl.division.mr_prediction`; the paper does not say).
        noise_abandon: LNC's Randomly Noise Abandon in warm-up epochs >= 1 (Eq. 7).
        abandon_fraction: fraction of the doubly-noisy pairs dropped (0.5).
        seed: seed of the batch plans' shuffles and of the abandon draw; ``None`` (default): the
            run's ``seed_everything`` (the shipped configs set 0: the same as ``0``).
    """

    spec: ClassVar[MethodSpec] = MethodSpec(
        # co-teaching (the test row is the A+B ensemble); select_warmup: as the grid was measured
        rows=(Row("ncr", "NCR-{}", order=60, warmup=True, paper_config="ncr_{bb}_{ds}", divides="co-divide",
                  small_backbones=("SGR",),
                  overrides=("--model=ncl.methods.ncr.NCR", f"--model.warmup_epochs={BENCHMARK_WARMUP}",
                             "--model.select_warmup=true")),
              # synthetic-small: LNC's paper reading of configs/lnc_*.yaml (Eq. 9, Alg. 1's w >= 0.5)
              Row("lnc", "LNC-{}", order=70, warmup=True, paper_config="lnc_{bb}_{ds}", divides="co-divide",
                  small_backbones=("SGR",),
                  overrides=("--model=ncl.methods.ncr.NCR", f"--model.warmup_epochs={BENCHMARK_WARMUP}",
                             "--model.momentum_regularization=true", "--model.noise_abandon=true",
                             "--model.select_warmup=true"),
                  small=("--model.prediction_form=linear", "--model.clean_rule=greater_equal"))),
        tiny={
            "ncr": {"warmup_epochs": 1, "unlabelled_start": 0},  # plans seeded per epoch, dropout on
            # LNC as its configs: momentum targets carried across epochs, the abandon draw
            "lnc": {"warmup_epochs": 2, "unlabelled_start": 0, "momentum_regularization": True,
                    "noise_abandon": True, "prediction_form": "linear", "clean_rule": "greater_equal",
                    "ncr_margin_mode": "per_sample"}},
        regression={
            "ncr": RegressionCase("ncr_sgr_f30k.yaml", (*TINY_RUN_ARGS, "--model.warmup_epochs=1",
                                                        "--model.unlabelled_start=0")),
            "lnc": RegressionCase("lnc_sgr_f30k.yaml", (*TINY_RUN_ARGS, "--model.warmup_epochs=2",
                                                        "--model.unlabelled_start=0")),
            "lnc_video": RegressionCase("lnc_video_synthetic.yaml", (
                "--model.backbone.init_args.img_dim=12", "--model.backbone.init_args.word_dim=8",
                "--model.backbone.init_args.text_dim=16", "--model.backbone.init_args.embed_size=16",
                "--data.preset=tiny", "--data.batch_size=16", "--data.eval_batch_size=64"))},
        page="ncr_lnc.md", config_prefixes=("ncr_", "lnc_"))

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *, warmup_epochs: int = 5,
                 margin: float = 0.2, soft_margin: RecastKind = "exponential",
                 soft_margin_base: float = 10.0, ncr_margin_mode: NcrMarginMode = "per_sample",
                 prediction_form: PredictionForm = "hinge", p_threshold: float = 0.5,
                 clean_rule: CleanRule = "greater", gmm_seed: int | None = 0,
                 division_shuffle: bool = True, unlabelled_start: int | None = None,
                 unlabelled_update: UnlabelledUpdate = "separate_step",
                 momentum_regularization: bool = False, mr_momentum: float = 0.5,
                 mr_weight: float = 1.0, mr_reduction: MrReduction = "mean",
                 mr_detach_normalizer: bool = True, noise_abandon: bool = False,
                 abandon_fraction: float = 0.5, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(vocab_size, backbone, n_networks=2, **kwargs)
        self.save_hyperparameters(ignore=["backbone", "optimizer"])
        _check_ranges(self.hparams)
        self.automatic_optimization = False
        # seed_everything runs before the CLI builds the model, so the run's seed is known here
        self.plan_seed = global_seed() if seed is None else seed
        # Training state (checkpointed with the method, identical on every rank):
        self.division: Division | None = None  # the latest division (for ``division.epoch``)
        self.momentum_targets = PerSampleState(2, fill=1.0) if momentum_regularization else None

    def method_callbacks(self) -> list[L.Callback]:
        """The co-divide (and abandon draw), LNC's momentum targets after every step."""
        return [GMMDivision()] + ([MomentumRefinement()] if self.momentum_targets is not None else [])

    # ------------------------------------------------------------------ division (GMMDivisible)
    def division_kind(self, epoch: int) -> Literal["divide", "abandon"] | None:
        """What ``epoch`` trains on: a co-divide (co-training), LNC's abandon draw (warm-up
        epochs >= 1 with Randomly Noise Abandon: a division whose ``keep`` mask is used), or
        neither."""
        hp = self.hparams
        if epoch >= hp.warmup_epochs:
            return "divide"
        return "abandon" if hp.noise_abandon and epoch >= 1 else None

    def division_due(self, epoch: int) -> bool:
        kind = self.division_kind(epoch)
        return kind is not None and not division_made_for(self.division, epoch, kind == "abandon")

    def division_pass(self, epoch: int) -> tuple[PassSpec, GMMSpec]:
        """Every pair's mean hinge (spec 4.2.4), a shuffle per network, the training batch size."""
        hp = self.hparams
        batch_size = retrieval_data(self.trainer, "NCR/LNC").batch_size
        spec = PassSpec(mean_hinge(hp.margin), (0, 1), batch_size, hp.division_shuffle,
                        DIVISION_STREAM, self.plan_seed, per_net_shuffle=True)
        return spec, GMMSpec(seed=hp.gmm_seed)

    def accept_division(self, epoch: int, values: Tensor, clean_prob: Tensor) -> None:
        hp = self.hparams
        self.division = co_divide_record(epoch, values, clean_prob, hp.p_threshold, hp.clean_rule,
                                         abandon=self.division_kind(epoch) == "abandon",
                                         seed=self.plan_seed, fraction=hp.abandon_fraction)

    # ------------------------------------------------------------------ state (MomentumRefinement)
    def refinement_table(self) -> PerSampleState:
        return self.momentum_targets

    def refinement_when(self) -> Literal["step"]:
        return "step"  # a pair's target moves each time its network trains on it (Eq. 5)

    def refinement_rule(self) -> Callable[[Tensor, Tensor], Tensor]:
        return partial(momentum_update, momentum=self.hparams.mr_momentum)

    def training_state(self) -> dict[str, Any]:
        targets = self.momentum_targets
        return {"division": None if self.division is None else self.division.state(),
                "momentum_targets": None if targets is None else targets.state_dict()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        self.division = Division.from_state(state.get("division"))
        if self.momentum_targets is not None and state.get("momentum_targets") is not None:
            self.momentum_targets.load_state_dict(state["momentum_targets"])

    def setup(self, stage: str) -> None:
        """For ``fit``: take over the DataModule's training loader (a new plan every epoch)."""
        super().setup(stage)
        if stage != "fit":
            return
        dm = self.take_train_loader(self.co_teaching_dataloader, "NCR/LNC")
        if self.momentum_targets is not None and not self.momentum_targets.ready:
            self.momentum_targets.reset(len(dm.train_pairs()))  # gamma^0 = 1 (a resume overwrites)

    # ------------------------------------------------------------------ schedule
    #: Warm-up epochs at ``lr0``, then the step schedule over co-training epochs.
    default_lr_schedule, logs_lr_factor = "after_warmup", True

    def unlabelled_loss_on(self) -> bool:
        """Whether the noisy-subset loss is used in the current co-training epoch
        (:func:`~ncl.training.plans.unlabelled_loss_active`)."""
        hp = self.hparams  # the trainer is read only when the start depends on it
        max_epochs = self.trainer.max_epochs if hp.unlabelled_start is None else None
        return unlabelled_loss_active(self.current_epoch, hp.warmup_epochs, hp.unlabelled_start,
                                      max_epochs)

    def co_teaching_dataloader(self, pairs: PairDataset) -> PlanLoader:
        """This epoch's loader over ``pairs``: warm-up passes or the co-divided plan. The
        epoch's division is made here if missing: the loader is built before any epoch-start
        hook (:func:`~ncl.callbacks.division.divide_if_due`, the same as GMMDivision's)."""
        trainer, epoch = self.trainer, self.current_epoch
        dm = retrieval_data(trainer, "NCR/LNC")
        divide_if_due(trainer, self, epoch)
        cotrain = not self.is_warmup_epoch(epoch)
        keep = self.division.keep if self.division_kind(epoch) == "abandon" else None
        # the unlabelled batches: for the noisy-subset loss, or for Psi4's boundary (its targets)
        unlabelled = cotrain and (self.unlabelled_loss_on() or self.hparams.soft_margin == "sigmoid")
        steps = co_teaching_plan(len(pairs), dm.batch_size, self.plan_seed, epoch, keep=keep,
                                 clean=self.division.clean if cotrain else None,
                                 with_unlabelled=unlabelled, limit=trainer.limit_train_batches,
                                 rank=trainer.global_rank, world=trainer.world_size)
        return PlanLoader(StepDataset(pairs, steps), dm.num_workers,
                          pin_memory=self.device.type == "cuda")

    # ------------------------------------------------------------------ training
    def warmup_step(self, k: int, batch: Batch) -> dict[str, Any] | None:
        """Summed mean-hinge triplet (spec 4.2.1 "warmup") + lambda * MR (LNC Eq. 4-6).

        Returns:
            With LNC's regulariser ``{"refine": (k, index, P)}``: the targets move after the
            step (:class:`~ncl.callbacks.refinement.MomentumRefinement`).
        """
        hp = self.hparams
        sims = forward_batch(self.nets[k], batch)  # (B, B)
        loss = triplet_loss(sims, hp.margin, negatives="mean").sum()
        logs, output = {"warmup_triplet": loss.detach()}, None
        if self.momentum_targets is not None:
            pred = mr_prediction(sims, hp.margin, hp.prediction_form, hp.mr_detach_normalizer)
            mr = momentum_regularizer(pred, self.momentum_targets.get(k, batch["index"]))
            mr = mr.sum() if hp.mr_reduction == "sum" else mr.mean()
            loss = loss + hp.mr_weight * mr
            output = {"refine": (k, batch["index"], pred.detach())}
            logs["warmup_mr"] = mr.detach()
        self.optimize(k, loss)
        self.log_net(k, logs, sims.shape[0])
        return output

    def rectified_targets(self, k: int, labelled: Batch, unlabelled: Batch | None
                          ) -> tuple[Tensor, Tensor | None]:
        """Network ``k``'s targets, co-rectified with its peer's ``w`` (LNC Eq. 8-9):
        :func:`~ncl.division.co_divide.co_rectify`."""
        hp, index = self.hparams, labelled["index"]
        w = self.division.prob_on(index.device)[1 - k][index]  # the peer's, (B,)
        return co_rectify(self.nets[k], self.nets[1 - k], w, labelled, unlabelled, hp.margin,
                          hp.prediction_form, hp.ncr_margin_mode)

    def soft_loss(self, k: int, batch: Batch, target: Tensor, div: float | None) -> Tensor:
        """Summed hardest-negative triplet (LNC Eq. 10; spec 4.2.1 "train") with the soft
        margins ``Psi(target)`` (Eq. 11) shaped for ``ncr_margin_mode``."""
        hp = self.hparams
        margins = ncr_soft_margins(target, hp.ncr_margin_mode, hp.margin, hp.soft_margin,
                                   hp.soft_margin_base, div)
        sims = forward_batch(self.nets[k], batch)  # (B, B), train mode
        return ncr_soft_triplet(sims, margins, hp.ncr_margin_mode).sum()

    def cotrain_step(self, k: int, labelled: Batch, unlabelled: Batch | None) -> None:
        """One iteration of network ``k`` on its peer's division (spec 4.2.6)."""
        hp = self.hparams
        use_unlabelled = unlabelled is not None and self.unlabelled_loss_on()
        target_l, target_u = self.rectified_targets(k, labelled, unlabelled)
        div = psi4_boundary(target_l, target_u) if hp.soft_margin == "sigmoid" else None
        loss_l = self.soft_loss(k, labelled, target_l, div)
        logs = {"loss_labelled": loss_l.detach(), "target_labelled": target_l.mean()}
        if not use_unlabelled:
            self.optimize(k, loss_l)
        elif hp.unlabelled_update == "separate_step":
            self.optimize(k, loss_l)  # the official code steps twice: the 2nd forward sees new weights
            loss_u = self.soft_loss(k, unlabelled, target_u, div)
            self.optimize(k, loss_u)
            logs["loss_unlabelled"] = loss_u.detach()
        else:
            loss_u = self.soft_loss(k, unlabelled, target_u, div)
            self.optimize(k, loss_l + loss_u)
            logs["loss_unlabelled"] = loss_u.detach()
        if target_u is not None:
            logs["target_unlabelled"] = target_u.mean()
        self.log_net(k, logs, labelled["index"].shape[0])

    def optimize(self, k: int, loss: Tensor) -> None:
        """Backward, average and step network ``k`` only
        (:meth:`~ncl.methods.base.RetrievalMethod.step_module`: one network gets gradients per
        step, so the gradients are averaged outside DDP's reducer)."""
        self.step_module(self.optimizers()[k], self.nets[k], loss)

    # ------------------------------------------------------------------ diagnostics
    @property
    def display_name(self) -> str:
        hp = self.hparams
        return "LNC" if hp.momentum_regularization or hp.noise_abandon else "NCR"

    def epoch_diagnostics(self, epoch: int, true_clean: Tensor | None) -> EpochDiagnostics:
        """The division made for ``epoch`` (sizes, detection, losses, ``w``) and, in LNC's
        warm-up, the momentum targets (:func:`~ncl.methods.reports.co_divide_report`)."""
        division, targets = self.division, self.momentum_targets
        shown = targets is not None and targets.ready and self.is_warmup_epoch(epoch)
        return co_divide_report(division if division is not None and division.epoch == epoch
                                else None, self.network_names, self.hparams.gmm_seed, true_clean,
                                targets.values if shown else None)


def _check_ranges(hp: Any) -> None:
    """Raise ConfigError (a ValueError) naming the offending ``model.*`` option."""
    check_ranges(hp, integers={"warmup_epochs": 0}, positive=["margin"], nonnegative=["mr_weight"],
                 unit=["p_threshold", "mr_momentum", "abandon_fraction"],
                 optional_nonnegative=["unlabelled_start"])
    if not hp.soft_margin_base > 1:
        raise ConfigError(f"model.soft_margin_base must be > 1 (m of Psi2), got {hp.soft_margin_base}")
