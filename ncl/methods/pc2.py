"""PC² (Duan et al., ACM MM 2024): pseudo-classification based pseudo-captioning on NCR's code
base (docs/methods/pc2.md; official code alipay/PC2-NoiseofWeb, ``pc2/``, read for its facts).

Two SGR (or SAF) networks co-teach as in NCR, each with a projection head (``proj_dim``
pseudo-classes, one head for both modalities, :mod:`ncl.models.pc2_head`). Warm-up epochs train
each network on its own shuffle with the sum of the half smallest mean hinges plus the
pseudo-classification loss ``CE(p, argmax q) - lambda_en H`` (:mod:`ncl.losses.pc2`) and store
every pair's image prediction in the network's distribution bank. Every co-training epoch
starts with a division per network (:class:`~ncl.callbacks.bicro_division.ValuesDivision`): a
GMM on the mean hinges (``w``, clean split) and one on the oscillation ``KL(p || bank)`` (``c``,
stable split) (:mod:`ncl.division.pc2`). Network k trains on its peer's clean pairs with the
labels ``w + (1 - w) c [stable]`` (soft-margin hardest triplet + pseudo-classification), and from
co-training epoch ``pseudo_caption_start`` on takes a second step on its peer's noisy pairs
captioned by the labelled pairs whose image predictions are nearest (pseudo-captions), writing
both batches' predictions into its bank.

Six quirks of the official code are switches whose default keeps them; crashes of the
released code are not reproduced (docs/methods/pc2.md).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import lightning as L
import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor, nn

from ncl.callbacks.bicro_division import ValuesDivision, divide_now_if_due
from ncl.callbacks.protocols import EpochDiagnostics, PassSpec
from ncl.data.contracts import retrieval_data
from ncl.data.datasets import Batch, PairDataset
from ncl.data.samplers import global_seed
from ncl.division.pc2 import (BankIndex, DistributionBank, PC2Division, labelled_targets,
                              match_pseudo_captions, pc2_division, subset_positions)
from ncl.errors import ConfigError
from ncl.losses.pc2 import (EntropyOf, mean_hinges, pseudo_classification, selected_mean_hinges,
                            soft_hardest_triplet)
from ncl.losses.triplet import RecastKind
from ncl.methods.base import BackboneFactory, RetrievalMethod, default_optimizer
from ncl.methods.co_teaching import PlannedCoTeaching
from ncl.methods.declaration import BENCHMARK_WARMUP, TINY_RUN_ARGS, MethodSpec, RegressionCase, Row
from ncl.methods.reports import co_divide_report
from ncl.methods.skeleton import check_ranges
from ncl.models.contracts import encode_images
from ncl.models.pc2_head import ProjectionHead, fit_positions
from ncl.streams import declare_stream
from ncl.training.distributed import broadcast_
from ncl.training.plans import PlanLoader, StepDataset, co_teaching_plan, unlabelled_loss_active

#: The division pass's shuffle (one shuffle for both networks: the official warm-up loader).
DIVISION_STREAM = declare_stream(111, "pc2.division")

PseudoCaptionFit = Literal["resized", "donor"]
MarginLayoutChoice = Literal["official", "per_sample"]


class PC2(PlannedCoTeaching, RetrievalMethod):
    """PC² LightningModule (two networks A and B with a projection head each, manual
    optimisation).

    Args:
        vocab_size, backbone: as :class:`~ncl.methods.base.RetrievalMethod`, and so are its
            options (Adam 2e-4 over a network and its head, clip 2.0 over both, ``lr_update``
            30 counted over co-training epochs). The backbone must be SGRAF's (regions and
            word embeddings of one size).
        warmup_epochs: warm-up epochs (README F30K/COCO 5; parser 1; NoW 10).
            ``trainer.max_epochs`` = warm-up + co-training epochs (50).
        pseudo_caption_start: co-training epoch of the first pseudo-caption step (official
            ``warmup_epoch_2`` 25); ``None``: half the co-training epochs.
        proj_dim: pseudo-classes of the head (128).
        lambda_en: weight of the entropy term (README 10; parser 1).
        margin: the hinge margin and largest soft margin (0.2).
        warmup_rate: fraction of each warm-up batch trained on, the smallest mean hinges (0.5,
            fixed in the official ``ContrastiveLoss``).
        soft_margin: the recast (``exponential``: ``0.2 (10^y - 1)/9``; ``linear``, ``sin``).
        p_threshold: clean iff ``w > p_threshold``, stable iff ``c > p_threshold`` (0.5).
        pseudo_label_floor: pseudo-caption labels below it become 0 (0.5).
        gmm_seed: ``random_state`` of both mixtures (the official ``None``).
        bank_index: quirk Q1: ``subset`` (official) writes co-training predictions at positions
            inside the peer's clean / noisy subsets; ``dataset`` at the pairs' own indices.
        pseudo_label_grad: quirk Q2: ``True`` (official) keeps the gradient through the
            pseudo-caption labels (their margins train the head); ``False`` detaches them.
        pseudo_caption_fit: quirk Q3: ``resized`` (official) brings the donor caption to the
            unlabelled batch's longest caption and keeps the donor's length; ``donor`` uses the
            donor's embedding and length as they are.
        margin_layout: quirk Q4: ``official`` (labelled margins by image row, pseudo-caption
            margins by caption column in both hinges) or ``per_sample`` (each anchor its pair's).
        entropy_of: quirk Q5: ``samples`` (official: mean per-sample entropy of the image
            predictions) or ``batch_mean`` (entropy of their batch mean).
        select_from_pseudo_captions: quirk Q6: ``True`` (official) selects the best epoch among
            co-training epochs from ``pseudo_caption_start`` on when the run reaches it.
        reset_optimizers: fresh Adam states when co-training starts (official).
        seed: seed of the batch plans and the division shuffle; ``None``: the run's.
    """

    spec: ClassVar[MethodSpec] = MethodSpec(
        rows=(Row("pc2", "PC²-{}", order=190, warmup=True, paper_config="pc2_{bb}_{ds}",
                  divides="co-divide + oscillation", small_backbones=("SGR",),
                  # the official start (25 of 50 co-training epochs) scaled: half of them;
                  # selection over every epoch, as the grid's other rows
                  overrides=("--model=ncl.methods.pc2.PC2", f"--model.warmup_epochs={BENCHMARK_WARMUP}",
                             "--model.pseudo_caption_start=null", "--model.select_warmup=true",
                             "--model.select_from_pseudo_captions=false")),),
        # one warm-up epoch, then co-training with pseudo-captions from its start
        tiny={"pc2": {"warmup_epochs": 1, "pseudo_caption_start": 0, "proj_dim": 16}},
        regression={"pc2": RegressionCase("pc2_sgr_f30k.yaml", (
            *TINY_RUN_ARGS, "--model.warmup_epochs=1", "--model.pseudo_caption_start=0",
            "--model.proj_dim=16"))},
        page="pc2.md", config_prefixes=("pc2_",))

    #: Warm-up epochs at ``lr0``, then the step schedule over co-training epochs.
    default_lr_schedule, logs_lr_factor = "after_warmup", True

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = default_optimizer, warmup_epochs: int = 5,
                 pseudo_caption_start: int | None = 25, proj_dim: int = 128,
                 lambda_en: float = 10.0, margin: float = 0.2, warmup_rate: float = 0.5,
                 soft_margin: RecastKind = "exponential", p_threshold: float = 0.5,
                 pseudo_label_floor: float = 0.5, gmm_seed: int | None = 0,
                 bank_index: BankIndex = "subset", pseudo_label_grad: bool = True,
                 pseudo_caption_fit: PseudoCaptionFit = "resized",
                 margin_layout: MarginLayoutChoice = "official", entropy_of: EntropyOf = "samples",
                 select_from_pseudo_captions: bool = True, reset_optimizers: bool = True,
                 seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(vocab_size, backbone, optimizer=optimizer, n_networks=2, **kwargs)
        self.save_hyperparameters(ignore=["backbone", "optimizer"])
        _check_options(self.hparams)
        self.automatic_optimization = False
        self.plan_seed = global_seed() if seed is None else seed
        self.slots, embed = _region_layout(self.nets[0])
        self.heads = nn.ModuleList([ProjectionHead(self.slots * embed, proj_dim) for _ in self.nets])
        self.division: PC2Division | None = None  # checkpointed (training_state)
        self.bank = DistributionBank(len(self.nets), proj_dim)  # checkpointed (training_state)

    def configure_optimizers(self) -> Any:
        """One optimiser per network over the network and its head (the official ``params``),
        each with ``LambdaLR(lr_factor)``; clipping therefore covers both."""
        opts = [self.optimizer_factory([*net.parameters(), *head.parameters()])
                for net, head in zip(self.nets, self.heads)]
        return [{"optimizer": opt, "lr_scheduler": {"interval": "epoch", "scheduler":
                 torch.optim.lr_scheduler.LambdaLR(opt, self.lr_factor)}} for opt in opts]

    def method_callbacks(self) -> list[L.Callback]:
        return [ValuesDivision()]

    def on_train_epoch_start(self) -> None:
        """The learning rates; fresh Adam states at the first co-training epoch (official)."""
        super().on_train_epoch_start()
        hp = self.hparams
        if hp.reset_optimizers and hp.warmup_epochs > 0 and self.current_epoch == hp.warmup_epochs:
            for opt in self.optimizers():
                opt.optimizer.state.clear()

    def selectable(self, epoch: int) -> bool:
        """Quirk Q6: the official best rSum restarts at co-training epoch ``warmup_epoch_2``."""
        if not super().selectable(epoch):
            return False
        hp, start = self.hparams, self.pseudo_caption_epoch()
        if not hp.select_from_pseudo_captions or start is None:
            return True
        return epoch >= start or self.trainer.max_epochs <= start

    # ------------------------------------------------------------------ division (ValuesDivisible)
    def division_due(self, epoch: int) -> bool:
        division = self.division
        return epoch >= self.hparams.warmup_epochs and (division is None or division.epoch != epoch)

    def values_pass(self, epoch: int) -> PassSpec:
        """Every pair's mean hinge and image pseudo-prediction, ``(B, 1 + C)``, in eval mode over
        one shuffle (the official warm-up loader), batches of the training batch size."""
        batch_size = retrieval_data(self.trainer, "PC2").batch_size
        return PassSpec(self.pass_values, (0, 1), batch_size, True, DIVISION_STREAM, self.plan_seed)

    def pass_values(self, net: nn.Module, batch: dict[str, Tensor]) -> Tensor:
        head = self.heads[next(k for k, n in enumerate(self.nets) if n is net)]
        img = encode_images(net, batch)
        cap = net.encode_captions(batch["tokens"], batch["lengths"])
        sims = net.similarity(img, cap, batch["lengths"]).float()
        pred = head(img).float().softmax(dim=1)
        return torch.cat([mean_hinges(sims, self.hparams.margin).unsqueeze(1), pred], dim=1)

    def accept_values(self, epoch: int, values: Tensor) -> None:
        """The division of ``epoch`` from the ``(2, N, 1 + C)`` pass: both mixtures per network,
        rank 0's fits broadcast."""
        hp, values = self.hparams, values.cpu()
        losses = values[:, :, 0].double()
        osc = torch.stack([self.bank.oscillation(k, values[k, :, 1:]) for k in range(2)]).double()
        self.division = pc2_division(epoch, losses, osc, hp.p_threshold, hp.gmm_seed, broadcast_)

    def training_state(self) -> dict[str, Any]:
        return {"division": None if self.division is None else self.division.state(),
                "bank": self.bank.state_dict()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        self.division = PC2Division.from_state(state.get("division"))
        if state.get("bank") is not None:
            self.bank.load_state_dict(state["bank"])

    # ------------------------------------------------------------------ batches
    def setup(self, stage: str) -> None:
        super().setup(stage)
        if stage == "fit":
            dm = self.take_train_loader(self.co_teaching_dataloader, "PC2")
            if not self.bank.ready:
                self.bank.reset(len(dm.train_pairs()))  # a resume overwrites it

    def pseudo_caption_epoch(self) -> int | None:
        """The Lightning epoch of the first pseudo-caption step (``None``: unknown yet)."""
        hp = self.hparams
        if hp.pseudo_caption_start is not None:
            return hp.warmup_epochs + hp.pseudo_caption_start
        max_epochs = self.trainer.max_epochs
        return None if max_epochs is None or max_epochs < 0 else \
            hp.warmup_epochs + (max_epochs - hp.warmup_epochs) // 2

    def pseudo_captions_on(self) -> bool:
        hp = self.hparams
        max_epochs = self.trainer.max_epochs if hp.pseudo_caption_start is None else None
        return unlabelled_loss_active(self.current_epoch, hp.warmup_epochs,
                                      hp.pseudo_caption_start, max_epochs)

    def co_teaching_dataloader(self, pairs: PairDataset) -> PlanLoader:
        """NCR's plan of this epoch: warm-up passes, or each network over its peer's clean pairs
        with batches of the peer's noisy pairs once pseudo-captions are on."""
        trainer, epoch = self.trainer, self.current_epoch
        dm = retrieval_data(trainer, "PC2")
        divide_now_if_due(trainer, self, epoch)
        cotrain = not self.is_warmup_epoch(epoch)
        steps = co_teaching_plan(len(pairs), dm.batch_size, self.plan_seed, epoch,
                                 clean=self.division.loss.clean if cotrain else None,
                                 with_unlabelled=cotrain and self.pseudo_captions_on(),
                                 limit=trainer.limit_train_batches, rank=trainer.global_rank,
                                 world=trainer.world_size)
        return PlanLoader(StepDataset(pairs, steps), dm.num_workers,
                          pin_memory=self.device.type == "cuda")

    # ------------------------------------------------------------------ training
    def embed(self, k: int, batch: Batch) -> tuple[Tensor, Tensor, Tensor]:
        """Network ``k``'s region embeddings ``(B, R, E)``, word embeddings ``(B, L, E)`` (``L``
        the batch's longest caption) and image logits ``(B, C)``, train mode."""
        net = self.nets[k]
        img = encode_images(net, batch)
        cap = net.encode_captions(batch["tokens"], batch["lengths"])
        cap = cap[:, : int(batch["lengths"].max())]
        return img, cap, self.heads[k](img)

    def pseudo_class_terms(self, k: int, img_logits: Tensor, cap: Tensor) -> Any:
        txt_logits = self.heads[k](fit_positions(cap, self.slots))
        return pseudo_classification(img_logits, txt_logits, self.hparams.lambda_en,
                                     self.hparams.entropy_of)

    def warmup_step(self, k: int, batch: Batch) -> None:
        """``warmup_sele`` triplet + pseudo-classification; the bank takes the predictions."""
        hp = self.hparams
        img, cap, img_logits = self.embed(k, batch)
        sims = self.nets[k].similarity(img, cap, batch["lengths"])
        triplet = selected_mean_hinges(sims, hp.margin, hp.warmup_rate).sum()
        terms = self.pseudo_class_terms(k, img_logits, cap)
        self.bank.write(k, batch["index"], img_logits.softmax(dim=1))
        self.optimize(k, triplet + terms.loss)
        self.log_net(k, {"warmup_triplet": triplet.detach(), "ce_image": terms.ce_image.detach(),
                         "ce_caption": terms.ce_caption, "entropy": terms.entropy.detach(),
                         "caption_entropy": terms.caption_entropy}, sims.shape[0])

    def cotrain_step(self, k: int, labelled: Batch, unlabelled: Batch | None) -> None:
        """The labelled step on the peer's clean pairs, then (stage 2) the pseudo-caption step."""
        hp, division = self.hparams, self.division
        peer, index = 1 - k, labelled["index"].cpu()
        y = labelled_targets(division.loss.prob[peer][index], division.stable_prob[peer][index],
                             division.stable[peer][index]).to(labelled["index"].device)
        img, cap, img_logits = self.embed(k, labelled)
        sims = self.nets[k].similarity(img, cap, labelled["lengths"])
        layout = "column" if hp.margin_layout == "official" else "per_sample"
        triplet = soft_hardest_triplet(sims, y.to(sims.dtype), layout, hp.margin, hp.soft_margin).sum()
        terms = self.pseudo_class_terms(k, img_logits, cap)
        self.optimize(k, triplet + terms.loss)
        logs = {"loss_labelled": triplet.detach(), "target_labelled": y.mean(),
                "ce_image": terms.ce_image.detach(), "entropy": terms.entropy.detach()}
        if unlabelled is not None and self.pseudo_captions_on():
            loss_u, labels = self.pseudo_caption_loss(k, labelled, unlabelled)
            self.optimize(k, loss_u)
            logs.update(loss_pseudo=loss_u.detach(), label_pseudo=labels.mean())
        self.log_net(k, logs, labelled["index"].shape[0])

    def pseudo_caption_loss(self, k: int, labelled: Batch, unlabelled: Batch) -> tuple[Tensor, Tensor]:
        """Step 8: the noisy images against pseudo-captions from the labelled batch; writes both
        batches' predictions into the bank. Returns the summed loss and the ``(B_u,)`` labels."""
        hp = self.hparams
        img_u, cap_u, logits_u = self.embed(k, unlabelled)
        _, cap_l, logits_l = self.embed(k, labelled)
        pred_u, pred_l = logits_u.softmax(dim=1), logits_l.softmax(dim=1)
        self.write_bank(k, labelled["index"], unlabelled["index"], pred_l, pred_u)
        donor, labels = match_pseudo_captions(pred_u, pred_l, hp.pseudo_label_floor)
        if not hp.pseudo_label_grad:
            labels = labels.detach()
        donor_len = labelled["lengths"][donor]
        if hp.pseudo_caption_fit == "resized":
            width = cap_u.shape[1]
            captions = 1e-8 * cap_u + fit_positions(cap_l[donor], width)
            lengths = donor_len.clamp(max=width)
        else:
            captions, lengths = cap_l[donor], donor_len
        sims = self.nets[k].similarity(img_u, captions, lengths)
        layout = "row" if hp.margin_layout == "official" else "per_sample"
        loss = soft_hardest_triplet(sims, labels.to(sims.dtype), layout, hp.margin, hp.soft_margin)
        return loss.sum(), labels.detach()

    def write_bank(self, k: int, index_l: Tensor, index_u: Tensor, pred_l: Tensor,
                   pred_u: Tensor) -> None:
        """The unlabelled predictions, then the labelled ones (the official order), at dataset
        indices or (quirk Q1) at positions inside the peer's noisy / clean subsets."""
        if self.hparams.bank_index == "subset":
            clean = self.division.loss.clean[1 - k]
            index_u, index_l = subset_positions(~clean, index_u), subset_positions(clean, index_l)
        self.bank.write(k, torch.cat([index_u, index_l]), torch.cat([pred_u, pred_l]))

    def optimize(self, k: int, loss: Tensor) -> None:
        """Backward, average and step network ``k`` and its head only."""
        self.step_module(self.optimizers()[k], nn.ModuleList([self.nets[k], self.heads[k]]), loss)

    # ------------------------------------------------------------------ diagnostics
    @property
    def display_name(self) -> str:
        return "PC²"

    def epoch_diagnostics(self, epoch: int, true_clean: Tensor | None) -> EpochDiagnostics:
        """The loss co-divide made for ``epoch``: sizes, detection, losses, ``w``."""
        division = self.division if self.division is not None and self.division.epoch == epoch else None
        return co_divide_report(None if division is None else division.loss, self.network_names,
                                self.hparams.gmm_seed, true_clean)


def _region_layout(net: nn.Module) -> tuple[int, int]:
    """``(R, E)``: the backbone's region count and embedding size (SGRAF's)."""
    regions = getattr(net, "num_regions", None)
    fc = getattr(getattr(net, "img_enc", None), "fc", None)
    if not isinstance(regions, int) or not isinstance(fc, nn.Linear):
        raise ConfigError(f"PC2 needs an SGRAF backbone (num_regions and an image encoder fc); "
                          f"got {type(net).__name__}")
    return regions, fc.out_features


def _check_options(hp: Any) -> None:
    """Raise ConfigError (a ValueError) naming the offending ``model.*`` option."""
    check_ranges(hp, integers={"warmup_epochs": 0, "proj_dim": 1}, positive=["margin"],
                 nonnegative=["lambda_en"], unit=["warmup_rate", "p_threshold", "pseudo_label_floor"],
                 optional_nonnegative=["pseudo_caption_start"])
    if hp.soft_margin == "sigmoid":
        raise ConfigError("model.soft_margin 'sigmoid' (LNC's Psi4) is not one of PC²'s; "
                          "use exponential, linear or sin")
