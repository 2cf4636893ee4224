"""CRCL (NeurIPS 2023): the Active Complementary Loss and Self-refining Correspondence
Correction (spec 4.4; CRCL Sect. 2.2-2.3, Algorithm 1). One network per run (SGR or SAF;
"CRCL-SGRAF" averages a separately trained SGR and SAF at test time, spec 4.4.5).

Every training pair carries a soft correspondence label ``y_i`` (initially 1, a
:class:`~ncl.training.state.PerSampleState` in the training state). Per step: ``S`` (train mode,
augmented batch with ``data.augment``), the batch's labels corrected by SCC (Eq. 10-12), ACL
(Eq. 6-9, mean over the batch). The callbacks of :meth:`CRCL.configure_callbacks` do the rest:
:class:`~ncl.callbacks.self_refining.SelfRefining` re-initialises the network at every piece
of ``model.pieces`` (Algorithm 1; the labels carry over);
:class:`~ncl.callbacks.refinement.MomentumRefinement` moves the labels, per step (official
rule: the step's corrected labels) or per epoch (paper rule: an eval pass of ``p_hat`` after
the previous epoch, Eq. 11); :class:`~ncl.callbacks.diagnostics.Diagnostics` logs
:meth:`CRCL.epoch_diagnostics`. Paper versus code: ``docs/methods/crcl.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

import lightning as L
import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor

from ncl.division.stats import CLEAN_AT, label_stats
from ncl.callbacks.protocols import EpochDiagnostics, LabelView, RefineWhen
from ncl.callbacks.refinement import MomentumRefinement
from ncl.callbacks.self_refining import SelfRefining
from ncl.data.contracts import retrieval_data
from ncl.division import CorrectionRule, correct_labels, filter_confident_noise
from ncl.division.correction import matching_estimate
from ncl.division.detection import zeroed_labels
from ncl.errors import ConfigError
from ncl.losses import AclForm, active_complementary_terms, average_matching_probability
from ncl.methods.base import BackboneFactory, RetrievalMethod
from ncl.methods.declaration import MethodSpec, RegressionCase, Row, TINY_RUN_ARGS
from ncl.methods.reports import division_report
from ncl.models.contracts import forward_batch
from ncl.training.passes import PassSpec
from ncl.training.pieces import (OFFICIAL_SCHEDULES_TRAIN_SH, OFFICIAL_WARM_EPOCH, PieceLocation,
                                 PieceSchedule)
from ncl.training.state import PerSampleState, overwrite
from ncl.streams import declare_stream

Selection = Literal["all", "last_piece"]

#: Stream id of :func:`~ncl.data.samplers.epoch_seed` for the shuffle of the paper rule's
#: estimate pass (the re-initialised weights use :data:`ncl.callbacks.self_refining.REINIT_STREAM`).
ESTIMATE_STREAM = declare_stream(22, "crcl.estimate")
#: The official ``train.sh``: ``--schedules 5,5,5,30`` plus ``--warm_epoch 2`` per piece.
OFFICIAL_PIECES = tuple(k + OFFICIAL_WARM_EPOCH for k in OFFICIAL_SCHEDULES_TRAIN_SH)  # 7, 7, 7, 32


def crcl_optimizer(params: Any) -> torch.optim.Optimizer:
    """AdamW, lr 5e-4, weight decay 0.01: the official CRCL optimiser (spec 4.1, 4.4.1)."""
    return torch.optim.AdamW(params, lr=5e-4, weight_decay=0.01)


class CRCL(RetrievalMethod):
    """CRCL LightningModule (one network, automatic optimisation).

    Args:
        vocab_size, backbone: as :class:`~ncl.methods.base.RetrievalMethod`, as are the options
            it forwards (``grad_clip``, ``eval_shard_size``, ``select_warmup``: the warm-up
            epochs are :meth:`is_warmup_epoch`'s). The backbone needs ``add_mask_token: true``
            when ``data.augment`` masks tokens.
        optimizer: default AdamW, lr 5e-4, weight decay 0.01 (the official code).
        lr_update: ``lr0 * 0.1 ** (e // lr_update)`` with ``e`` the epoch *within the piece*
            (15, official).
        pieces: epochs of each SR piece, the paper's ``[e_1, ..., e_m]``, frozen epochs
            included; default ``[7, 7, 7, 32]`` = the official ``train.sh`` (``--schedules
            5,5,5,30`` + ``--warm_epoch 2``). ``trainer.max_epochs`` may not exceed their sum.
        freeze_epochs: ``e_f``, labels frozen for the first ``e_f`` epochs of every piece (2,
            official ``--warm_epoch``); >= 1 for ``rule="paper"``.
        tau: temperature of the matching probabilities (0.05).
        weight: lambda of Eq. 8 (5, hard-coded in the official code).
        q: ``None`` for the per-sample exponent ``1 - y_hat`` (Eq. 8), or a fixed q in [0, 1]
            (Table 4's ``L_r(q=0)``, ``L_r(q=1)``).
        form: ``official`` (``+1e-10`` in the softmax denominators) or ``paper`` (Eq. 3).
        rule: SCC label update: ``official`` (every step, the batch's own estimate),
            ``paper`` (once per epoch, an eval pass after the previous epoch; Eq. 11) or
            ``prediction`` (no correction: the step's estimate, Fig. 1's "without SCC").
        momentum: beta of Eq. 10 (0.8, official ``--alpha``).
        threshold: epsilon of Eq. 12 (0.1); 0 turns the confident-noise filter off.
        selection: which validation epochs may become the best checkpoint, through the logged
            ``val/rsum_selected`` that the configs monitor: ``all`` (every epoch of every
            piece; ``val/rsum_selected == val/rsum``) or ``last_piece`` (the official code:
            only epochs of the last piece the run reaches; others log -1).
        estimate_batch_size: batch size of the paper rule's estimate pass (``None``: the
            training batch size, the batches ``p_hat`` is defined over).
    """

    spec: ClassVar[MethodSpec] = MethodSpec(
        # benchmark: 14 epochs as three pieces, labels frozen 3 epochs each, the official
        # augmentation; synthetic-small: one piece of 8, 3 frozen (why: docs/results.md,
        # "Multi-seed reproduction").
        rows=(Row("crcl", "CRCL-{}", order=80, paper_config="crcl_{bb}_{ds}", divides="labels",
                  small_backbones=("SGR",),
                  detection_after="freeze_epochs",
                  overrides=("--model=ncl.methods.crcl.CRCL", "--model.pieces=[5, 5, 4]",
                             "--model.freeze_epochs=3", "--data.augment=ncl.data.augment.CaptionRegionAugment"),
                  small=("--model.pieces=[8]", "--model.freeze_epochs=3")),),
        # recorded as Adam with weight decay 0.01 (the AdamW value the configs then stated)
        regression={f"crcl_{rule}": RegressionCase("crcl_sgr_f30k.yaml", (
            *TINY_RUN_ARGS, "--model.optimizer.weight_decay=0.01", "--model.pieces=[2,2]",
            "--model.freeze_epochs=1", f"--model.rule={rule}", "--data.augment=null"))
            for rule in ("official", "paper")},
        page="crcl.md", config_prefixes=("crcl_",))

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = crcl_optimizer, lr_update: int = 15,
                 pieces: Sequence[int] = OFFICIAL_PIECES, freeze_epochs: int = 2,
                 tau: float = 0.05, weight: float = 5.0, q: float | None = None,
                 form: AclForm = "official", rule: CorrectionRule = "official",
                 momentum: float = 0.8, threshold: float = 0.1, selection: Selection = "all",
                 estimate_batch_size: int | None = None, **kwargs: Any) -> None:
        _check_args(freeze_epochs, rule, tau, weight, q, momentum, threshold, estimate_batch_size)
        try:
            schedule = PieceSchedule(tuple(pieces))
        except (TypeError, ValueError) as err:
            raise ConfigError(f"model.pieces must be a non-empty list of epochs per piece (each "
                              f">= 1), got {pieces!r}") from err
        super().__init__(vocab_size, backbone, optimizer=optimizer, lr_update=lr_update,
                         n_networks=1, **kwargs)  # saves every option as hparams
        self.schedule = schedule
        # Training state (checkpointed, identical on every rank):
        self.labels = PerSampleState(1, fill=1.0)  # y_i, initially 1 (Sect. 2.3)
        self.label_epoch = -1  # paper rule: the epoch whose labels the table holds
        self.start_labels: dict[int, Tensor] = {}  # diagnostics: y_hat at the last epoch starts

    # ------------------------------------------------------------------ Lightning wiring
    def method_callbacks(self) -> list[L.Callback]:
        """Self-refining pieces, label correction (label diagnostics: the base's ``diagnostics``)."""
        return [SelfRefining(list(self.schedule.lengths)), MomentumRefinement()]

    def setup(self, stage: str) -> None:
        """For ``fit``: the label table (all ones, unless a checkpoint restores it afterwards)
        and the check that the trainer's epochs fit the piece schedule."""
        super().setup(stage)
        if stage != "fit":
            return
        n = len(retrieval_data(self.trainer, "CRCL").train_pairs())  # labels by training index
        if not self.labels.ready or self.labels.num_samples != n:
            self.labels.reset(n)
        max_epochs = self.trainer.max_epochs
        total = self.schedule.total_epochs
        if max_epochs is None or max_epochs < 0 or max_epochs > total:
            raise ConfigError(f"trainer.max_epochs ({max_epochs}) must be at most the "
                              f"{total} epochs of model.pieces {list(self.schedule.lengths)}; "
                              f"set trainer.max_epochs={total}")

    # ------------------------------------------------------------------ pieces
    def location(self, epoch: int | None = None) -> PieceLocation:
        """``(piece, epoch_in_piece)`` of ``epoch`` (default: the current epoch)."""
        return self.schedule.locate(self.current_epoch if epoch is None else epoch)

    def is_warmup_epoch(self, epoch: int) -> bool:
        """The frozen epochs of piece 0 (labels all 1: plain ACL on the noisy pairs), kept out
        of model selection unless ``select_warmup``: the official code never selects them, and
        with ``selection: all`` they would otherwise compete. The frozen epochs of later pieces
        are not warm-up: the official code selects among them (docs/methods/crcl.md)."""
        if not 0 <= epoch < self.schedule.total_epochs:
            return False
        piece, within = self.location(epoch)
        return piece == 0 and within < self.hparams.freeze_epochs

    def selectable(self, epoch: int) -> bool:
        """Whether ``epoch`` may become the best checkpoint: the base rule (piece 0's frozen
        epochs only with ``select_warmup``) and ``selection`` (``last_piece``: only the last
        piece the run reaches, as the official code keeps the best of the last piece)."""
        if not super().selectable(epoch):
            return False
        if self.hparams.selection == "all":
            return True
        last = min(self.trainer.max_epochs, self.schedule.total_epochs) - 1
        return self.location(epoch).piece == self.location(last).piece

    # ------------------------------------------------------------------ labels (SCC)
    def loss_labels(self, index: Tensor, estimate: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """The labels ``y_hat`` ACL uses for a batch, and what goes back into the table.

        Args:
            index: ``(B,)`` training indices of the batch.
            estimate: ``(B,)`` the step's ``p_hat`` (``official``/``prediction`` rules).

        Returns:
            ``(y_hat, stored)``: ``stored`` is ``None`` for the paper rule (its table moves
            once per epoch, :meth:`accept_refinement`).
        """
        hp = self.hparams
        table = self.labels.get(0, index).float()
        if hp.rule == "paper":
            return filter_confident_noise(table, hp.threshold), None
        piece, within = self.location()
        out = correct_labels(table, estimate, piece, within, rule=hp.rule,
                             freeze_epochs=hp.freeze_epochs, momentum=hp.momentum,
                             threshold=hp.threshold)
        return out.for_loss, out.stored

    def corrected_labels(self) -> Tensor:
        """``(N,)`` the table as ACL would read it now (Eq. 12's filter applied)."""
        return filter_confident_noise(self.labels.values[0].float(), self.hparams.threshold)

    # Refinable: what MomentumRefinement moves, and when.
    def refinement_table(self) -> PerSampleState:
        return self.labels

    def refinement_when(self) -> RefineWhen:
        """Per epoch for the paper rule (Eq. 11), per step for the others."""
        return "epoch" if self.hparams.rule == "paper" else "step"

    def refinement_rule(self) -> Callable[[Tensor, Tensor], Tensor]:
        """Per step: the step already computed the stored labels (Eq. 10-12), so overwrite."""
        return overwrite

    def refinement_due(self, epoch: int) -> bool:
        """Whether epoch ``epoch``'s labels (paper rule) come from an estimate pass: inside
        the schedule, past the frozen epochs of its piece, and not made yet."""
        hp = self.hparams
        if hp.rule != "paper" or not 0 <= epoch < self.schedule.total_epochs:
            return False
        return self.location(epoch).epoch_in_piece >= hp.freeze_epochs and self.label_epoch < epoch

    def refinement_pass(self, epoch: int) -> PassSpec:
        """``p_hat`` (Eq. 10) of every training pair in eval mode, with the weights at the end
        of epoch ``epoch - 1``. ``p_hat`` is a softmax over the batch, so the batches matter:
        one shuffle of the whole set per ``(seed, epoch)``, cut into training-size batches
        (``estimate_batch_size``), the same for any number of processes."""
        hp = self.hparams
        batch_size = hp.estimate_batch_size or retrieval_data(self.trainer, "CRCL").batch_size
        return PassSpec(matching_estimate(hp.tau, hp.form), nets=(0,), batch_size=batch_size,
                        shuffle=True, stream=ESTIMATE_STREAM, seed=self.training_seed)

    def accept_refinement(self, epoch: int, values: Tensor) -> None:
        """Paper rule (Eq. 11-12): make the table hold epoch ``epoch``'s labels, from the
        estimates ``p_hat^(j, t-1)``, ``values`` ``(N,)``, of :meth:`refinement_pass`."""
        hp = self.hparams
        piece, within = self.location(epoch)
        table = self.labels.values[0]
        estimate = values.float().clamp(0.0, 1.0).to(table.dtype)
        out = correct_labels(table, estimate, piece, within, rule="paper",
                             freeze_epochs=hp.freeze_epochs, momentum=hp.momentum,
                             threshold=hp.threshold)
        self.labels.values[0] = out.stored
        self.label_epoch = epoch

    # ------------------------------------------------------------------ diagnostics
    def on_train_epoch_start(self) -> None:
        """Reseed (base), then keep the corrected labels the epoch starts with (after every
        callback's epoch-start hook: re-initialisation, the paper rule's fallback) for the
        flips of the next epoch's diagnostics."""
        super().on_train_epoch_start()
        epoch = self.current_epoch
        self.start_labels = {e: y for e, y in self.start_labels.items() if e in (epoch - 1, epoch)}
        self.start_labels.setdefault(epoch, self.corrected_labels().clone())  # kept on resume

    def epoch_diagnostics(self, epoch: int, true_clean: Tensor | None) -> EpochDiagnostics:
        """The corrected labels ``y_hat`` now: the piece, :func:`~ncl.division.stats.label_stats`
        (flips since the start of the previous epoch) when ``diagnostics`` is on, "``y_hat``
        below 0.5" as a noise detector, and their histogram."""
        labels = self.corrected_labels()
        scalars: dict[str, float] = {}
        if self.hparams.diagnostics:
            piece, within = self.location(epoch)
            scalars = {"crcl/piece": float(piece), "crcl/epoch_in_piece": float(within),
                       **label_stats(labels, true_clean, self.start_labels.get(epoch - 1))}
        return division_report({"y_hat < 0.5": labels >= CLEAN_AT}, true_clean, scalars=scalars,
                               noise_detection=zeroed_labels(scalars),
                               labels=[LabelView("corrected labels y_hat (Eq. 12)", labels)])

    # ------------------------------------------------------------------ training state
    def training_state(self) -> dict[str, Any]:
        return {"labels": self.labels.state_dict(), "label_epoch": self.label_epoch,
                "start_labels": self.start_labels}

    def load_training_state(self, state: dict[str, Any]) -> None:
        # A checkpoint of ncl before issue 23 also holds initialised_piece (now SelfRefining's,
        # which finds it from the checkpoint's epoch) and label_snapshot (no longer used).
        self.labels.load_state_dict(state["labels"])
        self.label_epoch = int(state.get("label_epoch", -1))
        self.start_labels = dict(state.get("start_labels", {}))

    # ------------------------------------------------------------------ training
    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Any]:
        """ACL on the batch with its SCC-corrected labels (spec 4.4.2).

        Returns:
            ``{"loss"}``, plus ``refine = (0, index, stored)`` for the per-step rules, written
            into the table after the step by :class:`~ncl.callbacks.refinement.MomentumRefinement`.
        """
        hp = self.hparams
        sims = forward_batch(self.net, batch).float()  # (B, B), train mode
        estimate = (None if hp.rule == "paper"
                    else average_matching_probability(sims, hp.tau, hp.form))  # (B,) p_hat
        y_hat, stored = self.loss_labels(batch["index"], estimate)
        terms = active_complementary_terms(sims, y_hat.to(sims.device), hp.tau, hp.weight, hp.q,
                                           hp.form)
        loss = terms.loss.mean()  # Eq. 9
        self.log_train({"loss": loss, "active": terms.active.mean(),
                        "complementary": terms.complementary.mean(), "label": y_hat.mean()},
                       batch_size=sims.shape[0])
        output: dict[str, Any] = {"loss": loss}
        if stored is not None:
            output["refine"] = (0, batch["index"], stored)
        return output


def _check_args(freeze_epochs: int, rule: str, tau: float, weight: float, q: float | None,
                momentum: float, threshold: float, estimate_batch_size: int | None) -> None:
    """Raise ConfigError (a ValueError) naming the offending ``model.*`` option (the choices
    are checked by their ``Literal`` types)."""
    if freeze_epochs < 0:
        raise ConfigError(f"model.freeze_epochs must be >= 0, got {freeze_epochs}")
    if rule == "paper" and freeze_epochs < 1:
        raise ConfigError("model.freeze_epochs must be >= 1 with model.rule=paper (Eq. 11 "
                          "resets the labels to the previous epoch's estimate at t = e_f + 1)")
    if not tau > 0:
        raise ConfigError(f"model.tau must be > 0, got {tau}")
    if not weight >= 0:
        raise ConfigError(f"model.weight (lambda) must be >= 0, got {weight}")
    if q is not None and not 0.0 <= q <= 1.0:
        raise ConfigError(f"model.q must lie in [0, 1] or be null (q = 1 - y_hat), got {q}")
    for name, value in (("momentum", momentum), ("threshold", threshold)):
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"model.{name} must lie in [0, 1], got {value}")
    if estimate_batch_size is not None and estimate_batch_size < 2:
        raise ConfigError(f"model.estimate_batch_size must be >= 2 or null, got "
                          f"{estimate_batch_size}")
