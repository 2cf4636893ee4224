"""GSC: geometrical structure consistency (Zhao et al., CVPR 2024; docs/methods/gsc.md).

One SGR or SAF network. Every training step (:func:`~ncl.losses.gsc.gsc_objective`): the
bidirectional InfoNCE (temperature 0.07) on SGRAF's sigmoid scores, weighted per pair by its
target ``y``, plus ``gamma`` times an InfoNCE (temperature 1.0) of the product of the
batch's image-image and caption-caption structure matrices, which SGRAF's own similarity head
scores (:mod:`ncl.models.gsc_structure`); each pair's structure score (the cosine of its two
structure rows) and its InfoNCE diagonal probability are stored in per-sample tables. At the
end of every epoch after the warm-up, :func:`~ncl.division.gsc.update_targets` divides the
structure scores with a GMM and moves the targets (EMA, ``beta`` 0.7, the minimum of the
two). Warm-up epochs (none in the official scripts) train the unweighted InfoNCE of the
image-to-text direction (or the hardest-negative triplet) and store nothing.

The split runs in this module's ``on_train_epoch_end``, not in a callback: it needs no pass
over the data (the training steps stored its inputs), and Lightning calls the module's hook
before the checkpoint callbacks, so the checkpoint of epoch ``e`` holds ``e + 1``'s targets.

State (``training_state``, identical on every rank: the stored values are all-gathered by
:meth:`~ncl.training.state.PerSampleState.scatter` every step, the split is computed from them
and rank 0's result broadcast): the stored scores/probabilities, the three target tables, the
posterior of the last split and the epoch the targets are for.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor

from ncl.callbacks.protocols import EpochDiagnostics, LabelView
from ncl.data.contracts import retrieval_data
from ncl.division.detection import detection_scalars
from ncl.division.gsc import update_targets
from ncl.errors import ConfigError
from ncl.evaluation.ranking import GMM, Ranking
from ncl.losses.contrastive import info_nce
from ncl.losses.gsc import gsc_objective
from ncl.losses.triplet import triplet_loss
from ncl.methods.base import BackboneFactory, RetrievalMethod, default_optimizer
from ncl.methods.declaration import TINY_RUN_ARGS, MethodSpec, RegressionCase, Row
from ncl.methods.gsc_ranking import STRUCTURE
from ncl.methods.reports import division_report
from ncl.methods.skeleton import check_ranges
from ncl.models.contracts import encode_images
from ncl.models.gsc_structure import caption_structure, image_structure
from ncl.training.distributed import broadcast_
from ncl.training.state import PerSampleState

#: Rows of the stored table (written by the training steps).
SCORE, PRED = range(2)
#: Rows of the target table (written by the split).
TOPO_TARGET, PRED_TARGET, TARGET, POSTERIOR = range(4)
WarmupLoss = Literal["infonce", "triplet"]


class GSC(RetrievalMethod):
    """GSC LightningModule (one network, automatic optimisation).

    Args:
        vocab_size, backbone: as :class:`~ncl.methods.base.RetrievalMethod`; the backbone must
            be SGRAF (its similarity encoder scores the structure). Adam, lr 2e-4.
        lr_update: epochs between two decays of the learning rate (15; COCO 20).
        lr_decay: the decay factor (official 0.2, not the skeleton's 0.1).
        warmup_epochs: warm-up epochs (0: the official scripts run none).
        warmup_loss: ``infonce`` (official: image-to-text only, temperature ``temperature``)
            or ``triplet`` (hardest negative, summed; the official ``Triplet`` option crashes).
        margin: the warm-up triplet's margin (0.2).
        temperature: of the image-caption InfoNCE (official ``temp`` 0.07).
        structure_temperature: of the structure InfoNCE (1.0 in the code).
        gamma: weight of the structure term (0.01: the F30K and CC152K scripts; the parser's
            default, which the COCO script leaves, is 1.0).
        beta: weight of the new values in the target EMA (0.7).
        gmm_seed: ``random_state`` of the split's GMM (official ``None``: numpy's stream).
    """

    spec: ClassVar[MethodSpec] = MethodSpec(
        # not measured yet (docs/methods/gsc.md): the official settings, no warm-up
        rows=(Row("gsc", "GSC-{}", order=130, paper_config="gsc_{bb}_{ds}", divides="structure GMM",
                  small_backbones=("SGR",),
                  overrides=("--model=ncl.methods.gsc.GSC",)),),
        # per-sample tables moved every step and split every epoch (from epoch 0 on: no warm-up)
        tiny={"gsc": {"gamma": 1.0}},
        regression={"gsc": RegressionCase("gsc_sgr_f30k.yaml", (*TINY_RUN_ARGS, "--model.gamma=1.0"))},
        page="gsc.md", config_prefixes=("gsc_",))
    default_lr_schedule = "after_warmup"  # the official main loop counts its own epochs
    #: ``ncl predict`` ranks a GSC run by its own division: the structure-consistency GMM
    #: (:mod:`ncl.methods.gsc_ranking`); ``--ranking gmm`` ranks it by the mean hinge's GMM.
    rankings: ClassVar[tuple[Ranking, ...]] = (STRUCTURE, GMM)

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = default_optimizer, lr_update: int = 15,
                 lr_decay: float = 0.2, warmup_epochs: int = 0, warmup_loss: WarmupLoss = "infonce",
                 margin: float = 0.2, temperature: float = 0.07, structure_temperature: float = 1.0,
                 gamma: float = 0.01, beta: float = 0.7, gmm_seed: int | None = 0,
                 **kwargs: Any) -> None:
        super().__init__(vocab_size, backbone, optimizer=optimizer, lr_update=lr_update,
                         n_networks=1, **kwargs)
        self.save_hyperparameters(ignore=["backbone", "optimizer"])
        check_ranges(self.hparams, integers={"warmup_epochs": 0}, open_unit=["lr_decay"],
                     positive=["margin", "temperature", "structure_temperature"],
                     nonnegative=["gamma"], unit=["beta"])
        if warmup_loss not in ("infonce", "triplet"):
            raise ConfigError(f"model.warmup_loss must be 'infonce' or 'triplet', got {warmup_loss!r}")
        if not hasattr(getattr(self.net, "sim_enc", None), "sim_eval_w"):
            raise ConfigError("GSC scores the intra-modal structure with SGRAF's similarity head; "
                              f"model.backbone {type(self.net).__name__} has none (use SGR or SAF)")
        self.stored = PerSampleState(2, fill=1.0)  # SCORE, PRED (the official ``topos``, ``preds``)
        self.targets = PerSampleState(4, fill=1.0, dtype=torch.float64)
        self.targets_epoch = -1  # the epoch the target table was made for (-1: none yet)

    def lr_factor(self, epoch: int) -> float:
        """``lr_decay ** (epochs counted // lr_update)`` (official: 0.2 per 15 or 20 epochs)."""
        counted = max(epoch - self.lr_schedule_start(), 0)
        return self.hparams.lr_decay ** (counted // self.hparams.lr_update)

    def setup(self, stage: str) -> None:
        """For ``fit``: tables for every training pair, all 1 (the official start)."""
        super().setup(stage)
        if stage != "fit":
            return
        n = len(retrieval_data(self.trainer, "GSC").train_pairs())
        for table in (self.stored, self.targets):
            if not table.ready or table.num_samples != n:
                table.reset(n)

    # ------------------------------------------------------------------ training
    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        hp, index = self.hparams, batch["index"]
        img = encode_images(self.net, batch)
        cap = self.net.encode_captions(batch["tokens"], batch["lengths"])
        sims = self.net.similarity(img, cap, batch["lengths"])  # (B, B) sigmoid scores
        size = sims.shape[0]
        if self.is_warmup_epoch(self.current_epoch):
            if hp.warmup_loss == "triplet":
                loss = triplet_loss(sims, margin=hp.margin, negatives="hardest").sum()
            else:
                loss = info_nce(sims, hp.temperature, directions="i2t", reduction="mean").loss
            self.log_train({"loss": loss}, batch_size=size)
            return loss
        lengths = [int(n) for n in batch["lengths"].tolist()]
        targets = self.targets.get(TARGET, index).to(sims.device)
        terms = gsc_objective(sims, image_structure(self.net.sim_enc, img),
                              caption_structure(self.net.sim_enc, cap, lengths), targets,
                              temperature=hp.temperature, gamma=hp.gamma,
                              structure_temperature=hp.structure_temperature)
        self.stored.scatter(SCORE, index, terms.scores)
        self.stored.scatter(PRED, index, terms.preds)
        self.log_train({"loss": terms.loss, "contrastive": terms.contrastive,
                        "structure": terms.structure, "target_mean": targets.float().mean()},
                       batch_size=size)
        return terms.loss

    def on_train_epoch_end(self) -> None:
        """The official ``split_batch`` after every epoch past the warm-up (once per epoch)."""
        epoch = self.current_epoch
        if self.is_warmup_epoch(epoch) or self.targets_epoch > epoch:
            return
        table = self.targets.values
        new = update_targets(self.stored.values[SCORE], self.stored.values[PRED], table[TOPO_TARGET],
                             table[PRED_TARGET], self.hparams.beta, self.hparams.gmm_seed)
        values = broadcast_(torch.stack([new.topo_targets, new.pred_targets, new.targets,
                                         new.posterior.to(torch.float64)]))  # rank 0's split
        self.targets.values = values.to(torch.float64).contiguous()
        self.targets_epoch = epoch + 1

    # ------------------------------------------------------------------ state
    def training_state(self) -> dict[str, Any]:
        return {"stored": self.stored.state_dict(), "targets": self.targets.state_dict(),
                "targets_epoch": self.targets_epoch}

    def load_training_state(self, state: dict[str, Any]) -> None:
        for name in ("stored", "targets"):
            if state.get(name) is not None:
                getattr(self, name).load_state_dict(state[name])
        self.targets_epoch = int(state.get("targets_epoch", -1))

    # ------------------------------------------------------------------ diagnostics
    def epoch_diagnostics(self, epoch: int, true_clean: Tensor | None) -> EpochDiagnostics:
        """The targets epoch ``epoch`` trains with (from the split at the end of ``epoch - 1``):
        their mean, the pairs below 0.5 as the detected noise, and the split's own GMM
        decision (posterior <= 0.5, the official print), against the ground truth."""
        if self.targets_epoch != epoch or not self.targets.ready:
            return EpochDiagnostics()
        table = self.targets.values
        views = [LabelView("GSC target min(pred, topo)", table[TARGET].float(), "target y"),
                 LabelView("GSC structure GMM posterior", table[POSTERIOR].float(), "posterior (clean)")]
        return division_report({"GSC target > 0.5": table[TARGET] > 0.5}, true_clean, prefix="gsc/",
                               scalars=target_stats(table[TARGET], table[POSTERIOR], true_clean),
                               labels=views)


def target_stats(targets: Tensor, posterior: Tensor, true_clean: Tensor | None) -> dict[str, float]:
    """``gsc/target_mean`` and, with the ground truth, the precision/recall/F1 of the split's
    own GMM decision (posterior > 0.5, ``gsc/gmm_*``; positives: noisy) and the mean target of
    the truly clean/noisy pairs (the targets' predicted-clean count and precision/recall/F1,
    targets > 0.5, are :func:`~ncl.methods.reports.division_report`'s)."""
    out = {"gsc/target_mean": float(targets.mean())}
    if true_clean is None:
        return out
    truth = true_clean.bool()
    out.update(detection_scalars(posterior > 0.5, truth, "gsc/gmm_"))
    for name, mask in (("clean", truth), ("noisy", ~truth)):
        if bool(mask.any()):
            out[f"gsc/target_true_{name}"] = float(targets[mask].mean())
    return out
