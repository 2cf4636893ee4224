"""The base of every retrieval method (spec 4.1, 5): networks, optimiser and step schedule,
evaluation steps feeding :class:`~ncl.evaluation.metric.RetrievalEvaluation`, model selection
(:mod:`ncl.evaluation.selection`), training-state checkpoint hooks. A method adds the rest."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor, nn

from ncl.callbacks.protocols import EpochDiagnostics
from ncl.data.contracts import check_features_fit
from ncl.data.samplers import GLOBAL_TORCH_STREAM, epoch_seed, global_seed
from ncl.errors import ConfigError
from ncl.evaluation.metric import (Embeddings, Evaluation, RetrievalEvaluation, logged_test_metrics,
                                   logged_val_metrics, score_networks, summary_line)
from ncl.evaluation.nonfinite import EvalSite, check_finite_loss
from ncl.evaluation.protocol import Protocol
from ncl.evaluation.report import format_table, write_results
from ncl.evaluation.selection import SELECTED_KEY, check_selection_monitor, selected_rsum
from ncl.models.contracts import encode_images
from ncl.training.distributed import broadcast_buffers_
from ncl.training.schedule import step_decay

BackboneFactory = Callable[[int], nn.Module]


def default_optimizer(params: Any) -> torch.optim.Optimizer:
    """Adam, lr 2e-4, no weight decay (NCR/RCL/DECL, spec 4.1)."""
    return torch.optim.Adam(params, lr=2e-4)


class RetrievalMethod(L.LightningModule):
    """Base LightningModule for image-text retrieval methods.

    Args:
        vocab_size: rows of the official vocabulary; linked from the DataModule by the CLI.
        backbone: factory ``vocab_size -> nn.Module`` with the SGRAF interface
            (:class:`ncl.models.contracts.RetrievalBackbone`).
        optimizer: optimiser factory (default Adam, lr 2e-4).
        lr_update: learning rate times 0.1 every ``lr_update`` epochs (step schedule).
        grad_clip: max global gradient norm (2.0 in every official script); 0 disables.
        eval_shard_size: images/captions per block when computing evaluation similarities.
        n_networks: independent networks built from ``backbone`` (2 for co-teaching).
        select_warmup: whether a warm-up epoch may become the best checkpoint (false: its
            ``val/rsum_selected`` is -1; see :meth:`selectable`).
    """

    network_names: tuple[str, ...] = ("net",)

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = default_optimizer, lr_update: int = 30,
                 grad_clip: float = 2.0, eval_shard_size: int = 1000, n_networks: int = 1,
                 select_warmup: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["backbone", "optimizer"])  # a subclass's options too
        if n_networks < 1:
            raise ConfigError(f"model.n_networks must be >= 1, got {n_networks}")
        if lr_update < 1:
            raise ConfigError(f"model.lr_update must be >= 1 epoch, got {lr_update}")
        self.nets = nn.ModuleList([backbone(vocab_size) for _ in range(n_networks)])
        self.backbone_factory = backbone  # re-initialisation (self-refining pieces)
        if n_networks > 1:
            self.network_names = tuple(chr(ord("A") + i) for i in range(n_networks))
        self.optimizer_factory = optimizer
        self.evaluation = RetrievalEvaluation(n_networks)  # no state in the checkpoint
        self._training_seed: int | None = None

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
        """Check that the data's region count and feature size fit the backbone."""
        check_features_fit(getattr(self.trainer, "datamodule", None),
                           dict(zip(self.network_names, self.nets)))

    def lr_factor(self, epoch: int) -> float:
        """Learning-rate multiplier of ``epoch`` (``LambdaLR``): the step schedule (spec 4.1)."""
        return step_decay(epoch, self.hparams.lr_update)

    def configure_optimizers(self) -> Any:
        """One optimiser per network, each with ``LambdaLR(lr_factor)`` stepped per epoch."""
        configs = []
        for net in self.nets:
            opt = self.optimizer_factory(net.parameters())
            sched = torch.optim.lr_scheduler.LambdaLR(opt, self.lr_factor)
            configs.append({"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}})
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
        """Clip the global norm at ``grad_clip`` (the official scripts' ``clip_grad_norm_``)."""
        if self.hparams.grad_clip > 0:
            self.clip_gradients(optimizer, gradient_clip_val=self.hparams.grad_clip,
                                gradient_clip_algorithm="norm")

    def on_before_backward(self, loss: Tensor) -> None:
        """Stop at the first NaN/Inf loss (every rank), before an optimiser step uses it."""
        check_finite_loss(loss, self._trainer, type(self).__name__, self.global_step, self.current_epoch)

    @property
    def training_seed(self) -> int:
        """The run's seed (``seed_everything``), fixed at the first epoch and checkpointed."""
        if self._training_seed is None:
            self._training_seed = global_seed()
        return self._training_seed

    def on_train_epoch_start(self) -> None:
        """Reseed torch's global stream from ``(seed, epoch, rank)``: same draws after a resume."""
        torch.manual_seed(epoch_seed(self.training_seed, self.current_epoch, GLOBAL_TORCH_STREAM,
                                     self.global_rank))
        if not self.automatic_optimization:
            self.apply_lr_factor()

    def training_state(self) -> dict[str, Any]:
        """Per-sample and schedule state, checkpointed as ``ncl_training_state`` (none here)."""
        return {}

    def load_training_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`training_state` returned."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["ncl_training_seed"] = self.training_seed
        if state := self.training_state():
            checkpoint["ncl_training_state"] = state

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "ncl_training_seed" in checkpoint:  # kept even if seed_everything is ``true``
            self._training_seed = int(checkpoint["ncl_training_seed"])
        if "ncl_training_state" in checkpoint:
            self.load_training_state(checkpoint["ncl_training_state"])
        elif self.training_state() and self.trainer.state.fn == "fit":
            raise ConfigError(f"cannot resume from {self.trainer.ckpt_path}: it holds no ncl_training_state "
                              f"({type(self).__name__}'s per-sample state), so an older ncl wrote it (in its "
                              f"callbacks' state); start a new run, or evaluate it with ncl test --ckpt_path")

    def log_train(self, values: dict[str, Tensor | float], batch_size: int) -> None:
        self.log_dict({f"train/{k}": v for k, v in values.items()}, on_step=True,
                      on_epoch=True, prog_bar=False, batch_size=batch_size, sync_dist=False)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        """Encode a batch of images (loader 0) or captions (loader 1) with every network."""
        if dataloader_idx == 0:
            images = [encode_images(net, batch).float() for net in self.nets]
            self.evaluation.update(batch["index"], images)
        else:
            lengths = batch["lengths"]
            captions = [net.encode_captions(batch["tokens"], lengths).float() for net in self.nets]
            self.evaluation.update(batch["index"], captions, lengths=lengths)

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
        return self.evaluation.compute(partial(self.similarities, site=site), im_div, protocols)

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking or not self.evaluation.cap_index:
            self.evaluation.reset()  # the sanity check only runs the steps
            return
        results = self.evaluate(["1k"]).results
        selected = list(results)[-1]  # the ensemble when there are several networks
        if self.trainer.is_global_zero:
            print(summary_line(self.current_epoch, selected, results[selected]["1k"]), flush=True)
        for key, value in logged_val_metrics(results, selected).items():
            self.log(key, value, prog_bar=key == "val/rsum", sync_dist=False, rank_zero_only=False)
        if self.trainer.state.fn == "fit":  # model selection happens while fitting only
            value = selected_rsum(results[selected]["1k"]["rsum"], self.selectable(self.current_epoch))
            self.log(SELECTED_KEY, value, sync_dist=False, rank_zero_only=False)
        self.evaluation.reset()

    def on_test_epoch_end(self) -> None:
        dm = getattr(self.trainer, "datamodule", None)
        results = self.evaluate(list(getattr(dm, "test_protocols", ["1k"]))).results
        for key, value in logged_test_metrics(results).items():
            self.log(key, value)
        out = Path(self.trainer.log_dir or self.trainer.default_root_dir)  # every rank asks (DDP)
        if self.trainer.is_global_zero:
            print("\n" + format_table(results))
            write_results(results, out)
        self.evaluation.reset()

    def on_fit_start(self) -> None:
        """Warn if a best checkpoint monitors ``val/rsum`` while some epochs are excluded."""
        check_selection_monitor(self.trainer, self.selectable)

    def is_warmup_epoch(self, epoch: int) -> bool:
        """Whether ``epoch`` is a warm-up epoch (none here): validated, selected only with
        ``select_warmup`` (the official codes select among the main epochs, spec 4.2.3, 5.5)."""
        return False

    def selectable(self, epoch: int) -> bool:
        """Whether ``epoch`` may be the best checkpoint; a method may narrow it (call this)."""
        return bool(self.hparams.get("select_warmup", False)) or not self.is_warmup_epoch(epoch)
