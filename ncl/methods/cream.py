"""CREAM (Ma et al., TIP 2024): consistency refining and mining with two SGRAF networks.

Official code: XLearning-SCU/2024-TIP-CREAM (``train.py``, ``InfoNCELoss.py``, ``model.py``,
``data.py``, ``run.py``); ncl's reading of it, quirk by quirk, is ``docs/methods/cream.md``.

* Warm-up (``warmup_epochs``, 5): A then B, each one pass over its own shuffle of every pair,
  plain InfoNCE (``T = 0.07``, :func:`~ncl.losses.cream.per_sample_infonce`, mean); then the
  official warm-up selection (``warmup_selection``): the last warm-up epoch whose validation
  rSum *and* six recalls all beat every earlier epoch's is loaded back into both networks
  before the first division (no such epoch: fresh networks).
* Every co-training epoch: a division (:class:`~ncl.callbacks.division.GMMDivision`): both
  networks in eval mode over one shuffle of the training set, ``l_i = L^r_ii + L^c_ii``, a GMM
  per network, the agreement split into clean / hard / noisy
  (:func:`~ncl.division.cream.agreement_split`), one split for both networks.
* A trains a whole epoch, then B (:mod:`ncl.training.cream_plans`). An iteration of network
  ``k``: its targets in eval mode without gradient (:mod:`ncl.division.cream`), the filter
  (:func:`~ncl.losses.cream.batch_filter`, :func:`~ncl.losses.cream.step_filters`), then up to
  three optimiser steps, each its own forward, backward, clip and step: the clean batch, the
  hard batch (from co-training epoch ``hard_start_epoch``), the noisy batch (from
  ``noisy_start_epoch``), each with the soft-label InfoNCE
  (:func:`~ncl.losses.cream.soft_label_infonce`).
* Evaluation averages the two networks' similarities (the base's ensemble).

State (checkpointed, identical on every rank): the division, and during the warm-up the
selection's running maxima and the selected epoch's weights.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, get_args

import lightning as L
import torch
from torch import Tensor, nn

from ncl.callbacks.division import GMMDivision, divide_if_due
from ncl.callbacks.protocols import EpochDiagnostics, GMMSpec, LabelView, LossView, PassSpec
from ncl.data.contracts import retrieval_data
from ncl.data.datasets import Batch, PairDataset
from ncl.data.samplers import epoch_seed, global_seed
from ncl.division.co_divide import division_made_for
from ncl.division.cream import (CLEAN, HARD, NOISY, SubsetDivision, agreement_split, clean_targets,
                                hard_targets, mined_targets, official_clean_mask)
from ncl.division.detection import precision_recall_f1
from ncl.errors import ConfigError, TrainingError
from ncl.evaluation.epoch_end import finish_validation
from ncl.evaluation.metric import LOGGED_KEYS
from ncl.losses.cream import (batch_filter, infonce_prediction, per_sample_infonce,
                              soft_label_infonce, step_filters)
from ncl.methods.base import BackboneFactory, RetrievalMethod
from ncl.methods.declaration import BENCHMARK_WARMUP, MethodSpec, RegressionCase, Row, TINY_RUN_ARGS
from ncl.methods.skeleton import check_ranges
from ncl.models.contracts import forward_batch
from ncl.streams import declare_stream
from ncl.training.cream_plans import CreamStepDataset, cream_plan
from ncl.training.passes import eval_mode
from ncl.training.plans import PlanLoader

WarmupSelection = Literal["official", "last"]

# The grid rows: the official hard and noisy starts (co-training epochs 10 and 15 of 40, a
# quarter and three eighths of the co-training) scaled to the benchmark's 9 co-training epochs
# (14 - 5 warm-up: 2 and 3) and synthetic-small's 5 (8 - 3: 1 and 2), rounded down.
BENCHMARK_STARTS = ("--model.hard_start_epoch=2", "--model.noisy_start_epoch=3")
SMALL_STARTS = ("--model.hard_start_epoch=1", "--model.noisy_start_epoch=2")

#: Stream ids: the division pass's shuffle, the fresh networks of an unselected warm-up.
DIVISION_STREAM = declare_stream(75, "cream.division")
REINIT_STREAM = declare_stream(76, "cream.reinit")


def beats_every_maximum(values: dict[str, float], maxima: dict[str, float] | None) -> bool:
    """The official warm-up rule: every value (rSum and the six recalls) strictly above its
    running maximum; ``maxima`` ``None`` (nothing validated yet): maxima of 0."""
    return all(v > (0.0 if maxima is None else maxima[k]) for k, v in values.items())


class CREAM(RetrievalMethod):
    """CREAM LightningModule (two networks A and B, manual optimisation).

    Args:
        vocab_size, backbone: as :class:`~ncl.methods.base.RetrievalMethod`, and so are its
            options: Adam 2e-4, clip 2.0 per optimiser step, ``lr_update`` 10 (times 0.1 every
            10 co-training epochs; the warm-up at lr0), ``select_warmup`` false (the official
            best model is among the co-training epochs).
        warmup_epochs: InfoNCE warm-up epochs (5). ``trainer.max_epochs`` = warm-up +
            co-training epochs (40; COCO 20).
        temperature: ``T`` of every InfoNCE (0.07; hard-coded in the official model, whose
            ``--temperature`` option is never read).
        p_threshold: each network's GMM threshold (0.5, official 1 % rule).
        hard_start_epoch: co-training epoch (0-based) from which the hard batch trains (10); it
            also sets the clean filter ``max(hard_start_epoch - epoch, filter)``.
        noisy_start_epoch: co-training epoch from which the noisy batch trains (15).
        soft_label: the soft-label InfoNCE (official default true; the option is ``type=bool``,
            so any value given on the official command line is true). False: plain InfoNCE
            on every batch, the targets unused.
        smooth_label: the uniform soft negatives ``(1 - y_i) / (B - 1)`` instead of the
            similarity-shaped ones (official default false; ``type=bool`` as above).
        clean_fraction_rule: the clean fraction above which the clean and hard filters are 0
            (0.85).
        soft_label_eps: the constant added to the row and column sums of the weights (1e-6).
        warmup_selection: ``official`` (see above) or ``last`` (keep the last warm-up epoch).
        gmm_seed: ``random_state`` of the GMMs; the official code sets none (``None``: numpy's
            global stream, not reproducible on resume); 0 by default.
        division_shuffle: the division pass over a shuffle of the pairs (official: the shuffled
            warm-up loader, so a pair's loss depends on its batch-mates) or in index order.
        seed: seed of the batch plans and the division's shuffle; ``None``: the run's.
    """

    spec: ClassVar[MethodSpec] = MethodSpec(
        rows=(Row("cream", "CREAM-{}", order=160, warmup=True, paper_config="cream_{bb}_{ds}",
                  divides="agreement", small_backbones=("SGR",),
                  overrides=("--model=ncl.methods.cream.CREAM", f"--model.warmup_epochs={BENCHMARK_WARMUP}",
                             *BENCHMARK_STARTS),
                  small=SMALL_STARTS),),
        tiny={"cream": {"warmup_epochs": 1, "hard_start_epoch": 0, "noisy_start_epoch": 1}},
        regression={"cream": RegressionCase("cream_sgr_f30k.yaml", (
            *TINY_RUN_ARGS, "--model.warmup_epochs=2", "--model.hard_start_epoch=0",
            "--model.noisy_start_epoch=1"))},
        page="cream.md", config_prefixes=("cream_",))

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *, warmup_epochs: int = 5,
                 temperature: float = 0.07, p_threshold: float = 0.5, hard_start_epoch: int = 10,
                 noisy_start_epoch: int = 15, soft_label: bool = True, smooth_label: bool = False,
                 clean_fraction_rule: float = 0.85, soft_label_eps: float = 1e-6,
                 warmup_selection: WarmupSelection = "official", gmm_seed: int | None = 0,
                 division_shuffle: bool = True, seed: int | None = None, lr_update: int = 10,
                 **kwargs: Any) -> None:
        super().__init__(vocab_size, backbone, n_networks=2, lr_update=lr_update, **kwargs)
        self.save_hyperparameters(ignore=["backbone", "optimizer"])
        _check_ranges(self.hparams)
        self.automatic_optimization = False
        self.plan_seed = global_seed() if seed is None else seed
        # Training state (checkpointed, identical on every rank):
        self.division: SubsetDivision | None = None
        self.warmup_maxima: dict[str, float] | None = None  # running maxima of the warm-up
        self.warmup_best: dict[str, Any] | None = None  # {"epoch", "weights"} of the selection
        self.warmup_done = False  # the selection was applied

    def method_callbacks(self) -> list[L.Callback]:
        return [GMMDivision()]

    # ------------------------------------------------------------------ state
    def training_state(self) -> dict[str, Any]:
        return {"division": None if self.division is None else self.division.state(),
                "warmup_maxima": self.warmup_maxima, "warmup_best": self.warmup_best,
                "warmup_done": self.warmup_done}

    def load_training_state(self, state: dict[str, Any]) -> None:
        self.division = SubsetDivision.from_state(state.get("division"))  # type: ignore[assignment]
        self.warmup_maxima = state.get("warmup_maxima")
        self.warmup_best = state.get("warmup_best")
        self.warmup_done = bool(state.get("warmup_done", False))

    # ------------------------------------------------------------------ schedule
    default_lr_schedule, logs_lr_factor = "after_warmup", True

    def cotrain_epoch(self) -> int:
        """The co-training epoch (0-based) of the current epoch."""
        return self.current_epoch - self.hparams.warmup_epochs

    # ------------------------------------------------------------------ warm-up selection
    def on_validation_epoch_end(self) -> None:
        """The base's validation (:func:`~ncl.evaluation.epoch_end.finish_validation`), then,
        in a warm-up epoch, the official warm-up rule on the ensemble's rSum and recalls."""
        kept: dict[str, Any] = {}

        def evaluate(protocols: Any) -> Any:
            kept["evaluation"] = self.evaluate(protocols)
            return kept["evaluation"]

        if not self.trainer.sanity_checking and self.evaluation.cap_index:
            finish_validation(self, evaluate)
        self.evaluation.reset()
        if "evaluation" in kept and self.trainer.state.fn == "fit":
            results = kept["evaluation"].results
            self.note_warmup_validation(self.current_epoch, results[list(results)[-1]]["1k"])

    def note_warmup_validation(self, epoch: int, metrics: dict[str, float]) -> None:
        """Update the running maxima with a warm-up epoch's validation; keep its weights when
        every value beats them (:func:`beats_every_maximum`)."""
        if not self.is_warmup_epoch(epoch) or self.hparams.warmup_selection != "official":
            return
        values = {k: float(metrics[k]) for k in LOGGED_KEYS}
        if beats_every_maximum(values, self.warmup_maxima):
            self.warmup_best = {"epoch": epoch, "weights": [
                {k: v.detach().cpu().clone() for k, v in net.state_dict().items()} for net in self.nets]}
        old = self.warmup_maxima or {k: 0.0 for k in values}
        self.warmup_maxima = {k: max(v, old[k]) for k, v in values.items()}

    def finish_warmup(self) -> None:
        """Load the selected warm-up weights (official ``warmup_selection``) into both networks
        once, before the first division; no selected epoch: fresh networks and optimisers.
        Adam's moments are kept when weights are loaded (the official code reloads the
        networks only). Nothing happens when no warm-up epoch was validated."""
        if self.warmup_done:
            return
        self.warmup_done = True
        if self.hparams.warmup_selection != "official" or self.warmup_maxima is None:
            return
        best, self.warmup_best = self.warmup_best, None
        with torch.no_grad():
            if best is not None:
                for net, weights in zip(self.nets, best["weights"]):
                    net.load_state_dict(weights)
                return
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(epoch_seed(self.training_seed, self.hparams.warmup_epochs, REINIT_STREAM))
                fresh = [self.backbone_factory(self.hparams.vocab_size) for _ in self.nets]
            for net, new in zip(self.nets, fresh):
                net.load_state_dict(new.state_dict())
        for opt in self.optimizers():
            opt.optimizer.state.clear()

    # ------------------------------------------------------------------ division (GMMDivisible)
    def division_due(self, epoch: int) -> bool:
        return epoch >= self.hparams.warmup_epochs and not division_made_for(self.division, epoch)

    def division_pass(self, epoch: int) -> tuple[PassSpec, GMMSpec]:
        """``l_i = L^r_ii + L^c_ii`` of both networks over one shuffle (official ``eval_train``
        over the shuffled warm-up loader); the warm-up selection first."""
        self.finish_warmup()
        hp = self.hparams
        batch_size = retrieval_data(self.trainer, "CREAM").batch_size
        temperature = hp.temperature

        def loss(net: nn.Module, batch: dict[str, Tensor]) -> Tensor:
            return per_sample_infonce(forward_batch(net, batch).float(), temperature)

        spec = PassSpec(loss, (0, 1), batch_size, hp.division_shuffle, DIVISION_STREAM, self.plan_seed)
        return spec, GMMSpec(seed=hp.gmm_seed)

    def accept_division(self, epoch: int, values: Tensor, clean_prob: Tensor) -> None:
        prob, threshold = clean_prob.float(), self.hparams.p_threshold
        subset = agreement_split(prob, threshold)
        clean = torch.stack([official_clean_mask(p, threshold) for p in prob])
        self.division = SubsetDivision(epoch=epoch, losses=values, prob=prob, clean=clean, subset=subset)

    # ------------------------------------------------------------------ plan
    def setup(self, stage: str) -> None:
        super().setup(stage)
        if stage == "fit":
            self.take_train_loader(self.cream_dataloader, "CREAM")

    def cream_dataloader(self, pairs: PairDataset) -> PlanLoader:
        """This epoch's steps (:func:`~ncl.training.cream_plans.cream_plan`); the epoch's
        division is made here when missing (the loader is built before epoch-start hooks)."""
        trainer, epoch = self.trainer, self.current_epoch
        dm = retrieval_data(trainer, "CREAM")
        divide_if_due(trainer, self, epoch)
        subset = None if self.is_warmup_epoch(epoch) else self.division.subset.numpy()
        if subset is not None and not bool((subset == CLEAN).sum() >= 2):
            raise TrainingError(
                f"CREAM epoch {epoch}: the division left {int((subset == CLEAN).sum())} clean pairs; "
                f"co-training needs a clean batch (the official code skips the epoch). The "
                f"division has collapsed (see cream/* in metrics.csv): more warm-up epochs or a "
                f"lower learning rate usually help.")
        steps = cream_plan(len(pairs), dm.batch_size, self.plan_seed, epoch, subset=subset,
                           limit=trainer.limit_train_batches, rank=trainer.global_rank,
                           world=trainer.world_size)
        return PlanLoader(CreamStepDataset(pairs, steps), dm.num_workers,  # type: ignore[arg-type]
                          pin_memory=self.device.type == "cuda")

    # ------------------------------------------------------------------ training
    def training_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        k = int(batch["net"])
        if self.is_warmup_epoch(self.current_epoch):
            sims = forward_batch(self.nets[k], batch["clean"])
            loss = per_sample_infonce(sims, self.hparams.temperature).mean()
            self.optimize(k, loss)
            self.log_net(k, {"warmup_infonce": loss.detach()}, sims.shape[0])
            return
        self.cotrain_step(k, batch["clean"], batch.get("hard"), bool(batch.get("hard_fresh", False)),
                          batch.get("noisy"))

    def predict_pairs(self, net: nn.Module, batch: Batch) -> Tensor:
        """``p`` (B,) of ``net`` on ``batch`` (:func:`~ncl.losses.cream.infonce_prediction`)."""
        return infonce_prediction(forward_batch(net, batch).float(), self.hparams.temperature)

    def iteration_targets(self, k: int, clean: Batch, hard: Batch | None, noisy: Batch | None
                          ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Network ``k``'s targets of the three batches, both networks in eval mode, no gradient."""
        net, peer = self.nets[k], self.nets[1 - k]
        prob = self.division.prob_on(clean["index"].device)  # (2, N)
        with torch.no_grad(), eval_mode(net, peer):
            t_c = clean_targets(prob[1 - k][clean["index"]], self.predict_pairs(net, clean))
            t_h = t_u = None
            if hard is not None:
                t_h = hard_targets(prob[0][hard["index"]], prob[1][hard["index"]],
                                   self.predict_pairs(net, hard))
            if noisy is not None:
                t_u = mined_targets(self.predict_pairs(net, noisy), self.predict_pairs(peer, noisy))
        return t_c, t_h, t_u

    def cotrain_step(self, k: int, clean: Batch, hard: Batch | None, hard_fresh: bool,
                     noisy: Batch | None) -> None:
        """One iteration of network ``k`` (official ``train_one_epoch``): targets, filters, then
        the clean step, the hard step (from ``hard_start_epoch``, a fresh batch of two or more)
        and the noisy step (from ``noisy_start_epoch``, a batch of two or more)."""
        hp, epoch = self.hparams, self.cotrain_epoch()
        t_c, t_h, t_u = self.iteration_targets(k, clean, hard, noisy)
        sizes = self.division.sizes()
        counts = (sizes["clean"], sizes["hard"] if hard is not None else 0,
                  sizes["noisy"] if noisy is not None else 0)
        means = (float(t_c.mean()), float(t_h.mean()) if t_h is not None else 0.0,
                 float(t_u.mean()) if t_u is not None else 0.0)
        filters = step_filters(batch_filter(means, counts), sizes["clean"] / self.division.subset.numel(),
                               epoch, hp.hard_start_epoch, hp.clean_fraction_rule)
        logs = {"loss_clean": self.soft_step(k, clean, t_c, filters.clean),
                "target_clean": t_c.mean(), "filter": torch.tensor(filters.noisy)}
        if epoch >= hp.hard_start_epoch and hard is not None and hard_fresh and len(hard["index"]) > 1:
            logs["loss_hard"] = self.soft_step(k, hard, t_h, filters.hard)
        if epoch >= hp.noisy_start_epoch and noisy is not None and len(noisy["index"]) > 1:
            logs["loss_noisy"] = self.soft_step(k, noisy, t_u, filters.noisy)
        self.log_net(k, logs, int(clean["index"].shape[0]))

    def soft_step(self, k: int, batch: Batch, targets: Tensor, filter_value: float) -> Tensor:
        """One optimiser step of network ``k`` (train mode) on one batch; returns the loss."""
        hp = self.hparams
        sims = forward_batch(self.nets[k], batch)
        if hp.soft_label:
            loss = soft_label_infonce(sims, targets, hp.temperature, filter_value,
                                      hp.soft_label_eps, hp.smooth_label)
        else:
            loss = per_sample_infonce(sims, hp.temperature).mean()
        self.optimize(k, loss)
        return loss.detach()

    def optimize(self, k: int, loss: Tensor) -> None:
        """Backward, average and step network ``k`` only (clipped at ``grad_clip``)."""
        self.step_module(self.optimizers()[k], self.nets[k], loss)

    # ------------------------------------------------------------------ diagnostics
    def epoch_diagnostics(self, epoch: int, true_clean: Tensor | None) -> EpochDiagnostics:
        """The division made for ``epoch``: subset sizes (``cream/{clean,hard,noisy}``), with the
        ground truth the truly noisy pairs in each, the noisy subset as the detected noise."""
        division = self.division
        if division is None or division.epoch != epoch:
            return EpochDiagnostics()
        return subset_report(division, division.subset, self.network_names, self.hparams.gmm_seed,
                             true_clean, "cream")


def subset_report(division: SubsetDivision, subset: Tensor, names: tuple[str, ...],
                  gmm_seed: int | None, true_clean: Tensor | None, prefix: str) -> EpochDiagnostics:
    """Scalars ``<prefix>/<subset>`` (sizes) and ``<prefix>/<subset>_true_noisy``, the noise
    detection of the noisy subset, the losses and clean probabilities of both networks."""
    scalars: dict[str, float] = {}
    for code, name in ((CLEAN, "clean"), (HARD, "hard"), (NOISY, "noisy")):
        members = subset == code
        scalars[f"{prefix}/{name}"] = float(members.sum())
        if true_clean is not None:
            scalars[f"{prefix}/{name}_true_noisy"] = float((members & ~true_clean).sum())
    detection: dict[str, float] = {}
    if true_clean is not None:
        detection = precision_recall_f1(scalars[f"{prefix}/noisy_true_noisy"],
                                        scalars[f"{prefix}/noisy"], float((~true_clean).sum()))
    losses = LossView(f"{prefix} division: per-sample InfoNCE and GMM",
                      dict(zip(names, division.losses)), gmm_seed)
    labels = [LabelView(f"clean probability from network {n}'s GMM", w, "clean probability")
              for n, w in zip(names, division.prob)]
    return EpochDiagnostics(scalars, {"noisy subset": subset != NOISY}, losses, labels,
                            noise_detection=detection)


def _check_ranges(hp: Any) -> None:
    """Raise ConfigError naming the offending ``model.*`` option."""
    if hp.warmup_selection not in get_args(WarmupSelection):
        raise ConfigError(f"model.warmup_selection must be one of {get_args(WarmupSelection)}, "
                          f"got {hp.warmup_selection!r}")
    check_ranges(hp, integers={"warmup_epochs": 0, "hard_start_epoch": 0, "noisy_start_epoch": 0},
                 positive=["temperature"], nonnegative=["soft_label_eps"],
                 unit=["p_threshold", "clean_fraction_rule"])
