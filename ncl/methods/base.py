"""The shared base of every retrieval method: backbone(s), optimiser and schedule, and the
validation/test protocol (spec 4.1, 5).

A method is handed a *backbone factory* (``class_path`` in YAML, called with the vocabulary
size) so that it can build as many independent networks as it needs (one for RCL, two for
NCR's co-teaching). Subclasses implement ``training_step``; evaluation is shared: every image
and caption of the split is encoded once per network, similarities are computed in shards,
the networks' matrices are averaged when there are several, and recall/rSum follow the
official protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor, nn

from ncl.data.contracts import RetrievalData
from ncl.data.samplers import GLOBAL_TORCH_STREAM, epoch_seed, global_seed
from ncl.data.precomp import nonfinite_rows
from ncl.errors import ConfigError, DataError, TrainingError
from ncl.evaluation.protocol import evaluate_systems
from ncl.evaluation.report import format_table, write_results
from ncl.evaluation.similarity import ensemble
from ncl.training.distributed import broadcast_buffers_, rank_sharded_similarity

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
    """

    network_names: tuple[str, ...] = ("net",)

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = default_optimizer, lr_update: int = 30,
                 grad_clip: float = 2.0, eval_shard_size: int = 1000, n_networks: int = 1) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["backbone", "optimizer"])
        if n_networks < 1:
            raise ConfigError(f"model.n_networks must be >= 1, got {n_networks}")
        if lr_update < 1:
            raise ConfigError(f"model.lr_update must be >= 1 epoch, got {lr_update}")
        self.nets = nn.ModuleList([backbone(vocab_size) for _ in range(n_networks)])
        self.backbone_factory = backbone  # re-initialisation (CRCL's self-refining pieces)
        if n_networks > 1:
            self.network_names = tuple(chr(ord("A") + i) for i in range(n_networks))
        self.optimizer_factory = optimizer
        self._eval_store: dict[str, list[Tensor]] = {}
        self._training_seed: int | None = None

    # ------------------------------------------------------------------ setup / optim
    @property
    def net(self) -> nn.Module:
        """The first (or only) network."""
        return self.nets[0]

    def setup(self, stage: str) -> None:
        """Check that the data's region count and feature size fit the backbone."""
        dm = getattr(self.trainer, "datamodule", None)
        if not isinstance(dm, RetrievalData):  # no ncl DataModule: nothing to check against
            return
        regions, dim = dm.feature_shape()
        for name, net in zip(self.network_names, self.nets):
            want = (getattr(net, "num_regions", regions), getattr(net, "img_dim", dim))
            if want != (regions, dim):
                raise ConfigError(
                    f"the features in {dm.data_dir} have {regions} regions x {dim} dims, but "
                    f"the backbone ({name}) is configured for {want[0]} x {want[1]}; set "
                    f"model.backbone.init_args.num_regions={regions} and img_dim={dim}")

    def lr_factor(self, epoch: int) -> float:
        """Learning-rate multiplier of ``epoch``: the schedule hook of every method.

        Default: the official step schedule, ``0.1 ** (epoch // lr_update)`` (spec 4.1).
        Methods with warm-up or restarting pieces override it (NCR counts co-training epochs
        only); a pure function of the epoch, so a resumed run needs no scheduler state.
        """
        return 0.1 ** (epoch // self.hparams.lr_update)

    def configure_optimizers(self) -> Any:
        """One optimiser per network, each with ``LambdaLR(lr_factor)`` stepped per epoch."""
        configs = []
        for net in self.nets:
            opt = self.optimizer_factory(net.parameters())
            sched = torch.optim.lr_scheduler.LambdaLR(opt, self.lr_factor)
            configs.append({"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}})
        return configs[0] if len(configs) == 1 else configs

    def apply_lr_factor(self) -> None:
        """Set this epoch's learning rates directly (manual optimisation: Lightning steps no
        scheduler then). ``initial_lr`` is set by ``LambdaLR``."""
        factor = self.lr_factor(self.current_epoch)
        optimizers = self.optimizers()
        for opt in optimizers if isinstance(optimizers, list) else [optimizers]:
            for group in opt.optimizer.param_groups:
                group["lr"] = group["initial_lr"] * factor

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer,
                                    gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Clip the global norm at ``grad_clip`` (the official scripts' ``clip_grad_norm_``)."""
        if self.hparams.grad_clip > 0:
            self.clip_gradients(optimizer, gradient_clip_val=self.hparams.grad_clip,
                                gradient_clip_algorithm="norm")

    # ------------------------------------------------------------------ random streams
    @property
    def training_seed(self) -> int:
        """The run's seed (``seed_everything``), fixed at the first epoch and checkpointed."""
        if getattr(self, "_training_seed", None) is None:
            self._training_seed = global_seed()
        return self._training_seed

    def on_train_epoch_start(self) -> None:
        """Reseed torch's global stream (dropout, any draw a method makes) from
        ``(seed, epoch, rank)``: an epoch then draws the same numbers whether the run went
        straight through or was resumed from the previous epoch's checkpoint, which torch's
        state alone (not in a Lightning checkpoint) could not guarantee."""
        torch.manual_seed(epoch_seed(self.training_seed, self.current_epoch, GLOBAL_TORCH_STREAM,
                                     self.global_rank))
        if not self.automatic_optimization:
            self.apply_lr_factor()

    def training_state(self) -> dict[str, Any]:
        """The method's per-sample and schedule state (divisions, soft labels, targets):
        saved with every checkpoint, identical on every rank. Stateless methods have none."""
        return {}

    def load_training_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`training_state` returned."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["ncl_training_seed"] = self.training_seed
        state = self.training_state()
        if state:
            checkpoint["ncl_training_state"] = state

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # A resumed run keeps its seed even if the config's seed_everything was ``true``.
        if "ncl_training_seed" in checkpoint:
            self._training_seed = int(checkpoint["ncl_training_seed"])
        if "ncl_training_state" in checkpoint:
            self.load_training_state(checkpoint["ncl_training_state"])
        elif checkpoint.get("callbacks"):  # older checkpoints kept the state in callbacks
            self.load_training_state({"legacy_callbacks": checkpoint["callbacks"]})

    # ------------------------------------------------------------------ helpers
    def batch_similarity(self, batch: dict[str, Tensor], net: nn.Module | None = None) -> Tensor:
        """``(B, B)`` similarities of every image/caption pair of a training batch."""
        extra = {"image_lengths": batch["image_lengths"]} if "image_lengths" in batch else {}
        return (net or self.net)(batch["images"], batch["tokens"], batch["lengths"], **extra)

    def log_train(self, values: dict[str, Tensor | float], batch_size: int) -> None:
        self.log_dict({f"train/{k}": v for k, v in values.items()}, on_step=True,
                      on_epoch=True, prog_bar=False, batch_size=batch_size, sync_dist=False)

    # ------------------------------------------------------------------ evaluation
    def _eval_step(self, batch: dict[str, Tensor], dataloader_idx: int) -> None:
        store = self._eval_store
        if dataloader_idx == 0:  # images
            store.setdefault("img_index", []).append(batch["index"])
            # image_lengths only when region counts differ (collate), for backbones that mask
            extra = {"image_lengths": batch["image_lengths"]} if "image_lengths" in batch else {}
            for k, net in enumerate(self.nets):
                store.setdefault(f"img{k}", []).append(net.encode_images(batch["images"], **extra).float())
        else:  # captions
            store.setdefault("cap_index", []).append(batch["index"])
            store.setdefault("cap_len", []).append(batch["lengths"])
            for k, net in enumerate(self.nets):
                emb = net.encode_captions(batch["tokens"], batch["lengths"]).float()
                store.setdefault(f"cap{k}", []).append(emb)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, dataloader_idx)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, dataloader_idx)

    def on_validation_epoch_start(self) -> None:
        self._eval_store = {}
        # Each rank encodes part of the split in eval mode: with rank 0's BatchNorm statistics
        # (those the checkpoint holds), not its own drifted ones (broadcast_buffers_).
        if self.trainer.world_size > 1:
            broadcast_buffers_(*self.nets)

    on_test_epoch_start = on_validation_epoch_start

    def _gathered(self, key: str, index_key: str) -> Tensor:
        """Concatenate a stored embedding list over batches and ranks, ordered by index.

        The distributed sampler pads with repeated samples; scattering by dataset index
        makes the repeats harmless.
        """
        index = torch.cat(self._eval_store[index_key])
        rows = self._eval_store[key]
        width = max(r.shape[1] for r in rows) if rows[0].dim() == 3 else None
        if width is not None:
            rows = [nn.functional.pad(r, (0, 0, 0, width - r.shape[1])) for r in rows]
        local = torch.cat(rows)
        if self.trainer.world_size > 1:
            index, local = _all_gather_rows(self, index, local)
        out = local.new_zeros((int(index.max()) + 1, *local.shape[1:]))
        out[index] = local
        return out

    def _im_div(self, split_name: str) -> int:
        dm = getattr(self.trainer, "datamodule", None)
        split = getattr(dm, split_name, None)
        return int(split.im_div) if split is not None else 1

    def compute_similarities(self, im_div: int) -> dict[str, Tensor]:
        """Per-network similarity matrices, and their mean when there are several.

        When evaluation was cut short (``limit_val_batches``), only the first images whose
        captions were all encoded are evaluated. Under DDP every rank gathers all
        embeddings, scores its own blocks of each matrix and receives the others'
        (:func:`ncl.training.distributed.rank_sharded_similarity`), so all ranks return the
        same matrices, bit-identical to one process's.
        """
        lengths = self._gathered("cap_len", "cap_index")
        n_img = min(int(torch.cat(self._eval_store["img_index"]).max()) + 1, lengths.shape[0] // im_div)
        if self.trainer.world_size > 1:  # other ranks encoded other rows: keep the full split
            n_img = min(self._gathered("img0", "img_index").shape[0], lengths.shape[0] // im_div)
        lengths = lengths[: n_img * im_div]
        sims: dict[str, Tensor] = {}
        for k, (name, net) in enumerate(zip(self.network_names, self.nets)):
            img = self._gathered(f"img{k}", "img_index")[:n_img]
            cap = self._gathered(f"cap{k}", "cap_index")[: n_img * im_div]
            self.check_finite_embeddings(name, img, cap, lengths)
            # Under DDP each rank scores its share of the blocks (bit-identical to one process)
            sims[name] = rank_sharded_similarity(
                net.similarity, img, cap, lengths, self.hparams.eval_shard_size,
                device=self.device, description=f"{self._eval_split_info()[0]} similarity ({name})")
            self.check_finite_similarities(name, sims[name])
        if len(sims) > 1:
            sims["+".join(self.network_names)] = ensemble(list(sims.values()))
        return sims

    # ------------------------------------------------------------------ model selection
    def is_warmup_epoch(self, epoch: int) -> bool:
        """Whether ``epoch`` is a warm-up epoch (default: no method has one).

        While fitting, a warm-up epoch's validation is logged under ``val_warmup/*`` (and
        ``val_warmup_<network>/*``) instead of ``val/*``, so a best checkpoint monitoring
        ``val/rsum`` never selects it: the official code validates its warm-up but selects
        among the main epochs only (spec 4.2.3, 5.5). Methods with a warm-up override this
        hook and take an init argument ``select_warmup`` (true: log and select as usual).
        """
        return False

    def _excluded_from_selection(self) -> bool:
        """This validation is a warm-up epoch's, inside ``fit``, and not to be selected."""
        trainer = self.trainer
        return (trainer.state.fn == "fit" and self.is_warmup_epoch(self.current_epoch)
                and not self.hparams.get("select_warmup", False))

    def _skip_monitored_checkpoints(self) -> None:
        """Let every checkpoint callback monitoring a validation key (``val/*``, ``val_A/*``,
        not ``val_warmup*``) skip this epoch.

        No such key is logged in a warm-up epoch, and Lightning 2.6's ModelCheckpoint
        raises "could not find the monitored key" when its monitor is missing after a
        validation run. It skips an epoch whose global step it has already saved at
        (``_should_skip_saving_checkpoint``), so that step is what these callbacks are told;
        the next epoch has a new step. Callbacks without a monitor (``last.ckpt``) still save.
        ``tests/cli/test_selection.py`` checks this through the CLI, so a Lightning change
        that breaks it fails there.
        """
        for callback in self.trainer.checkpoint_callbacks:
            monitor = getattr(callback, "monitor", None) or ""
            if monitor.startswith("val") and not monitor.startswith("val_warmup"):
                callback._last_global_step_saved = self.trainer.global_step

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking or not self._eval_store.get("cap_index"):
            self._eval_store = {}  # the sanity check only runs the steps
            return
        im_div = self._im_div("val_data")
        sims = self.compute_similarities(im_div)
        results = evaluate_systems(sims, im_div, ["1k"])
        selected = list(sims)[-1]  # the ensemble when there are several networks
        if self.trainer.is_global_zero:
            print(_summary_line(self.current_epoch, selected, results[selected]["1k"]), flush=True)
        warmup = self._excluded_from_selection()
        if warmup:
            self._skip_monitored_checkpoints()
        for name, by_protocol in results.items():
            prefix = "val" if name == selected else f"val_{name}"
            prefix = prefix.replace("val", "val_warmup", 1) if warmup else prefix
            for key in ("rsum", "i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10"):
                self.log(f"{prefix}/{key}", by_protocol["1k"][key], prog_bar=key == "rsum" and prefix == "val",
                         sync_dist=False, rank_zero_only=False)
        self._eval_store = {}

    def on_test_epoch_end(self) -> None:
        im_div = self._im_div("test_data")
        sims = self.compute_similarities(im_div)
        dm = getattr(self.trainer, "datamodule", None)
        protocols = list(getattr(dm, "test_protocols", ["1k"]))
        results = evaluate_systems(sims, im_div, protocols)
        for name, by_protocol in results.items():
            for protocol, metrics in by_protocol.items():
                for key in ("rsum", "i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10"):
                    self.log(f"test/{name}/{protocol}/{key}", metrics[key])
        # trainer.log_dir is a broadcast from rank 0 under DDP: every rank must ask for it.
        out = Path(self.trainer.log_dir or self.trainer.default_root_dir)
        if self.trainer.is_global_zero:
            print("\n" + format_table(results))
            write_results(results, out)
        self._eval_store = {}

    # ------------------------------------------------------------------ NaN / Inf
    def on_before_backward(self, loss: Tensor) -> None:
        """Stop at the first NaN/Inf loss, for every method.

        Lightning calls this hook before every backward pass, with automatic optimisation
        and with ``manual_backward`` (NCR/LNC) alike. Raising here means no optimiser step
        ever uses the loss, so no later checkpoint can hold weights from the diverged step.
        Under DDP every rank takes the same decision (one scalar all-reduce), so no rank is
        left waiting in the backward pass's collectives.
        """
        local_bad = not bool(torch.isfinite(loss.detach()).all())
        trainer = self._trainer
        bad = local_bad
        if trainer is not None and trainer.world_size > 1:
            bad = trainer.strategy.reduce_boolean_decision(local_bad, all=False)
        if bad:
            raise TrainingError(_diverged_message(self, loss, local_bad))

    def _eval_split_info(self) -> tuple[str, Any]:
        """``("validation" | "test", the PrecompSplit being evaluated or None)``."""
        testing = self._trainer is not None and self.trainer.testing
        dm = getattr(self._trainer, "datamodule", None)
        return ("test" if testing else "validation",
                getattr(dm, "test_data" if testing else "val_data", None))

    def check_finite_embeddings(self, name: str, img: Tensor, cap: Tensor, lengths: Tensor) -> None:
        """Raise one clear error when network ``name``'s evaluation embeddings hold NaN/Inf.

        Images with non-finite embeddings are looked up in the split's feature file: when
        their features hold NaN/Inf the data is at fault (:class:`DataError` naming the
        file and the images), otherwise the weights are (:class:`TrainingError`).

        Args:
            name: network name, for the message.
            img: ``(N_img, R, E)`` image embeddings in dataset order.
            cap: ``(N_cap, L, E)`` caption embeddings (or pooled ``(N_cap, E)``).
            lengths: ``(N_cap,)`` caption lengths; padding beyond them is not checked.
        """
        bad_img = _nonfinite_rows(img)
        bad_cap = _nonfinite_rows(cap, lengths if cap.dim() == 3 else None)
        if not len(bad_img) and not len(bad_cap):
            return
        label, split = self._eval_split_info()
        where = _split_files(label, split)
        if len(bad_img) and split is not None:
            bad_feat = _nonfinite_feature_rows(split.features, bad_img)
            if len(bad_feat):
                raise DataError(
                    f"the {label} features in {split.feature_path} hold NaN or Inf in "
                    f"{len(bad_feat)} of {split.n_images} images ({_images(bad_feat)}), so "
                    f"their embeddings are NaN/Inf; repair or remove these images "
                    f"(--data.nan_check full scans every feature file before training)")
        raise TrainingError(
            f"network {name} ({type(self).__name__}) gives NaN/Inf embeddings on {where} for "
            f"{len(bad_img)} of {img.shape[0]} images and {len(bad_cap)} of {cap.shape[0]} "
            f"captions although the features are finite: its weights are NaN/Inf (a diverged "
            f"run or a broken checkpoint; check the learning rate)")

    def check_finite_similarities(self, name: str, sims: Tensor) -> None:
        """Raise one clear error when network ``name``'s ``(N_img, N_cap)`` similarities hold
        NaN/Inf although its embeddings are finite (an overflow in the similarity head)."""
        bad = _nonfinite_rows(sims)
        if len(bad):
            label, split = self._eval_split_info()
            raise TrainingError(
                f"network {name} ({type(self).__name__}) gives NaN/Inf similarities on "
                f"{_split_files(label, split)} for {len(bad)} of {sims.shape[0]} images "
                f"({_images(bad)}) although their embeddings are finite: the similarity "
                f"head's weights are NaN/Inf or overflow (check the learning rate)")


def _first(indices: Any, limit: int = 5) -> str:
    """``"3, 7, 9"`` or ``"3, 7, 9, 12, 15 (and 40 more)"``."""
    values = [int(i) for i in indices]
    more = f" (and {len(values) - limit} more)" if len(values) > limit else ""
    return ", ".join(str(v) for v in values[:limit]) + more


def _images(indices: Any) -> str:
    """``"image 3"`` or ``"images 3, 7"`` for a message."""
    return ("image " if len(indices) == 1 else "images ") + _first(indices)


def _split_files(label: str, split: Any) -> str:
    """``the validation split (<features>, <captions>)`` for messages."""
    if split is None or getattr(split, "feature_path", None) is None:
        return f"the {label} split"
    return f"the {label} split ({split.feature_path}, {split.caption_path})"


def _nonfinite_rows(values: Tensor, lengths: Tensor | None = None, chunk: int = 1024) -> Tensor:
    """Indices of the rows of ``values`` holding NaN/Inf, in row blocks (bounded memory).

    With ``lengths`` (``values`` is ``(N, L, E)`` padded), positions ``>= lengths[i]`` of row
    ``i`` are ignored.
    """
    bad = []
    for start in range(0, values.shape[0], chunk):
        block = ~torch.isfinite(values[start:start + chunk])
        if lengths is not None:
            steps = torch.arange(block.shape[1], device=block.device)
            block &= (steps[None, :] < lengths[start:start + chunk, None].to(block.device))[..., None]
        bad.append(block.flatten(1).any(dim=1).nonzero().flatten().cpu() + start)
    return torch.cat(bad) if bad else torch.zeros(0, dtype=torch.long)


def _nonfinite_feature_rows(features: Any, rows: Tensor, chunk: int = 256) -> list[int]:
    """Those of ``rows`` whose features (a memory map) hold NaN/Inf, read a block at a time."""
    rows_list = sorted(int(r) for r in rows if int(r) < len(features))
    bad: list[int] = []
    for start in range(0, len(rows_list), chunk):
        block = rows_list[start:start + chunk]
        bad.extend(block[i] for i in nonfinite_rows(features[block]))
    return bad


def _diverged_message(module: L.LightningModule, loss: Tensor, local_bad: bool) -> str:
    """The one-line message of a NaN/Inf training loss."""
    what = ("NaN" if bool(torch.isnan(loss.detach()).any()) else "Inf") if local_bad else \
        "NaN or Inf on another rank"
    return (f"training diverged: the loss of {type(module).__name__} is {what} at global step "
            f"{module.global_step} (epoch {module.current_epoch}); stopped before the backward "
            f"pass, so no checkpoint holds this step. Check the learning rate "
            f"(model.init_args.optimizer) and the features: --data.nan_check full scans every "
            f"feature file for NaN/Inf")


def _summary_line(epoch: int, name: str, m: dict[str, float]) -> str:
    """One printed line of validation results."""
    return (f"epoch {epoch} validation [{name}]: i2t R@1/5/10 {m['i2t_r1']:.1f}/{m['i2t_r5']:.1f}/"
            f"{m['i2t_r10']:.1f}  t2i R@1/5/10 {m['t2i_r1']:.1f}/{m['t2i_r5']:.1f}/"
            f"{m['t2i_r10']:.1f}  rSum {m['rsum']:.1f}")


def _all_gather_rows(module: L.LightningModule, index: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    """All-gather ragged ``(n_rank, ...)`` rows from every rank (padded to the largest)."""
    shape = torch.tensor(rows.shape[:2] if rows.dim() == 3 else (rows.shape[0], 0), device=rows.device)
    sizes = module.all_gather(shape).reshape(-1, 2)  # (W, 2): rows and (3-D only) length
    if rows.dim() == 3:  # captions: pad the token axis to the longest on any rank
        rows = nn.functional.pad(rows, (0, 0, 0, int(sizes[:, 1].max()) - rows.shape[1]))
    width = int(sizes[:, 0].max())
    pad_rows = torch.zeros((width - rows.shape[0], *rows.shape[1:]), dtype=rows.dtype, device=rows.device)
    pad_index = torch.full((width - index.shape[0],), -1, dtype=index.dtype, device=index.device)
    all_rows = module.all_gather(torch.cat([rows, pad_rows]))  # (W, width, ...)
    all_index = module.all_gather(torch.cat([index, pad_index]))  # (W, width)
    keep = all_index.flatten() >= 0
    return all_index.flatten()[keep], all_rows.flatten(0, 1)[keep]
