"""The base of every retrieval method (spec 4.1, 5): networks, optimiser and step schedule,
evaluation steps feeding :class:`~ncl.evaluation.metric.RetrievalEvaluation`, model selection
(:mod:`ncl.evaluation.selection`); seed and training state for exact resumes come from
:class:`~ncl.methods.resumable.Resumable`; warm-up, learning-rate schedule, callbacks, manual
clipping and training plans from :class:`~ncl.methods.skeleton.TrainingSkeleton`; what ``ncl
predict`` needs (batch scores, the method's ranking) from :class:`~ncl.methods.scoring.BatchScoring`.
A method adds the rest."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from functools import partial
from typing import Any

import lightning as L
import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from ncl.callbacks.protocols import EpochDiagnostics
from ncl.data.contracts import check_features_fit
from ncl.data.eval_batches import is_pair_batch
from ncl.errors import ConfigError
from ncl.evaluation.batching import encoding_context, networks_batching, with_split_statistics
from ncl.evaluation.autocast import check_eval_autocast, eval_autocast_refusal, similarity_context
from ncl.evaluation.epoch_end import finish_test, finish_validation
from ncl.evaluation.metric import Embeddings, Evaluation, RetrievalEvaluation, score_networks
from ncl.evaluation.nonfinite import EvalSite, check_finite_loss
from ncl.evaluation.protocol import Protocol
from ncl.evaluation.selection import check_selection_monitor
from ncl.methods.resumable import Resumable
from ncl.methods.scoring import BatchScoring
from ncl.methods.skeleton import TrainingSkeleton
from ncl.models.contracts import encode_images
from ncl.training.distributed import average_gradients, broadcast_buffers_

BackboneFactory = Callable[[int], nn.Module]


def default_optimizer(params: Any) -> torch.optim.Optimizer:
    """Adam, lr 2e-4, no weight decay (NCR/RCL/DECL, spec 4.1)."""
    return torch.optim.Adam(params, lr=2e-4)


class RetrievalMethod(BatchScoring, Resumable, TrainingSkeleton, L.LightningModule):
    """Base LightningModule for image-text retrieval methods.

    Args:
        vocab_size: rows of the official vocabulary; linked from the DataModule by the CLI.
        backbone: factory ``vocab_size -> nn.Module`` with the SGRAF interface
            (:class:`ncl.models.contracts.RetrievalBackbone`).
        optimizer: optimiser factory (default Adam, lr 2e-4).
        lr_update: learning rate times 0.1 every ``lr_update`` epochs (step schedule).
        grad_clip: max global gradient norm (2.0 in every official script); 0 disables.
        eval_shard_size: images/captions per block when computing evaluation similarities.
        eval_autocast: compute the evaluation's similarity matrices under autocast in the
            trainer's low dtype (``bf16-mixed``: bf16) instead of float32; needs a ``*-mixed``
            ``trainer.precision`` (:mod:`ncl.evaluation.autocast`, docs/precision.md).
        n_networks: independent networks built from ``backbone`` (2 for co-teaching).
        select_warmup: whether a warm-up epoch may become the best checkpoint (false: its
            ``val/rsum_selected`` is -1; see :meth:`selectable`).
        diagnostics: attach :class:`~ncl.callbacks.diagnostics.Diagnostics`, which logs what
            :meth:`epoch_diagnostics` reports every epoch (divisions, labels).
    """

    network_names: tuple[str, ...] = ("net",)

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = default_optimizer, lr_update: int = 30,
                 grad_clip: float = 2.0, eval_shard_size: int = 1000, eval_autocast: bool = False,
                 n_networks: int = 1, select_warmup: bool = False, diagnostics: bool = True) -> None:
        super().__init__()
        # a subclass's options too; eval_autocast is how this command evaluates, not part of
        # the trained model: a checkpoint that stored it would override `ncl test`'s choice
        self.save_hyperparameters(ignore=["backbone", "optimizer", "eval_autocast"])
        if n_networks < 1:
            raise ConfigError(f"model.n_networks must be >= 1, got {n_networks}")
        if lr_update < 1:
            raise ConfigError(f"model.lr_update must be >= 1 epoch, got {lr_update}")
        self.eval_autocast = check_eval_autocast(eval_autocast)
        self.nets = nn.ModuleList([backbone(vocab_size) for _ in range(n_networks)])
        self.backbone_factory = backbone  # re-initialisation (self-refining pieces)
        if n_networks > 1:
            self.network_names = tuple(chr(ord("A") + i) for i in range(n_networks))
        self.optimizer_factory = optimizer
        self.evaluation = RetrievalEvaluation(n_networks)  # no state in the checkpoint

    @property
    def net(self) -> nn.Module:
        """The first (or only) network."""
        return self.nets[0]

    @property
    def display_name(self) -> str:
        """The method's name in figure titles."""
        return type(self).__name__

    def epoch_diagnostics(self, epoch: int, true_clean: Tensor | None) -> EpochDiagnostics:
        """What epoch ``epoch`` trains on, for the observers (nothing for a plain method)."""
        return EpochDiagnostics()

    def setup(self, stage: str) -> None:
        """Check that the data's region count and feature size fit the backbone, and that
        ``eval_autocast`` has a low dtype to use."""
        check_features_fit(getattr(self.trainer, "datamodule", None),
                           dict(zip(self.network_names, self.nets)))
        if stage != "predict" and (refusal := eval_autocast_refusal(self.eval_autocast,
                                                                    self.trainer.precision)):
            raise ConfigError(refusal)
        if stage != "predict":
            self.choose_eval_batches()

    def choose_eval_batches(self) -> None:
        """Ask the DataModule for batches of pairs when the networks' embeddings depend on
        their batch and their backbone asks for it (:mod:`ncl.evaluation.batching`)."""
        pairs = networks_batching(self.nets) == "pairs"
        dm = getattr(self.trainer, "datamodule", None)
        if hasattr(dm, "use_eval_pairs"):
            dm.use_eval_pairs(pairs)
        elif pairs:
            raise ConfigError(f"the backbone's eval_batches 'pairs' needs a DataModule with "
                              f"use_eval_pairs (ncl's); {type(dm).__name__} has none")

    def configure_optimizers(self) -> Any:
        """One optimiser per network, then the method's :meth:`extra_optimizers`, each with
        ``LambdaLR(lr_factor)`` stepped per epoch."""
        opts = [self.optimizer_factory(net.parameters()) for net in self.nets] + self.extra_optimizers()
        configs = [{"optimizer": opt, "lr_scheduler": {"interval": "epoch", "scheduler":
                    torch.optim.lr_scheduler.LambdaLR(opt, self.lr_factor)}} for opt in opts]
        return configs[0] if len(configs) == 1 else configs

    def apply_lr_factor(self) -> None:
        """Set this epoch's learning rates (manual optimisation: Lightning steps no scheduler)
        from each ``LambdaLR``'s own factor, so that a callback that wraps it
        (:class:`~ncl.callbacks.SelfRefining`'s restart) acts here too."""
        for config in self.trainer.lr_scheduler_configs:
            sched = config.scheduler  # LambdaLR: one factor per param group
            for group, factor in zip(sched.optimizer.param_groups, sched.lr_lambdas):
                group["lr"] = group["initial_lr"] * factor(self.current_epoch)

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer,
                                    gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Clip the global norm at ``grad_clip`` (the official scripts' ``clip_grad_norm_``);
        automatic optimisation (manual: :meth:`TrainingSkeleton.on_before_optimizer_step`)."""
        if self.hparams.grad_clip > 0:
            self.clip_gradients(optimizer, gradient_clip_val=self.hparams.grad_clip,
                                gradient_clip_algorithm="norm")

    def step_module(self, opt: Any, module: nn.Module, loss: Tensor) -> None:
        """Manual optimisation of one part of the method: backward outside DDP's reducer, the
        gradient average of ``module`` only, then the step (clipped in the method's
        ``on_before_optimizer_step``).

        Used where a step trains only some parameters (NCR's network ``k``, L2RM's cost
        network): DDP's reducer expects every parameter to get a gradient in every backward.
        Every backward here is ``no_sync``, so DDP never broadcasts the buffers: rank 0's
        BatchNorm statistics are given to every rank here, or validation and division passes
        sharded over ranks would mix different networks.
        """
        opt.zero_grad()
        model = self.trainer.strategy.model
        with model.no_sync() if isinstance(model, DistributedDataParallel) else nullcontext():
            self.manual_backward(loss)
        average_gradients(module)
        opt.step()
        broadcast_buffers_(module)

    def on_before_backward(self, loss: Tensor) -> None:
        """Stop at the first NaN/Inf loss (every rank), before an optimiser step uses it."""
        check_finite_loss(loss, self._trainer, type(self).__name__, self.global_step, self.current_epoch)

    def on_train_epoch_start(self) -> None:
        """Reseed the epoch (:class:`Resumable`); set manual optimisation's learning rates."""
        self.reseed_epoch()
        if not self.automatic_optimization:
            self.apply_lr_factor()
        if self.logs_lr_factor:
            self.log("train/lr_factor", self.lr_factor(self.current_epoch), on_step=False,
                     on_epoch=True, sync_dist=True)

    def log_train(self, values: dict[str, Tensor | float], batch_size: int) -> None:
        self.log_dict({f"train/{k}": v for k, v in values.items()}, on_step=True,
                      on_epoch=True, prog_bar=False, batch_size=batch_size, sync_dist=False)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        """Encode a batch of images (loader 0), of captions (loader 1) or of pairs (the only
        loader, :mod:`ncl.data.eval_batches`) with every network."""
        with encoding_context(self.nets):
            if is_pair_batch(batch):
                self.encode_pair_batch(batch)
            elif dataloader_idx == 0:
                images = [encode_images(net, batch).float() for net in self.nets]
                self.evaluation.update(batch["index"], images)
            else:
                self.encode_caption_batch(batch)

    def encode_caption_batch(self, batch: dict[str, Tensor]) -> None:
        lengths = batch["lengths"]
        captions = [net.encode_captions(batch["tokens"], lengths).float() for net in self.nets]
        self.evaluation.update(batch["index"], captions, lengths=lengths)

    def encode_pair_batch(self, batch: dict[str, Tensor]) -> None:
        """Both sides of a batch of pairs, each centred (or whatever the backbone does) over
        the whole batch; an image is kept from the batch of its first caption (official
        ``encode_data``: ``image_index`` -1 elsewhere)."""
        keep = batch["image_index"] >= 0
        images = [encode_images(net, batch)[keep].float() for net in self.nets]
        self.evaluation.update(batch["image_index"][keep], images)
        self.encode_caption_batch(batch)

    test_step = validation_step

    def on_validation_epoch_start(self) -> None:
        self.evaluation.reset()
        broadcast_buffers_(*self.nets)  # every rank encodes with rank 0's (the checkpoint's) BatchNorm

    on_test_epoch_start = on_validation_epoch_start

    def similarities(self, emb: Embeddings, site: EvalSite) -> dict[str, Tensor]:
        """Each network's ``(N_img, N_cap)`` matrix, then their mean when there are several."""
        return score_networks([(n, net.similarity) for n, net in zip(self.network_names, self.nets)],
                              emb, self.hparams.eval_shard_size, self.device, site)

    def evaluate(self, protocols: Sequence[Protocol]) -> Evaluation:
        """Gather this epoch's embeddings over the ranks, score them, run ``protocols``."""
        site = EvalSite.of(self._trainer, type(self).__name__)
        im_div = int(site.split.im_div) if site.split is not None else 1
        return self.evaluation.compute(partial(self.scored, site=site), im_div, protocols)

    def scored(self, emb: Embeddings, site: EvalSite) -> dict[str, Tensor]:
        """:meth:`similarities`, under autocast when ``eval_autocast`` is on (else as is: the
        trainer's precision is not even read, so a bare evaluation harness needs none)."""
        precision = self.trainer.precision if self.eval_autocast else None
        with similarity_context(self.eval_autocast, precision, self.device.type):
            return self.similarities(with_split_statistics(emb, self.nets), site)

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking and self.evaluation.cap_index:  # sanity: steps only
            finish_validation(self, self.evaluate)
        self.evaluation.reset()

    def on_test_epoch_end(self) -> None:
        finish_test(self, self.evaluate)
        self.evaluation.reset()

    def on_fit_start(self) -> None:
        """Warn if a best checkpoint monitors ``val/rsum`` while some epochs are excluded."""
        check_selection_monitor(self.trainer, self.selectable)

    def selectable(self, epoch: int) -> bool:
        """Whether ``epoch`` may be the best checkpoint; a method may narrow it (call this)."""
        return bool(self.hparams.get("select_warmup", False)) or not self.is_warmup_epoch(epoch)
