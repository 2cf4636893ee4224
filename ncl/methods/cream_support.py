"""The machinery CREAM (TIP 2024) and SPS (IJCAI 2025, built on CREAM's code) share: two
networks, an InfoNCE warm-up with the official warm-up selection, a division of both networks'
per-sample InfoNCE by a GMM each, and an epoch of A's iterations, then B's, each iteration of up
to three batches (:mod:`ncl.training.cream_plans`). The methods say how they split
(:meth:`SplitCoTraining.split`) and what an iteration does (``cotrain_step``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import lightning as L
import numpy as np
import torch
from torch import Tensor, nn

from ncl.callbacks.division import GMMDivision, divide_if_due
from ncl.callbacks.protocols import EpochDiagnostics, GMMSpec, LabelView, LossView, PassSpec
from ncl.data.contracts import retrieval_data
from ncl.data.datasets import Batch, PairDataset
from ncl.data.samplers import epoch_seed, global_seed
from ncl.division.co_divide import division_made_for
from ncl.division.cream import CLEAN, HARD, NOISY, SUBSET_NAMES, SubsetDivision, official_clean_mask
from ncl.division.detection import precision_recall_f1
from ncl.errors import TrainingError
from ncl.evaluation.epoch_end import finish_validation
from ncl.evaluation.metric import LOGGED_KEYS
from ncl.losses.cream import infonce_prediction, per_sample_infonce
from ncl.methods.base import RetrievalMethod
from ncl.models.contracts import forward_batch
from ncl.training.cream_plans import CREAM_STREAMS, CreamStepDataset, PlanStreams, cream_plan
from ncl.training.plans import PlanLoader


def beats_every_maximum(values: dict[str, float], maxima: dict[str, float] | None,
                        ties: bool = False) -> bool:
    """The official warm-up rule: every value (rSum and the six recalls) strictly above its
    running maximum (CREAM; ``ties``: at or above, SPS); ``maxima`` ``None`` (nothing
    validated yet): maxima of 0."""
    def beats(v: float, m: float) -> bool:
        return v >= m if ties else v > m
    return all(beats(v, 0.0 if maxima is None else maxima[k]) for k, v in values.items())


class SplitCoTraining(RetrievalMethod):
    """The shared part of CREAM and SPS (no options of its own: a subclass's constructor
    declares them and calls :meth:`init_state`). Options read: ``warmup_epochs``,
    ``temperature``, ``p_threshold``, ``warmup_selection``, ``gmm_seed``, ``division_shuffle``.

    State (checkpointed, identical on every rank): the division, and during the warm-up the
    selection's running maxima and the kept epoch's weights.
    """

    #: Stream ids of the division pass's shuffle and of fresh networks (the subclass's).
    division_stream: ClassVar[int]
    reinit_stream: ClassVar[int]
    #: The subset codes that drive, are held and cycle in a co-training epoch, and the plan's
    #: streams (:func:`~ncl.training.cream_plans.cotrain_steps`).
    plan_codes: ClassVar[tuple[int, int, int]] = (CLEAN, HARD, NOISY)
    plan_streams: ClassVar[PlanStreams] = CREAM_STREAMS

    def init_state(self, seed: int | None) -> None:
        """Manual optimisation, the plan's seed and the empty training state."""
        self.automatic_optimization = False
        self.plan_seed = global_seed() if seed is None else seed
        self.division: SubsetDivision | None = None
        self.warmup_maxima: dict[str, float] | None = None  # running maxima of the warm-up
        self.warmup_best: dict[str, Any] | None = None  # {"epoch", "weights"} of the kept epoch
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
    #: The warm-up rule: strictly above every running maximum (CREAM), or at or above the
    #: maxima of the last kept epoch (SPS).
    warmup_ties: ClassVar[bool] = False

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
        best = beats_every_maximum(values, self.warmup_maxima, self.warmup_ties)
        if best:
            self.warmup_best = {"epoch": epoch, "weights": [
                {k: v.detach().cpu().clone() for k, v in net.state_dict().items()} for net in self.nets]}
        if best or not self.warmup_ties:  # SPS moves its maxima only with a kept epoch
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
                torch.manual_seed(epoch_seed(self.training_seed, self.hparams.warmup_epochs, self.reinit_stream))
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

        spec = PassSpec(loss, (0, 1), batch_size, hp.division_shuffle, self.division_stream, self.plan_seed)
        return spec, GMMSpec(seed=hp.gmm_seed)

    def accept_division(self, epoch: int, values: Tensor, clean_prob: Tensor) -> None:
        """Keep the division: both networks' losses and probabilities, each network's official
        mask (:func:`~ncl.division.cream.official_clean_mask`) and the method's subsets
        (:meth:`split`)."""
        prob, threshold = clean_prob.float(), self.hparams.p_threshold
        clean = torch.stack([official_clean_mask(p, threshold) for p in prob])
        self.division = SubsetDivision(epoch=epoch, losses=values, prob=prob, clean=clean,
                                       subset=self.split(prob))

    def split(self, prob: Tensor) -> Tensor:
        """The subset codes of ``(2, N)`` clean probabilities (the method's rule)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ plan
    def setup(self, stage: str) -> None:
        super().setup(stage)
        if stage == "fit":
            self.take_train_loader(self.cream_dataloader, type(self).__name__)

    def cream_dataloader(self, pairs: PairDataset) -> PlanLoader:
        """This epoch's steps (:func:`~ncl.training.cream_plans.cream_plan`); the epoch's
        division is made here when missing (the loader is built before epoch-start hooks)."""
        trainer, epoch, name = self.trainer, self.current_epoch, type(self).__name__
        dm = retrieval_data(trainer, name)
        divide_if_due(trainer, self, epoch)
        subset = None if self.is_warmup_epoch(epoch) else self.division.subset.numpy()
        if subset is not None:
            self.check_driving_subset(epoch, subset)
        steps = cream_plan(len(pairs), dm.batch_size, self.plan_seed, epoch, subset=subset,
                           limit=trainer.limit_train_batches, rank=trainer.global_rank,
                           world=trainer.world_size, codes=self.plan_codes, streams=self.plan_streams)
        return PlanLoader(CreamStepDataset(pairs, steps), dm.num_workers,  # type: ignore[arg-type]
                          pin_memory=self.device.type == "cuda")

    def check_driving_subset(self, epoch: int, subset: np.ndarray) -> None:
        """One clear error when a network's driving subset cannot form a batch (the official
        code skips the epoch; Lightning cannot run an epoch without batches)."""
        rows = [subset] if subset.ndim == 1 else list(subset)
        counts = [int((row == self.plan_codes[0]).sum()) for row in rows]
        if min(counts) < 2:
            name = type(self).__name__
            raise TrainingError(
                f"{name} epoch {epoch}: the division left {counts} pairs in the subset that drives "
                f"the epoch; co-training needs a batch of two (the official code skips the epoch). "
                f"The division has collapsed (see {name.lower()}/* in metrics.csv): more warm-up "
                f"epochs or a lower learning rate usually help.")

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

    def cotrain_step(self, k: int, driving: Batch, held: Batch | None, held_fresh: bool,
                     cycled: Batch | None) -> None:
        """One co-training iteration of network ``k`` (the method's)."""
        raise NotImplementedError

    def predict_pairs(self, net: nn.Module, batch: Batch) -> Tensor:
        """``p`` (B,) of ``net`` on ``batch`` (:func:`~ncl.losses.cream.infonce_prediction`)."""
        return infonce_prediction(forward_batch(net, batch).float(), self.hparams.temperature)

    def optimize(self, k: int, loss: Tensor) -> None:
        """Backward, average and step network ``k`` only (clipped at ``grad_clip``)."""
        self.step_module(self.optimizers()[k], self.nets[k], loss)


def subset_report(division: SubsetDivision, subset: Tensor, names: tuple[str, ...],
                  gmm_seed: int | None, true_clean: Tensor | None, prefix: str,
                  codes: tuple[int, ...] = (CLEAN, HARD, NOISY)) -> EpochDiagnostics:
    """Scalars ``<prefix>/<subset>`` (sizes of the subsets ``codes``, named by
    :data:`~ncl.division.cream.SUBSET_NAMES`) and ``<prefix>/<subset>_true_noisy``, the noise
    detection of the noisy subset, the losses and clean probabilities of both networks.

    Args:
        subset: ``(N,)`` subset codes.
    """
    scalars: dict[str, float] = {}
    for code in codes:
        name = SUBSET_NAMES[code]
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
