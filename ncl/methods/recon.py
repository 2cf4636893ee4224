"""ReCon (CVPR 2025): relation consistency learning with a three-way division into clean,
locally associated and noisy pairs, as an ncl method. Paper-derived, no reference code: the
authors published a data loader, an options file and a similarity module, never the training
loop (spec 4.5, 3.7); every choice the paper leaves open is an option, listed with its reason in
``docs/methods/recon.md``.

One network (SGR or SAF; "ReCon-SGRAF" is the test-time average of a separately trained SGR and
SAF). Epochs ``0 .. warmup_epochs - 1`` (``eta``) train the hinge triplet loss (Eq. 12). Every
later epoch trains on a division (:class:`~ncl.division.three_way.ThreeWayDivision`) made
from an eval-mode per-sample pass over the training set (:func:`division_values`: ``l^CM``,
``L_IM``, ``p``): GMM on ``l^CM`` (Eq. 6), the split into ``D_c``/``D_l``/``D_n`` (Eq. 7-8),
penalties (Eq. 9), momentum pseudo-labels (Eq. 10) and the final labels (Eq. 11). Each batch
of the ordinary shuffled loader mixes the three subsets; every pair gets its subset's loss
(Eq. 13-15, :func:`~ncl.losses.recon.relation_consistency_objective`).

Who does what, and when (callbacks attached by :meth:`ReCon.configure_callbacks`):

* :class:`~ncl.callbacks.recon_division.ThreeWayDivide`: ``on_train_epoch_end`` makes the
  next epoch's division (so the epoch's checkpoint holds it), ``on_train_epoch_start`` makes
  it if missing (a run whose ``max_epochs`` was raised on resume); both call
  :meth:`ReCon.prepare_division`, which is idempotent.
* :class:`~ncl.callbacks.recon_division.ThreeWayDiagnostics`, ``on_train_epoch_start``: sizes
  of the subsets and, with the ground truth, the truly noisy pairs in each.

State (checkpointed through :meth:`training_state`, identical on every rank): the latest
division and the pseudo-label table ``y~`` (a :class:`~ncl.training.state.PerSampleState`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor, nn

from ncl.callbacks.recon_division import ThreeWayDiagnostics, ThreeWayDivide
from ncl.data.contracts import retrieval_data
from ncl.division import gmm_clean_probability
from ncl.division.three_way import (
    PseudoLabelInit,
    PseudoLabelScope,
    ThreeWayConfig,
    ThreeWayDivision,
    divide_three_way,
    intra_modal_discrepancy,
    penalty_factor,
)
from ncl.errors import ConfigError
from ncl.losses import Negatives, triplet_loss
from ncl.losses.recon import (
    SUBSET_CLEAN,
    SUBSET_LOCAL,
    SUBSET_NOISY,
    IntraModalTerms,
    RelationKL,
    RowReduction,
    cross_modal_relation_loss,
    intra_modal_relation_loss,
    relation_consistency_objective,
)
from ncl.methods.base import BackboneFactory, RetrievalMethod, default_optimizer
from ncl.training.distributed import broadcast_
from ncl.training.passes import PerSampleFn, per_sample_pass
from ncl.training.plans import chunk
from ncl.training.state import PerSampleState

Score = Literal["logits", "sigmoid"]
RelationFeatures = Literal["embeddings", "inputs"]
PenaltySource = Literal["division", "step"]
LrSchedule = Literal["after_warmup", "global"]
Reduction = Literal["mean", "sum"]

#: Stream id of the division pass's shuffle (:func:`numpy.random.default_rng` of
#: ``(seed, epoch, stream)``); new here: plans use 1-4, samplers/augmentation 11-14, CRCL 21-22.
DIVISION_STREAM = 31


@dataclass(frozen=True)
class RelationOptions:
    """How a batch is scored and its relations compared (paper-derived, no reference code,
    except ``score``, whose default is the published similarity module's).

    Attributes:
        score: the similarity ``g``: SGRAF's raw ``logits`` (the published ReCon module) or
            its ``sigmoid``.
        features: what the relation matrices ``C_VV``, ``C_LL`` are computed from: the
            fine-grained ``embeddings`` (region and word embeddings in the joint space) or
            the ``inputs`` (region features and word vectors before the encoders). The
            cross-modal correspondence always uses the embeddings (a common space).
        temperature, kl, rows, detach_proxy: see
            :func:`~ncl.losses.recon.intra_modal_relation_loss`.
    """

    score: Score = "logits"
    features: RelationFeatures = "embeddings"
    temperature: float = 1.0
    kl: RelationKL = "symmetric"
    rows: RowReduction = "mean"
    detach_proxy: bool = False


def relation_forward(net: nn.Module, batch: dict[str, Tensor], options: RelationOptions,
                     relations: bool = True) -> tuple[Tensor, IntraModalTerms | None]:
    """Encode a batch once; return its ``(B, B)`` scores and (optionally) ``L_IM`` per pair."""
    extra = {"image_lengths": batch["image_lengths"]} if "image_lengths" in batch else {}
    img = net.encode_images(batch["images"], **extra)  # (B, R, E)
    cap = net.encode_captions(batch["tokens"], batch["lengths"])  # (B, L, E)
    if img.dim() != 3 or cap.dim() != 3:
        raise ConfigError("ReCon needs fine-grained region and word embeddings (B, R, E) and "
                          "(B, L, E); model.backbone pools them (use SGR or SAF)")
    score = net.similarity_logits if options.score == "logits" else net.similarity
    sims = score(img, cap, batch["lengths"])  # (B, B)
    if not relations:
        return sims, None
    region_features = word_features = None
    if options.features == "inputs":
        region_features = batch["images"]  # (B, R, D)
        word_features = net.txt_enc.embed(batch["tokens"])  # (B, L, word_dim)
    terms = intra_modal_relation_loss(
        img.float(), cap.float(), batch["lengths"], region_lengths=batch.get("image_lengths"),
        region_features=region_features, word_features=word_features,
        temperature=options.temperature, kl=options.kl, rows=options.rows,
        detach_proxy=options.detach_proxy)
    return sims, terms


def division_values(options: RelationOptions, tau: float) -> PerSampleFn:
    """The per-sample function of the division pass: ``(B, 3)`` rows ``[l^CM, L_IM, p]``
    (``l^CM`` with ``y = 1``, Sect. 3.3; ``p`` of Eq. 10)."""
    def fn(net: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        sims, terms = relation_forward(net, batch, options)
        cm = cross_modal_relation_loss(sims.float(), None, tau)
        return torch.stack([cm.loss, terms.loss.to(cm.loss), cm.prediction], dim=1)
    return fn


def division_batches(num_samples: int, batch_size: int, seed: int, epoch: int, rank: int = 0,
                     world: int = 1) -> list[np.ndarray]:
    """This rank's batches of the division pass: one shuffle per ``(seed, epoch)`` cut into
    ``batch_size`` batches (``l^CM`` and ``p`` are batch softmaxes, so the batches matter; a
    last batch of one joins the previous one), dealt whole to ranks (batch ``b`` to rank
    ``b % world``), so the values do not depend on the number of processes."""
    order = np.random.default_rng([seed, epoch, DIVISION_STREAM]).permutation(num_samples)
    batches = chunk(order, batch_size, min_size=1)
    if len(batches) > 1 and len(batches[-1]) < 2:
        last = batches.pop()
        batches[-1] = np.concatenate([batches[-1], last])
    return batches[rank::world]


class ReCon(RetrievalMethod):
    """ReCon LightningModule (one network, automatic optimisation).

    Options marked [PD] are paper-derived, no reference code: the paper leaves the choice open
    and the default is the reading most consistent with it and the published options
    (``docs/methods/recon.md``, "Paper-derived choices", has the reasons and alternatives).

    Args:
        vocab_size, backbone, eval_shard_size, grad_clip: as
            :class:`~ncl.methods.base.RetrievalMethod`; the backbone must give fine-grained
            embeddings (SGR/SAF) and, for ``score="logits"``, ``similarity_logits``.
        optimizer: [PD] default Adam, lr 2e-4 (paper Sect. 4.2: "consistent with NCR"; the
            published options file says lr 5e-4 with CRCL's scaffold).
        lr_update: the learning rate is multiplied by 0.1 every ``lr_update`` epochs (NCR: 30
            on F30K and CC152K, 10 on COCO).
        warmup_epochs: ``eta`` (5), epochs of the triplet warm-up (Eq. 12).
        margin: ``gamma`` (0.2) of the warm-up triplet.
        warmup_negatives: [PD] Eq. 12's aggregation over in-batch negatives, ``sum`` as printed
            (``hardest``: VSE++; ``mean``: NCR's warm-up).
        tau: temperature of ``L_CM`` (paper 0.1; options file 0.05).
        xi: balance factor ``xi`` (5) of Eq. 13-14.
        omega1, omega2: division thresholds (0.5, 0.5).
        alpha: scale of the penalisation factor (0.1, Eq. 9).
        beta: pseudo-label momentum (0.6, Eq. 10).
        score: the similarity ``g``: raw SGRAF ``logits`` (the published ReCon module) or
            ``sigmoid``.
        relation_features, relation_temperature, relation_kl, relation_rows, detach_proxy:
            [PD] :class:`RelationOptions` (``embeddings``, 1.0, ``symmetric``, ``mean``, false).
        pseudo_label_init: [PD] pseudo-labels before the first update (``prediction``).
        pseudo_label_scope: [PD] pairs Eq. 10 moves: ``noisy`` (as printed) or ``all``.
        xi_on_noisy: [PD] weigh ``D_n``'s ``L_CM`` by ``xi`` too (Eq. 15 does not: false).
        penalty_source: [PD] ``lambda`` from the division's ``y^IM`` (``division``) or from
            the step's own, detached (``step``).
        division_interval: [PD] a new division every this many epochs after the warm-up (1).
        division_batch_size: [PD] batch size of the division pass (``None``: the training one).
        gmm_seed: ``random_state`` of the GMM (``None``: numpy's global RNG).
        lr_schedule: [PD] ``after_warmup`` (NCR: warm-up epochs at lr0, then the step
            schedule counts the epochs after it) or ``global`` (counts from epoch 0).
        reduction: [PD] ``mean`` (the expected risks of Eq. 2 and 5) or ``sum`` over the batch.
        select_warmup: [PD] whether a warm-up epoch may become the best checkpoint (true: the
            paper selects "the checkpoints that achieved optimal performance on the validation
            set"; false logs warm-up validation under ``val_warmup/*``, as NCR's code selects).
        diagnostics: log the division every epoch.
    """

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = default_optimizer, lr_update: int = 30,
                 grad_clip: float = 2.0, eval_shard_size: int = 1000, warmup_epochs: int = 5,
                 margin: float = 0.2, warmup_negatives: Negatives = "sum", tau: float = 0.1,
                 xi: float = 5.0, omega1: float = 0.5, omega2: float = 0.5, alpha: float = 0.1,
                 beta: float = 0.6, score: Score = "logits",
                 relation_features: RelationFeatures = "embeddings",
                 relation_temperature: float = 1.0, relation_kl: RelationKL = "symmetric",
                 relation_rows: RowReduction = "mean", detach_proxy: bool = False,
                 pseudo_label_init: PseudoLabelInit = "prediction",
                 pseudo_label_scope: PseudoLabelScope = "noisy",
                 xi_on_noisy: bool = False, penalty_source: PenaltySource = "division",
                 division_interval: int = 1, division_batch_size: int | None = None,
                 gmm_seed: int | None = 0, lr_schedule: LrSchedule = "after_warmup",
                 reduction: Reduction = "mean", select_warmup: bool = True,
                 diagnostics: bool = True) -> None:
        _check_args(locals())
        super().__init__(vocab_size=vocab_size, backbone=backbone, optimizer=optimizer,
                         lr_update=lr_update, grad_clip=grad_clip,
                         eval_shard_size=eval_shard_size, n_networks=1)
        self.save_hyperparameters(ignore=["backbone", "optimizer"])
        self.relation = RelationOptions(score, relation_features, relation_temperature,
                                        relation_kl, relation_rows, detach_proxy)
        self.division_config = ThreeWayConfig(omega1, omega2, alpha, beta, pseudo_label_init,
                                              pseudo_label_scope)
        _check_backbone(self.net, self.relation)
        # Training state (checkpointed, identical on every rank):
        self.division: ThreeWayDivision | None = None
        self.pseudo_labels = PerSampleState(1, fill=1.0)  # y~ (Eq. 10)

    # ------------------------------------------------------------------ Lightning wiring
    def configure_callbacks(self) -> list[L.Callback]:
        """The division, then its diagnostics: at an epoch start the division (if it was
        missing) is made before it is logged."""
        callbacks: list[L.Callback] = [ThreeWayDivide()]
        if self.hparams.diagnostics:
            callbacks.append(ThreeWayDiagnostics())
        return callbacks

    def setup(self, stage: str) -> None:
        """For ``fit``: the pseudo-label table (ones, until the first division or a checkpoint
        restores it)."""
        super().setup(stage)
        if stage != "fit":
            return
        n = len(retrieval_data(self.trainer, "ReCon").train_pairs())
        if not self.pseudo_labels.ready or self.pseudo_labels.num_samples != n:
            self.pseudo_labels.reset(n)

    def is_warmup_epoch(self, epoch: int) -> bool:
        """Epochs ``0 .. eta - 1`` (the base class's model-selection hook, ``select_warmup``)."""
        return epoch < self.hparams.warmup_epochs

    def lr_factor(self, epoch: int) -> float:
        """``0.1 ** (e // lr_update)``: ``e`` counts the epochs after the warm-up (NCR) or all
        of them (``lr_schedule="global"``)."""
        hp = self.hparams
        counted = epoch if hp.lr_schedule == "global" else max(epoch - hp.warmup_epochs, 0)
        return 0.1 ** (counted // hp.lr_update)

    # ------------------------------------------------------------------ division
    def needs_division(self, epoch: int) -> bool:
        """Whether ``epoch`` needs a division that ``self.division`` does not hold yet: after
        the warm-up, every ``division_interval`` epochs (and whenever none exists)."""
        hp = self.hparams
        if epoch < hp.warmup_epochs:
            return False
        if self.division is None:
            return True
        due = (epoch - hp.warmup_epochs) % hp.division_interval == 0
        return due and self.division.epoch < epoch

    def prepare_division(self, epoch: int) -> bool:
        """Make ``self.division`` epoch ``epoch``'s division if it needs one (idempotent;
        called on every rank at the same hook): the pass (:meth:`division_pass`), the GMM on
        ``l^CM`` (Eq. 6; rank 0's fit broadcast), then Eq. 7-11
        (:func:`~ncl.division.three_way.divide_three_way`) with the previous pseudo-labels.

        Returns:
            Whether a division was made now.
        """
        if not self.needs_division(epoch):
            return False
        cm_loss, im_loss, prediction = self.division_pass(epoch).unbind(dim=1)  # (N,) each
        clean_prob = gmm_clean_probability(cm_loss, seed=self.hparams.gmm_seed)
        broadcast_(clean_prob)  # rank 0's fit everywhere, whatever BLAS did
        previous = None if self.division is None else self.pseudo_labels.values[0]
        self.division, pseudo = divide_three_way(epoch, cm_loss, im_loss, prediction, clean_prob,
                                                 previous, self.division_config)
        self.pseudo_labels.values[0] = pseudo
        return True

    def division_pass(self, epoch: int) -> Tensor:
        """``(N, 3)`` rows ``[l^CM, L_IM, p]`` of every training pair (eval mode, no
        augmentation, :func:`division_batches`), on the CPU, identical on every rank.
        Paper-derived, no reference code: the paper does not say how the per-sample values
        are computed; this is NCR's co-divide pass ("settings consistent with NCR")."""
        hp, trainer = self.hparams, self.trainer
        dm = retrieval_data(trainer, "ReCon")
        pairs = dm.train_pairs()
        batches = division_batches(len(pairs), hp.division_batch_size or dm.batch_size,
                                   self.training_seed, epoch, trainer.global_rank,
                                   trainer.world_size)
        fn = division_values(self.relation, hp.tau)
        values = per_sample_pass([self.net], pairs, [batches], fn, self.device,
                                 getattr(dm, "num_workers", 0))
        return values[0].float().cpu()

    def training_state(self) -> dict[str, Any]:
        return {"division": None if self.division is None else self.division.state(),
                "pseudo_labels": self.pseudo_labels.state_dict()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        saved = state.get("division")
        self.division = None if saved is None else ThreeWayDivision(**saved)
        if state.get("pseudo_labels") is not None:
            self.pseudo_labels.load_state_dict(state["pseudo_labels"])

    # ------------------------------------------------------------------ training
    def reduce(self, per_pair: Tensor) -> Tensor:
        return per_pair.mean() if self.hparams.reduction == "mean" else per_pair.sum()

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        if self.current_epoch < self.hparams.warmup_epochs:
            return self.warmup_step(batch)
        return self.relation_step(batch)

    def warmup_step(self, batch: dict[str, Tensor]) -> Tensor:
        """The triplet warm-up (Eq. 12) on the batch's scores."""
        hp = self.hparams
        sims, _ = relation_forward(self.net, batch, self.relation, relations=False)  # (B, B)
        loss = self.reduce(triplet_loss(sims.float(), hp.margin, negatives=hp.warmup_negatives))
        self.log_train({"loss": loss, "warmup_triplet": loss}, batch_size=sims.shape[0])
        return loss

    def relation_step(self, batch: dict[str, Tensor]) -> Tensor:
        """Eq. 13-15 on a batch mixing the division's three subsets (paper-derived, no
        reference code: one loader with per-pair labels, as Eq. 2's "contributions ...
        adjusted according to their corresponding supervisions y" reads)."""
        hp = self.hparams
        self.prepare_division(self.current_epoch)  # no-op: the callback made it
        division = self.division
        sims, im = relation_forward(self.net, batch, self.relation)  # (B, B), L_IM (B,)
        cm = cross_modal_relation_loss(sims.float(), None, hp.tau)
        index = batch["index"].cpu()
        subset = division.subset[index].to(sims.device)
        if hp.penalty_source == "division":
            penalty = division.penalty[index]
        else:
            penalty = penalty_factor(intra_modal_discrepancy(im.loss.detach().cpu()), hp.alpha)
        per_pair = relation_consistency_objective(
            cm.loss, im.loss, subset, division.labels[index].to(sims.device),
            penalty.to(sims.device), hp.xi, hp.xi_on_noisy)
        loss = self.reduce(per_pair)
        size = float(subset.numel())
        self.log_train({"loss": loss, "cross_modal": cm.loss.mean(), "intra_modal": im.loss.mean(),
                        "clean_fraction": float((subset == SUBSET_CLEAN).sum()) / size,
                        "local_fraction": float((subset == SUBSET_LOCAL).sum()) / size,
                        "noisy_fraction": float((subset == SUBSET_NOISY).sum()) / size},
                       batch_size=subset.numel())
        return loss


def _check_backbone(net: nn.Module, relation: RelationOptions) -> None:
    """One ConfigError when the backbone lacks what the chosen options need."""
    if relation.score == "logits" and not callable(getattr(net, "similarity_logits", None)):
        raise ConfigError(f"model.score=logits needs a backbone with similarity_logits (SGR/SAF); "
                          f"{type(net).__name__} has none: set model.score=sigmoid")
    embed = getattr(getattr(net, "txt_enc", None), "embed", None)
    if relation.features == "inputs" and not isinstance(embed, nn.Embedding):
        raise ConfigError(f"model.relation_features=inputs reads the word vectors of "
                          f"txt_enc.embed, which {type(net).__name__} lacks: use embeddings")


_CHOICES = {"warmup_negatives": ("hardest", "sum", "mean"), "score": ("logits", "sigmoid"),
            "relation_features": ("embeddings", "inputs"), "relation_kl": ("symmetric", "forward"),
            "relation_rows": ("mean", "sum"),
            "pseudo_label_init": ("prediction", "one", "clean_probability"),
            "pseudo_label_scope": ("noisy", "all"), "penalty_source": ("division", "step"),
            "lr_schedule": ("after_warmup", "global"), "reduction": ("mean", "sum")}


def _check_args(args: dict[str, Any]) -> None:
    """Raise ConfigError (a ValueError) naming the offending ``model.*`` option."""
    for name, allowed in _CHOICES.items():
        if args[name] not in allowed:
            raise ConfigError(f"model.{name} must be one of {allowed}, got {args[name]!r}")
    for name, least in (("warmup_epochs", 0), ("division_interval", 1)):
        if int(args[name]) != args[name] or args[name] < least:
            raise ConfigError(f"model.{name} must be an integer >= {least}, got {args[name]}")
    for name in ("margin", "tau", "alpha", "relation_temperature"):
        if not args[name] > 0:
            raise ConfigError(f"model.{name} must be > 0, got {args[name]}")
    if not args["xi"] >= 0:
        raise ConfigError(f"model.xi must be >= 0, got {args['xi']}")
    for name in ("omega1", "omega2", "beta"):
        if not 0.0 <= args[name] <= 1.0:
            raise ConfigError(f"model.{name} must lie in [0, 1], got {args[name]}")
    size = args["division_batch_size"]
    if size is not None and size < 2:
        raise ConfigError(f"model.division_batch_size must be >= 2 or null, got {size}")
