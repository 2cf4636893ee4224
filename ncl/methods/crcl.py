"""CRCL (NeurIPS 2023): the Active Complementary Loss and Self-refining Correspondence
Correction as an ncl method (spec 4.4; CRCL Sect. 2.2-2.3, Algorithm 1).

One network per run (SGR or SAF; "CRCL-SGRAF" is the test-time average of a separately
trained SGR and SAF, as RCL; spec 4.4.1, 4.4.5). Every training pair carries a soft
correspondence label ``y_i`` (initially 1) in a :class:`~ncl.training.state.PerSampleState`
owned by this module and saved with its training state. Training is split into
self-refining (SR) pieces (:class:`~ncl.training.pieces.PieceSchedule`); at the start of
every piece after the first the network is re-initialised and the optimiser's state cleared,
the labels carry over and the step learning-rate schedule restarts (:meth:`lr_factor`).

Per step: ``S`` (train mode, augmented batch when ``data.augment`` is on), the label of each
pair from the table (corrected by SCC, Eq. 10-12), then ACL (Eq. 6-9, mean over the batch).

Who does what, and when (the callbacks are attached by :meth:`CRCL.configure_callbacks`):

* :class:`~ncl.callbacks.pieces.SelfRefiningPieces`, ``on_train_epoch_start``: at a piece
  boundary calls :meth:`CRCL.start_piece` (fresh weights seeded by ``(seed, piece)`` loaded
  into the existing parameters, optimiser state cleared).
* :meth:`CRCL.training_step`: with ``rule="official"`` (or ``"prediction"``) corrects the
  batch's labels from the step's own estimate and returns ``label_update = (index, stored)``.
* :class:`~ncl.callbacks.labels.LabelCorrection`: ``on_train_batch_end`` writes the step's
  ``label_update`` into the table (all-gathered, identical on every rank); with
  ``rule="paper"`` ``on_train_epoch_end`` computes next epoch's labels from an eval-mode
  per-sample pass (:meth:`CRCL.prepare_labels`), ``on_train_epoch_start`` does it as a
  fallback when a checkpoint was written before it.
* :class:`~ncl.callbacks.labels.LabelDiagnostics`, ``on_train_epoch_end``: piece index, label
  flips and the label distribution (split by true clean/noisy when the DataModule knows it).

Paper versus code, defaults and their reasons: ``docs/methods/crcl.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor, nn

from ncl.callbacks.labels import LabelCorrection, LabelDiagnostics
from ncl.callbacks.pieces import SelfRefiningPieces
from ncl.data.contracts import retrieval_data
from ncl.data.samplers import epoch_seed
from ncl.division import CorrectionRule, correct_labels, filter_confident_noise
from ncl.errors import ConfigError, NclWarning
from ncl.losses import AclForm, active_complementary_terms, average_matching_probability
from ncl.methods.base import BackboneFactory, RetrievalMethod
from ncl.training.passes import PerSampleFn, per_sample_pass
from ncl.training.pieces import PieceLocation, PieceSchedule
from ncl.training.plans import chunk
from ncl.training.state import PerSampleState

Selection = Literal["all", "last_piece"]

#: Stream ids of :func:`~ncl.data.samplers.epoch_seed` used here (the samplers use 11-13,
#: the co-teaching plans 1-4): the weights of a re-initialised piece, the shuffle of the
#: paper rule's estimate pass.
REINIT_STREAM, ESTIMATE_STREAM = 21, 22
#: What ``val/rsum_selected`` holds for an epoch that ``selection`` excludes: below any rSum.
UNSELECTED_RSUM = -1.0
#: The official ``train.sh``: ``--schedules 5,5,5,30`` plus ``--warm_epoch 2`` per piece.
OFFICIAL_PIECES: tuple[int, ...] = (7, 7, 7, 32)

_FORMS = ("paper", "official")
_RULES = ("paper", "official", "prediction")
_SELECTIONS = ("all", "last_piece")


def crcl_optimizer(params: Any) -> torch.optim.Optimizer:
    """AdamW, lr 5e-4, weight decay 0.01: the official CRCL optimiser (spec 4.1, 4.4.1)."""
    return torch.optim.AdamW(params, lr=5e-4, weight_decay=0.01)


def estimate_batches(num_samples: int, batch_size: int, seed: int, epoch: int, rank: int = 0,
                     world: int = 1) -> list[np.ndarray]:
    """This rank's batches of the paper rule's estimate pass over the whole training set.

    ``p_hat`` is a softmax over the batch, so the batches matter: one shuffle of all samples
    per ``(seed, epoch)``, cut into ``batch_size`` batches (a last batch of one joins the one
    before: alone its ``p_hat`` would be 1), dealt whole to ranks (batch ``b`` to rank
    ``b % world``). The estimates therefore do not depend on the number of processes.
    """
    order = np.random.default_rng([seed, epoch, ESTIMATE_STREAM]).permutation(num_samples)
    batches = chunk(order, batch_size, min_size=1)
    if len(batches) > 1 and len(batches[-1]) < 2:
        last = batches.pop()
        batches[-1] = np.concatenate([batches[-1], last])
    return batches[rank::world]


def matching_estimate(tau: float, form: AclForm) -> PerSampleFn:
    """The per-sample function of the estimate pass: ``p_hat_i`` of Eq. 10 in the batch."""
    def fn(net: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        extra = {"image_lengths": batch["image_lengths"]} if "image_lengths" in batch else {}
        sims = net(batch["images"], batch["tokens"], batch["lengths"], **extra)  # (B, B)
        return average_matching_probability(sims.float(), tau, form)  # (B,)
    return fn


class CRCL(RetrievalMethod):
    """CRCL LightningModule (one network, automatic optimisation).

    Args:
        vocab_size, backbone, eval_shard_size: as :class:`~ncl.methods.base.RetrievalMethod`.
            The backbone needs ``add_mask_token: true`` when ``data.augment`` masks tokens.
        optimizer: default AdamW, lr 5e-4, weight decay 0.01 (the official code).
        lr_update: ``lr0 * 0.1 ** (e // lr_update)`` with ``e`` the epoch *within the piece*
            (15, official).
        grad_clip: max gradient norm (2.0).
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
        diagnostics: log the label diagnostics every epoch.
        select_warmup: whether the warm-up epochs (the ``freeze_epochs`` frozen epochs of
            piece 0, trained with every label still 1, before any correction) may become
            the best checkpoint. ``false`` (default) logs their validation under
            ``val_warmup/*``: the official code never selects them (it selects in the last
            piece), and with ``selection: all`` they would otherwise compete. The frozen
            epochs of later pieces are not warm-up: the official code selects among them.
    """

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = crcl_optimizer, lr_update: int = 15,
                 grad_clip: float = 2.0, eval_shard_size: int = 1000,
                 pieces: Sequence[int] = OFFICIAL_PIECES, freeze_epochs: int = 2,
                 tau: float = 0.05, weight: float = 5.0, q: float | None = None,
                 form: AclForm = "official", rule: CorrectionRule = "official",
                 momentum: float = 0.8, threshold: float = 0.1, selection: Selection = "all",
                 estimate_batch_size: int | None = None, diagnostics: bool = True,
                 select_warmup: bool = False) -> None:
        _check_args(pieces, freeze_epochs, tau, weight, q, form, rule, momentum, threshold,
                    selection, estimate_batch_size)
        super().__init__(vocab_size=vocab_size, backbone=backbone, optimizer=optimizer,
                         lr_update=lr_update, grad_clip=grad_clip,
                         eval_shard_size=eval_shard_size, n_networks=1)
        self.save_hyperparameters(ignore=["backbone", "optimizer"])
        self.schedule = PieceSchedule(tuple(int(n) for n in pieces))
        # Training state (checkpointed, identical on every rank):
        self.labels = PerSampleState(1, fill=1.0)  # y_i, initially 1 (Sect. 2.3)
        self.label_epoch = -1  # paper rule: the epoch whose labels the table holds
        self.initialised_piece = 0  # the last piece whose re-initialisation was applied
        self.label_snapshot: Tensor | None = None  # diagnostics: last epoch's y_hat

    # ------------------------------------------------------------------ Lightning wiring
    def configure_callbacks(self) -> list[L.Callback]:
        """Piece re-initialisation, label diagnostics, label correction, in this order: the
        diagnostics of an epoch read the labels it trained with, before the paper rule
        replaces them with the next epoch's at the same hook."""
        callbacks: list[L.Callback] = [SelfRefiningPieces()]
        if self.hparams.diagnostics:
            callbacks.append(LabelDiagnostics())
        callbacks.append(LabelCorrection())
        return callbacks

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
        self._check_selection_monitor()

    def _check_selection_monitor(self) -> None:
        if self.hparams.selection != "last_piece":
            return
        monitors = {getattr(cb, "monitor", None) for cb in self.trainer.checkpoint_callbacks}
        if "val/rsum_selected" not in monitors:
            import warnings

            warnings.warn("model.selection=last_piece acts through val/rsum_selected, but no "
                          "ModelCheckpoint monitors it (the CRCL configs do)", NclWarning,
                          stacklevel=2)

    # ------------------------------------------------------------------ pieces and schedule
    def location(self, epoch: int | None = None) -> PieceLocation:
        """``(piece, epoch_in_piece)`` of ``epoch`` (default: the current epoch)."""
        return self.schedule.locate(self.current_epoch if epoch is None else epoch)

    def lr_factor(self, epoch: int) -> float:
        """``0.1 ** (e // lr_update)`` with ``e`` the epoch within its piece: the step schedule
        restarts at every piece (spec 4.1, 4.4.3). Epochs past the schedule (``LambdaLR``
        asks for the one after the last) continue the last piece."""
        start = max(s for s in self.schedule.starts if s <= epoch)
        return 0.1 ** ((epoch - start) // self.hparams.lr_update)

    def start_piece(self, piece: int, optimizers: Sequence[torch.optim.Optimizer]) -> bool:
        """Re-initialise for SR piece ``piece`` (Algorithm 1; the official code builds a new
        model and optimiser): fresh weights, optimiser state (Adam moments and step) cleared.

        The fresh weights come from the backbone factory under a private random stream seeded
        by ``(seed, piece)`` and are copied into the existing parameters, so the optimiser (and
        DDP) keep pointing at them and every rank, and a resumed run, gets the same weights.
        Idempotent: a piece already started (``initialised_piece``, checkpointed) is skipped.

        Returns:
            Whether it re-initialised.
        """
        if piece <= self.initialised_piece:
            return False
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(epoch_seed(self.training_seed, piece, REINIT_STREAM))
            fresh = [self.backbone_factory(self.hparams.vocab_size) for _ in self.nets]
        with torch.no_grad():
            for net, new in zip(self.nets, fresh):
                net.load_state_dict(new.state_dict())
        for optimizer in optimizers:
            optimizer.state.clear()
        self.initialised_piece = piece
        return True

    def is_warmup_epoch(self, epoch: int) -> bool:
        """The frozen epochs of piece 0 (labels all 1: plain ACL on the noisy pairs), kept
        out of model selection unless ``select_warmup`` (docs/methods/crcl.md)."""
        if not 0 <= epoch < self.schedule.total_epochs:
            return False
        piece, within = self.location(epoch)
        return piece == 0 and within < self.hparams.freeze_epochs

    def selectable(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` may be selected as the best checkpoint (``selection``)."""
        if self.hparams.selection == "all":
            return True
        last = min(self.trainer.max_epochs, self.schedule.total_epochs) - 1
        return self.location(epoch).piece == self.location(last).piece

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        """Lightning's ``log``; ``val/rsum`` is mirrored as ``val/rsum_selected`` (the value,
        or -1 for an epoch that ``selection`` excludes), which the configs' best checkpoint
        monitors."""
        super().log(name, value, *args, **kwargs)
        if name == "val/rsum":
            kwargs["prog_bar"] = False
            selected = value if self.selectable(self.current_epoch) else UNSELECTED_RSUM
            super().log("val/rsum_selected", selected, *args, **kwargs)

    # ------------------------------------------------------------------ labels
    def loss_labels(self, index: Tensor, estimate: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """The labels ``y_hat`` ACL uses for a batch, and what goes back into the table.

        Args:
            index: ``(B,)`` training indices of the batch.
            estimate: ``(B,)`` the step's ``p_hat`` (``official``/``prediction`` rules).

        Returns:
            ``(y_hat, stored)``: ``stored`` is ``None`` for the paper rule (its table moves
            once per epoch, :meth:`prepare_labels`).
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

    def apply_label_update(self, index: Tensor, stored: Tensor) -> None:
        """Write a step's corrected labels (all ranks' rows, in rank order)."""
        self.labels.scatter(0, index, stored.float())

    def needs_estimate(self, epoch: int) -> bool:
        """Whether epoch ``epoch``'s labels (paper rule) come from an estimate pass: inside
        the schedule, past the frozen epochs of its piece, and not made yet."""
        hp = self.hparams
        if hp.rule != "paper" or not 0 <= epoch < self.schedule.total_epochs:
            return False
        return self.location(epoch).epoch_in_piece >= hp.freeze_epochs and self.label_epoch < epoch

    def prepare_labels(self, epoch: int) -> bool:
        """Paper rule (Eq. 11-12): make the table hold epoch ``epoch``'s labels, from the
        estimates ``p_hat^(j, t-1)`` of the current weights (those at the end of epoch
        ``epoch - 1``) over the whole training set in eval mode.

        Called by :class:`~ncl.callbacks.labels.LabelCorrection` at the end of epoch
        ``epoch - 1`` (so the checkpoint of that epoch holds them) and, as a fallback, at the
        start of ``epoch``; both see the same weights, so the result is the same.

        Returns:
            Whether the labels were computed now.
        """
        if not self.needs_estimate(epoch):
            return False
        hp = self.hparams
        piece, within = self.location(epoch)
        estimate = self.matching_estimates(epoch)
        table = self.labels.values[0]
        out = correct_labels(table, estimate.to(table.dtype), piece, within, rule="paper",
                             freeze_epochs=hp.freeze_epochs, momentum=hp.momentum,
                             threshold=hp.threshold)
        self.labels.values[0] = out.stored
        self.label_epoch = epoch
        return True

    def matching_estimates(self, epoch: int) -> Tensor:
        """``(N,)`` ``p_hat`` of every training pair, eval mode, identical on every rank."""
        trainer, hp = self.trainer, self.hparams
        dm = retrieval_data(trainer, "CRCL")
        pairs = dm.train_pairs()
        batches = estimate_batches(len(pairs), hp.estimate_batch_size or dm.batch_size,
                                   self.training_seed, epoch, trainer.global_rank,
                                   trainer.world_size)
        values = per_sample_pass([self.net], pairs, [batches], matching_estimate(hp.tau, hp.form),
                                 self.device, getattr(dm, "num_workers", 0))
        return values[0].float().cpu().clamp(0.0, 1.0)

    def corrected_labels(self) -> Tensor:
        """``(N,)`` the table as ACL would read it now (Eq. 12's filter applied)."""
        return filter_confident_noise(self.labels.values[0].float(), self.hparams.threshold)

    # ------------------------------------------------------------------ training state
    def training_state(self) -> dict[str, Any]:
        return {"labels": self.labels.state_dict(), "label_epoch": self.label_epoch,
                "initialised_piece": self.initialised_piece,
                "label_snapshot": self.label_snapshot}

    def load_training_state(self, state: dict[str, Any]) -> None:
        self.labels.load_state_dict(state["labels"])
        self.label_epoch = int(state.get("label_epoch", -1))
        self.initialised_piece = int(state.get("initialised_piece", 0))
        self.label_snapshot = state.get("label_snapshot")

    # ------------------------------------------------------------------ training
    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Any]:
        """ACL on the batch with its SCC-corrected labels (spec 4.4.2).

        Returns:
            ``{"loss"}``, plus ``label_update = (index, stored)`` for the per-step rules,
            applied after the step by :class:`~ncl.callbacks.labels.LabelCorrection`.
        """
        hp = self.hparams
        sims = self.batch_similarity(batch).float()  # (B, B), train mode
        estimate = None if hp.rule == "paper" else average_matching_probability(sims, hp.tau, hp.form)
        y_hat, stored = self.loss_labels(batch["index"], estimate)
        terms = active_complementary_terms(sims, y_hat.to(sims.device), hp.tau, hp.weight, hp.q,
                                           hp.form)
        loss = terms.loss.mean()  # Eq. 9
        self.log_train({"loss": loss, "active": terms.active.mean(),
                        "complementary": terms.complementary.mean(), "label": y_hat.mean()},
                       batch_size=sims.shape[0])
        output: dict[str, Any] = {"loss": loss}
        if stored is not None:
            output["label_update"] = (batch["index"], stored)
        return output


def _check_args(pieces: Sequence[int], freeze_epochs: int, tau: float, weight: float,
                q: float | None, form: str, rule: str, momentum: float, threshold: float,
                selection: str, estimate_batch_size: int | None) -> None:
    """Raise ConfigError (a ValueError) naming the offending ``model.*`` option."""
    for name, value, allowed in (("form", form, _FORMS), ("rule", rule, _RULES),
                                 ("selection", selection, _SELECTIONS)):
        if value not in allowed:
            raise ConfigError(f"model.{name} must be one of {allowed}, got {value!r}")
    lengths = list(pieces) if isinstance(pieces, Sequence) and not isinstance(pieces, str) else None
    if not lengths or any(isinstance(n, bool) or int(n) != n or n < 1 for n in lengths):
        raise ConfigError(f"model.pieces must be a non-empty list of epochs per piece (each "
                          f">= 1), got {pieces!r}")
    if int(freeze_epochs) != freeze_epochs or freeze_epochs < 0:
        raise ConfigError(f"model.freeze_epochs must be an integer >= 0, got {freeze_epochs}")
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
        raise ConfigError(f"model.estimate_batch_size must be >= 2 or null, got {estimate_batch_size}")
