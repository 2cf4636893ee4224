"""BiCro (Yang et al., CVPR 2023): bidirectional cross-modal similarity consistency on NCR's code
base (docs/methods/bicro.md; official code xu5zhao/BiCro at 0231631, read for its facts).

Two SGR (or SAF) networks co-teach as in NCR (:mod:`ncl.methods.ncr`, whose batch plans this
reuses): warm-up epochs train each network on its own shuffle with the sum of the
``int(B * warmup_rate)`` smallest mean hinges (:func:`~ncl.losses.bicro.selected_warmup_loss`);
every later epoch starts with a division per network (its mean hinge over the training set,
min-max normalised, BiCro's Beta mixture, ``prob > 0.5``: :mod:`ncl.division.bicro`, run by
:class:`~ncl.callbacks.bicro_division.ValuesDivision`), and each network trains on its peer's
division. The peer labels every batch (eval mode, no gradient,
:mod:`ncl.division.bicro_labels`): anchors are the labelled batch's most confident tenth,
labelled pairs get ``1/2 + (i2t + t2i)/4``, unlabelled pairs ``(i2t + t2i)/2`` against the same
anchors (from co-training epoch ``num_epochs // 2``, with its own backward and step before the
labelled one); the loss is the summed hardest-negative hinge with soft margins
(:func:`~ncl.losses.bicro.bicro_soft_triplet`).

Six quirks of the official code are switches whose ``official`` value keeps them (the class
docstring); a seventh, two crashes on current PyTorch (``.next()`` on a DataLoader iterator,
a test that loads a checkpoint name never written), is simply not reproduced.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import lightning as L
import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor, nn

from ncl.callbacks.bicro_division import ValuesDivision, divide_now_if_due
from ncl.callbacks.protocols import EpochDiagnostics, LossView, PassSpec
from ncl.data.contracts import retrieval_data
from ncl.data.datasets import Batch, PairDataset
from ncl.data.samplers import global_seed
from ncl.division.bicro import (CleanComponent, Fallback, PosteriorInput, bicro_clean_probability,
                                bicro_split)
from ncl.division.bicro_labels import (LabelScatter, global_embeddings, labelled_soft_labels,
                                       unlabelled_soft_labels)
from ncl.division.co_divide import Division, division_made_for, gmm_probabilities, mean_hinge
from ncl.errors import ConfigError, TrainingError
from ncl.losses.bicro import CaptionMargin, bicro_soft_triplet, selected_warmup_loss
from ncl.losses.triplet import RecastKind
from ncl.methods.base import BackboneFactory, RetrievalMethod, default_optimizer
from ncl.methods.co_teaching import PlannedCoTeaching
from ncl.methods.declaration import BENCHMARK_WARMUP, TINY_RUN_ARGS, MethodSpec, RegressionCase, Row
from ncl.methods.reports import co_divide_report
from ncl.methods.skeleton import check_ranges
from ncl.models.contracts import encode_images, forward_batch
from ncl.streams import declare_stream
from ncl.training.distributed import broadcast_
from ncl.training.passes import eval_mode
from ncl.training.plans import PlanLoader, StepDataset, co_teaching_plan, unlabelled_loss_active

#: The division pass's shuffle (one shuffle for both networks, as the official single loader).
DIVISION_STREAM = declare_stream(101, "bicro.division")

Mixture = Literal["beta", "gaussian"]
SplitProbability = Literal["official", "rectify"]


class BiCro(PlannedCoTeaching, RetrievalMethod):
    """BiCro LightningModule (two networks A and B, manual optimisation).

    Args:
        vocab_size, backbone: as :class:`~ncl.methods.base.RetrievalMethod`, and so are its
            options (Adam 2e-4, clip 2.0, ``lr_update`` 30 counted over co-training epochs,
            ``select_warmup`` false: the official code validates co-training epochs only).
        warmup_epochs: warm-up epochs (10 in every script). ``trainer.max_epochs`` = warm-up +
            co-training epochs (40).
        margin: the hinge margin, the anchors' ``alpha`` and the largest soft margin (0.2).
        warmup_rate: fraction of each warm-up batch trained on, the smallest mean hinges
            (scripts 0.3; the parser's default 0.5).
        soft_margin: the recast ``f(y)`` (``exponential``: ``0.2 (10^y - 1) / 9``; ``linear``,
            ``sin``).
        mixture: ``beta`` (the scripts' ``fit_type bmm``) or ``gaussian`` (the parser's
            ``gmm``: sklearn's GMM, the low-mean component, ``gmm_seed``).
        gmm_seed: ``random_state`` of the Gaussian mixture (the official ``None``).
        p_threshold: clean iff ``prob > p_threshold`` (0.5).
        soft_label_floor: soft labels at or below it become 0 (the scripts' ``noise_train
            noise_soft`` with ``noise_tem`` 0.5); ``None``: none (the parser's ``train``).
        unlabelled_start: co-training epoch of the first unlabelled step; ``None``: the
            official ``num_epochs // 2`` (``num_epochs = max_epochs - warmup_epochs``).
        label_scatter: quirk (1): ``official`` writes labelled pair ``k``'s label to pair
            ``rest[k]``; ``aligned`` to pair ``k``.
        caption_margin: quirk (2): ``official`` gives ``C_s[i, j]`` the negative caption's
            margin ``f(y_j)``; ``anchor`` the anchor image's ``f(y_i)``.
        clean_component: quirk (3): ``official`` takes mixture component 0 as clean;
            ``lower_mean`` the one with the smaller mean.
        posterior_input: quirk (4): ``official`` evaluates the posterior on the unclamped
            losses (NaN at 0 when ``alpha_0 < 1``: that pair is noisy and the fallback never
            fires); ``clamped`` on the clamped ones the mixture saw.
        fallback: quirk (5): when every pair is clean, ``official`` thresholds at the unsorted
            ``prob[N // 100]``; ``sorted`` at the ``N // 100``-th smallest.
        split_probability: quirk (6): ``official`` never uses the division's probability ``w``
            in the loss; ``rectify`` trains the labelled pairs on ``w + (1 - w) y`` (NCR's
            co-rectification, with the peer's ``w``; ncl's choice, not the paper's).
        seed: seed of the batch plans and the division pass's shuffle; ``None``: the run's.
    """

    spec: ClassVar[MethodSpec] = MethodSpec(
        rows=(Row("bicro", "BiCro-{}", order=150, warmup=True, paper_config="bicro_{bb}_{ds}",
                  divides="beta co-divide", small_backbones=("SGR",),
                  overrides=("--model=ncl.methods.bicro.BiCro",
                             f"--model.warmup_epochs={BENCHMARK_WARMUP}",
                             "--model.select_warmup=true"),
                  # batch 16: the official warmup_rate 0.3 (4 pairs a batch) stalled the warm-up
                  # on the synthetic data and the first division called no pair clean
                  small=("--model.warmup_rate=1.0",)),),
        # one warm-up epoch, then co-training with the unlabelled step from its start
        tiny={"bicro": {"warmup_epochs": 1, "unlabelled_start": 0}},
        regression={"bicro": RegressionCase("bicro_sgr_f30k.yaml", (
            *TINY_RUN_ARGS, "--model.warmup_epochs=1", "--model.unlabelled_start=0"))},
        page="bicro.md", config_prefixes=("bicro_",))

    #: Warm-up epochs at ``lr0``, then the step schedule over co-training epochs.
    default_lr_schedule, logs_lr_factor = "after_warmup", True

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = default_optimizer, warmup_epochs: int = 10,
                 margin: float = 0.2, warmup_rate: float = 0.3,
                 soft_margin: RecastKind = "exponential", mixture: Mixture = "beta",
                 gmm_seed: int | None = 0, p_threshold: float = 0.5,
                 soft_label_floor: float | None = 0.5, unlabelled_start: int | None = None,
                 label_scatter: LabelScatter = "official",
                 caption_margin: CaptionMargin = "official",
                 clean_component: CleanComponent = "official",
                 posterior_input: PosteriorInput = "official", fallback: Fallback = "official",
                 split_probability: SplitProbability = "official", seed: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(vocab_size, backbone, optimizer=optimizer, n_networks=2, **kwargs)
        self.save_hyperparameters(ignore=["backbone", "optimizer"])
        _check_options(self.hparams)
        self.automatic_optimization = False
        self.plan_seed = global_seed() if seed is None else seed
        self.division: Division | None = None  # checkpointed (training_state)

    def method_callbacks(self) -> list[L.Callback]:
        return [ValuesDivision()]

    # ------------------------------------------------------------------ division (ValuesDivisible)
    def division_due(self, epoch: int) -> bool:
        return epoch >= self.hparams.warmup_epochs and not division_made_for(self.division, epoch)

    def values_pass(self, epoch: int) -> PassSpec:
        """Every pair's mean hinge (margin 0.2) in eval mode, one shuffle for both networks
        (the official single warm-up loader), batches of the training batch size."""
        batch_size = retrieval_data(self.trainer, "BiCro").batch_size
        return PassSpec(mean_hinge(self.hparams.margin), (0, 1), batch_size, True,
                        DIVISION_STREAM, self.plan_seed)

    def accept_values(self, epoch: int, values: Tensor) -> None:
        """The division of ``epoch`` from the ``(2, N)`` mean hinges: each network's clean
        probability and split (the same on every rank: the fit is deterministic)."""
        hp = self.hparams
        if hp.mixture == "beta":
            prob = torch.stack([bicro_clean_probability(v, hp.clean_component, hp.posterior_input)
                                for v in values])
        else:
            prob = gmm_probabilities(values, hp.gmm_seed).double()
        prob = broadcast_(prob)  # rank 0's fit (the Gaussian's may differ with another BLAS)
        clean = torch.stack([bicro_split(p, hp.p_threshold, hp.fallback) for p in prob])
        self.division = Division(epoch, values, prob, clean)

    def training_state(self) -> dict[str, Any]:
        return {"division": None if self.division is None else self.division.state()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        self.division = Division.from_state(state.get("division"))

    # ------------------------------------------------------------------ batches
    def setup(self, stage: str) -> None:
        super().setup(stage)
        if stage == "fit":
            self.take_train_loader(self.co_teaching_dataloader, "BiCro")

    def unlabelled_loss_on(self) -> bool:
        hp = self.hparams
        max_epochs = self.trainer.max_epochs if hp.unlabelled_start is None else None
        return unlabelled_loss_active(self.current_epoch, hp.warmup_epochs, hp.unlabelled_start,
                                      max_epochs)

    def co_teaching_dataloader(self, pairs: PairDataset) -> PlanLoader:
        """NCR's plan of this epoch (:func:`~ncl.training.plans.co_teaching_plan`): warm-up
        passes, or each network over its peer's clean pairs with unlabelled batches of the
        peer's noisy pairs when the unlabelled step is on. The division is made here if
        missing (the loader is built before the epoch-start hooks)."""
        trainer, epoch = self.trainer, self.current_epoch
        dm = retrieval_data(trainer, "BiCro")
        divide_now_if_due(trainer, self, epoch)
        cotrain = not self.is_warmup_epoch(epoch)
        if cotrain:
            check_division_usable(self.division.clean, epoch)
        steps = co_teaching_plan(len(pairs), dm.batch_size, self.plan_seed, epoch,
                                 clean=self.division.clean if cotrain else None,
                                 with_unlabelled=cotrain and self.unlabelled_loss_on(),
                                 limit=trainer.limit_train_batches, rank=trainer.global_rank,
                                 world=trainer.world_size)
        return PlanLoader(StepDataset(pairs, steps), dm.num_workers,
                          pin_memory=self.device.type == "cuda")

    # ------------------------------------------------------------------ training
    def warmup_step(self, k: int, batch: Batch) -> None:
        """The sum of the ``int(B * warmup_rate)`` smallest mean hinges (``warmup_sele``)."""
        hp = self.hparams
        sims = forward_batch(self.nets[k], batch)  # (B, B)
        loss = selected_warmup_loss(sims, hp.margin, hp.warmup_rate).sum()
        self.optimize(k, loss)
        self.log_net(k, {"warmup_loss": loss.detach()}, sims.shape[0])

    def peer_labels(self, k: int, labelled: Batch, unlabelled: Batch | None
                    ) -> tuple[Tensor, Tensor | None]:
        """The soft labels network ``k`` trains on, from its peer (eval mode, no gradient):
        ``(B_l,)`` labelled and ``(B_u,)`` unlabelled (``None`` without a batch)."""
        hp, peer = self.hparams, self.nets[1 - k]
        with torch.no_grad(), eval_mode(peer):
            img, cap, sims = _embed(peer, labelled, with_sims=True)
            img_g, cap_g = global_embeddings(img, cap, labelled["lengths"])
            y_l, anchors = labelled_soft_labels(sims, img_g, cap_g, hp.margin,
                                                hp.soft_label_floor, hp.label_scatter)
            y_u = None
            if unlabelled is not None:
                img_u, cap_u, _ = _embed(peer, unlabelled, with_sims=False)
                img_gu, cap_gu = global_embeddings(img_u, cap_u, unlabelled["lengths"])
                y_u = unlabelled_soft_labels(img_gu, cap_gu, img_g[anchors], cap_g[anchors],
                                             hp.soft_label_floor)
        if hp.split_probability == "rectify":
            w = self.division.prob_on(y_l.device)[1 - k][labelled["index"]].to(y_l.dtype)
            y_l = (w + (1 - w) * y_l).clamp(0, 1)
        return y_l, y_u

    def soft_loss(self, k: int, batch: Batch, labels: Tensor) -> Tensor:
        hp = self.hparams
        sims = forward_batch(self.nets[k], batch)  # (B, B), train mode
        return bicro_soft_triplet(sims, labels, hp.caption_margin, hp.margin, hp.soft_margin).sum()

    def cotrain_step(self, k: int, labelled: Batch, unlabelled: Batch | None) -> None:
        """One iteration of network ``k`` on its peer's division: the unlabelled step (when on
        and drawn), then the labelled step, each with its own backward and optimiser step."""
        use_unlabelled = unlabelled is not None and self.unlabelled_loss_on()
        y_l, y_u = self.peer_labels(k, labelled, unlabelled if use_unlabelled else None)
        logs = {"labels_labelled": y_l.mean()}
        if y_u is not None:
            loss_u = self.soft_loss(k, unlabelled, y_u)
            self.optimize(k, loss_u)
            logs.update(loss_unlabelled=loss_u.detach(), labels_unlabelled=y_u.mean())
        loss_l = self.soft_loss(k, labelled, y_l)
        self.optimize(k, loss_l)
        logs["loss_labelled"] = loss_l.detach()
        self.log_net(k, logs, labelled["index"].shape[0])

    def optimize(self, k: int, loss: Tensor) -> None:
        """Backward, average and step network ``k`` only (one network per step, as NCR)."""
        self.step_module(self.optimizers()[k], self.nets[k], loss)

    # ------------------------------------------------------------------ diagnostics
    @property
    def display_name(self) -> str:
        return "BiCro"

    def epoch_diagnostics(self, epoch: int, true_clean: Tensor | None) -> EpochDiagnostics:
        """The division made for ``epoch``: sizes, detection, losses, clean probabilities."""
        division = self.division if self.division is not None and self.division.epoch == epoch else None
        report = co_divide_report(division, self.network_names, self.hparams.gmm_seed, true_clean)
        if division is not None:
            mixture = "beta" if self.hparams.mixture == "beta" else "gaussian"
            report.losses = LossView(f"BiCro division: per-sample loss (mean hinge), {mixture} "
                                     f"mixture", dict(zip(self.network_names, division.losses)),
                                     self.hparams.gmm_seed, mixture=mixture)
        return report


def _embed(net: nn.Module, batch: Batch, with_sims: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """``net``'s region embeddings, word embeddings and (optionally) ``(B, B)`` scores."""
    img = encode_images(net, batch)
    cap = net.encode_captions(batch["tokens"], batch["lengths"])
    sims = net.similarity(img, cap, batch["lengths"]) if with_sims else None
    return img, cap, sims


def check_division_usable(clean: Tensor, epoch: int) -> None:
    """Raise one clear error when neither network's division left its peer a batch (``(2, N)``
    bool ``clean``). The official code then trains neither network (``if len(pred.nonzero()[0])``)
    and, its weights unchanged, makes the same division every later epoch: an idle run."""
    counts = [int(c.sum()) for c in clean]
    if all(n < 2 for n in counts):
        raise TrainingError(
            f"BiCro epoch {epoch}: the division called {counts[0]}, {counts[1]} of {clean.shape[1]} "
            f"pairs clean (networks A, B); co-training needs at least 2. The official code would "
            f"train neither network from here on. The warm-up trains on the int(B * warmup_rate) "
            f"smallest losses only: more warm-up epochs (model.warmup_epochs) or a larger "
            f"model.warmup_rate usually help (see division/* in metrics.csv).")


def _check_options(hp: Any) -> None:
    """Raise ConfigError (a ValueError) naming the offending ``model.*`` option."""
    check_ranges(hp, integers={"warmup_epochs": 0}, positive=["margin"],
                 unit=["warmup_rate", "p_threshold"], optional_nonnegative=["unlabelled_start"])
    if hp.soft_label_floor is not None and not 0.0 <= hp.soft_label_floor <= 1.0:
        raise ConfigError(f"model.soft_label_floor must lie in [0, 1] or be null, got {hp.soft_label_floor}")
    if hp.soft_margin == "sigmoid":
        raise ConfigError("model.soft_margin 'sigmoid' (LNC's Psi4) is not one of BiCro's; "
                          "use exponential, linear or sin")
