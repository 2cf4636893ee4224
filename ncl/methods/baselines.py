"""Non-robust baselines the papers compare against (spec 4.2.1, RCL/NCR tables).

* :class:`Triplet` - hinge triplet loss: ``negatives="hardest"`` is VSE++ (the plain
  "SGR"/"SAF" rows), ``"sum"`` sums over all negatives, and ``warmup_epochs > 0`` gives
  "SGR*" (summed for the first epochs, hardest afterwards).
* :class:`InfoNCE` - symmetric InfoNCE over the batch.

Both accept ``clean_only=True``: the "-C" upper reference ("SGR-C") that trains only on the
truly clean pairs. It reads the ground-truth mask *on purpose*; no other method may. Data
with real noise (CC152K) has no ground truth, so there it stops with one error.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor

from ncl.data.contracts import RetrievalData, clean_mask_known, retrieval_data
from ncl.errors import ConfigError
from ncl.losses import RCL_EPS, info_nce, triplet_loss
from ncl.methods.base import BackboneFactory, RetrievalMethod, default_optimizer
from ncl.methods.declaration import BENCHMARK_WARMUP, MethodSpec, RegressionCase, Row, TINY_RUN_ARGS
from ncl.methods.skeleton import check_ranges
from ncl.models.contracts import forward_batch


def clean_only_mask(data: RetrievalData) -> np.ndarray:
    """The ground-truth clean mask the "-C" oracle trains on.

    Raises:
        ConfigError: the data has real noise (CC152K), so nobody knows which pairs are clean;
            the mask would call every pair clean and the oracle would silently become the
            plain baseline.
    """
    if not clean_mask_known(data):
        raise ConfigError(
            f"model.init_args.clean_only trains on the ground-truth clean pairs, but "
            f"{getattr(data, 'data_dir', type(data).__name__)} has real noise (data.real_noise, "
            f"CC152K) and no ground truth; the '-C' oracle exists only for synthetic noise "
            f"(F30K, COCO): remove clean_only")
    return data.clean_mask


class _Baseline(RetrievalMethod):
    """Shared ``clean_only`` handling.

    Args:
        clean_only: train on the ground-truth clean pairs only (the "-C" oracle).
        **kwargs: the options of :class:`~ncl.methods.base.RetrievalMethod` (``lr_update``,
            ``grad_clip``, ``eval_shard_size``, ``eval_autocast``, ``select_warmup``).
    """

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = default_optimizer, clean_only: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(vocab_size, backbone, optimizer=optimizer, n_networks=1, **kwargs)
        self.clean_only = clean_only
        self._clean: Tensor | None = None

    def on_fit_start(self) -> None:
        super().on_fit_start()
        if self.clean_only:
            data = retrieval_data(self.trainer, "model.init_args.clean_only")
            self._clean = torch.as_tensor(clean_only_mask(data), dtype=torch.bool)

    def select(self, batch: dict[str, Tensor]) -> dict[str, Tensor] | None:
        """The batch, restricted to ground-truth clean pairs when ``clean_only``."""
        if not self.clean_only:
            return batch
        keep = self._clean[batch["index"].cpu()].to(batch["index"].device)
        if int(keep.sum()) < 2:  # BatchNorm and in-batch negatives need two pairs
            return None
        return {k: v[keep] for k, v in batch.items()}

    def loss(self, sims: Tensor) -> Tensor:
        raise NotImplementedError

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor | None:
        selected = self.select(batch)
        if selected is None:
            if self.trainer.world_size == 1:
                return None  # one process: skip the step, as before
            # Under DDP every rank must run the same backward (its gradient all-reduce); Lightning
            # refuses a skipped step there (RuntimeError). A zero loss through the whole
            # batch gives zero gradients for every parameter; the average over ranks then counts
            # this rank's share as zero.
            return forward_batch(self.net, batch).sum() * 0.0
        batch = selected
        sims = forward_batch(self.net, batch)  # (B, B)
        loss = self.loss(sims)
        self.log_train({"loss": loss}, batch_size=sims.shape[0])
        return loss


class Triplet(_Baseline):
    """Hinge triplet ranking loss; summed over the batch as the official code does.

    Args:
        margin: the hinge margin (0.2).
        negatives: ``hardest`` (VSE++, max over in-batch negatives) or ``sum``.
        warmup_epochs: epochs of summed negatives before switching to ``negatives``
            ("SGR*" uses a few epochs of warm-up with hardest negatives afterwards). They are
            warm-up epochs for model selection too: selected only with ``select_warmup``.
    """

    spec: ClassVar[MethodSpec] = MethodSpec(
        rows=(Row("triplet", "{} (hardest triplet)", order=20, paper_config="baseline_triplet_{bb}_{ds}",
                  small_backbones=("SGR", "SAF"),
                  overrides=("--model=ncl.methods.baselines.Triplet", "--model.negatives=hardest")),
              Row("triplet_sum", "{} summed triplet", order=30, paper_config="baseline_triplet_sum_{bb}_{ds}",
                  small_backbones=("SGR",),
                  overrides=("--model=ncl.methods.baselines.Triplet", "--model.negatives=sum")),
              # "SGR*": summed negatives for the first 5 epochs, hardest negatives afterwards;
              # select_warmup: its warm-up epochs were selectable when the grid was measured
              # (they count as warm-up for selection since issue 37).
              Row("triplet_warmup", "{}* (warm-up, then hardest)", order=40, warmup=True,
                  small_backbones=("SGR", "SAF"),
                  paper_config="baseline_triplet_warmup_{bb}_{ds}",
                  overrides=("--model=ncl.methods.baselines.Triplet", "--model.negatives=hardest",
                             f"--model.warmup_epochs={BENCHMARK_WARMUP}", "--model.select_warmup=true")),
              # the "-C" references (clean pairs only) close the tables
              Row("clean", "{}-C (clean only)", order=900,
                  overrides=("--model=ncl.methods.baselines.Triplet", "--model.negatives=hardest",
                             "--model.clean_only=true")),
              Row("clean_sum", "{}-C summed (clean only)", order=910,
                  overrides=("--model=ncl.methods.baselines.Triplet", "--model.negatives=sum",
                             "--model.clean_only=true"))),
        tiny={"triplet_warmup": {"warmup_epochs": 1, "negatives": "hardest"}},
        regression={"triplet_warmup": RegressionCase("baseline_triplet_warmup_sgr_f30k.yaml",
                                                     (*TINY_RUN_ARGS, "--model.warmup_epochs=1"))},
        config_prefixes=("baseline_triplet",))

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = default_optimizer, margin: float = 0.2,
                 negatives: Literal["hardest", "sum"] = "hardest", warmup_epochs: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(vocab_size, backbone, optimizer=optimizer, **kwargs)
        check_ranges(self.hparams, integers={"warmup_epochs": 0}, nonnegative=["margin"])

    def loss(self, sims: Tensor) -> Tensor:
        hp = self.hparams
        negatives = "sum" if self.is_warmup_epoch(self.current_epoch) else hp.negatives
        return triplet_loss(sims, margin=hp.margin, negatives=negatives).sum()


class InfoNCE(_Baseline):
    """Symmetric InfoNCE with temperature ``tau``; mean over the batch."""

    spec: ClassVar[MethodSpec] = MethodSpec(
        rows=(Row("infonce", "{} InfoNCE", order=50, paper_config="baseline_infonce_{bb}_{ds}",
                  small_backbones=("SGR",),
                  overrides=("--model=ncl.methods.baselines.InfoNCE",)),),
        tiny={"infonce_clean": {"clean_only": True}},
        regression={"infonce": RegressionCase("baseline_infonce_sgr_f30k.yaml", TINY_RUN_ARGS),
                    "infonce_clean": RegressionCase("baseline_infonce_sgr_f30k.yaml",
                                                    (*TINY_RUN_ARGS, "--model.clean_only=true"))},
        config_prefixes=("baseline_infonce",))

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = default_optimizer, tau: float = 0.05,
                 **kwargs: Any) -> None:
        super().__init__(vocab_size, backbone, optimizer=optimizer, **kwargs)
        check_ranges(self.hparams, positive=["tau"])  # 0: a traceback in the first step

    def loss(self, sims: Tensor) -> Tensor:
        return info_nce(sims, self.hparams.tau, eps=RCL_EPS, reduction="mean").loss
