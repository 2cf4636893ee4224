"""RCL: robust contrastive learning with the complementary contrastive loss (RCL, TPAMI 2023;
spec 4.3).

One network (SGR or SAF, trained separately; "RCL-SGRAF" is their test-time ensemble), no
warm-up, no sample selection: the loss alone is robust. Per batch, the matching
probabilities ``P_i2t``/``P_t2i`` (softmax of ``S / tau`` over the batch, RCL Eq. 5-6) feed
the complementary loss ``sum_{j != i} phi(P_ij)`` with a bounded ``phi`` (Eq. 14-18), mean
over the batch in both directions (the official reduction).

``ablation`` swaps in the losses of the paper's Tables 6/7 (TR, TR-HN, CL, NL, single-negative
MAE) so those rows can be reproduced with the same pipeline.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor

from ncl.data.samplers import METHOD_STREAM, epoch_seed
from ncl.losses import (RCL_ABLATION_REDUCTION, ComplementaryKind, complementary_contrastive_loss,
                        rcl_ablation_loss)
from ncl.methods.base import BackboneFactory, RetrievalMethod
from ncl.methods.declaration import MethodSpec, RegressionCase, Row, TINY_DATA_ARGS, TINY_RUN_ARGS
from ncl.methods.skeleton import check_ranges
from ncl.models.contracts import forward_batch


def rcl_optimizer(params) -> torch.optim.Optimizer:  # noqa: ANN001 - parameters iterable
    """Adam, lr 5e-4: RCL's ``opts.py`` default (spec 4.3.3)."""
    return torch.optim.Adam(params, lr=5e-4)


class RCL(RetrievalMethod):
    """RCL LightningModule.

    Args:
        tau: temperature of the matching probabilities (0.05).
        loss: the bounded complementary function phi: ``log`` (default, Eq. 15), ``exp``
            (Eq. 16), ``gce`` (Eq. 17, exponent ``q``), ``tan`` (Eq. 18), ``mae`` (Eq. 14).
        q: GCE exponent (the official ``--margin``, 0.2).
        negative_ratio: fraction of in-batch negatives used per row; ``-1`` uses all
            (official default ``--ratio -1``).
        eps: the official numerical guard (1e-10); 0 gives the paper's equations exactly.
        ablation: ``none`` (CCL) or one of the ablation losses: ``tr`` (triplet, summed
            negatives), ``tr_hn`` (hardest negative), ``cl`` (InfoNCE), ``nl`` (negative
            learning, one negative), ``mae_single`` (Table 6's single-negative MAE).
        margin: triplet margin for the ``tr``/``tr_hn`` ablations.
        seed: seed of the generator that draws random negatives (``negative_ratio`` in
            (0, 1) and the single-negative ablations); ``None`` (default): the run's
            ``seed_everything``.
        **kwargs: the options of :class:`~ncl.methods.base.RetrievalMethod` (``lr_update``,
            ``grad_clip``, ``eval_shard_size``, ``eval_autocast``, ``select_warmup``).
    """

    spec: ClassVar[MethodSpec] = MethodSpec(
        # the quickstart's own method: no overrides on configs/quickstart.yaml
        rows=(Row("rcl", "RCL-{}", order=10, small_backbones=("SGR",), paper_config="rcl_{bb}_{ds}"),),
        # random negatives (negative_ratio in (0, 1)) exercise the method's own generator
        tiny={"rcl": {"negative_ratio": 0.5}},
        regression={
            "rcl": RegressionCase("rcl_sgr_f30k.yaml", (*TINY_RUN_ARGS, "--model.negative_ratio=0.5")),
            "rcl_vse": RegressionCase("rcl_vse_synthetic.yaml", (
                "--model.backbone.init_args.img_dim=16", "--model.backbone.init_args.word_dim=8",
                "--model.backbone.init_args.embed_size=16", *TINY_DATA_ARGS))},
        config_prefixes=("rcl_",))

    def __init__(self, vocab_size: int, backbone: BackboneFactory, *,
                 optimizer: OptimizerCallable = rcl_optimizer, tau: float = 0.05,
                 loss: ComplementaryKind = "log", q: float = 0.2,
                 negative_ratio: float = -1.0, eps: float = 1e-10,
                 ablation: Literal["none", "tr", "tr_hn", "cl", "nl", "mae_single"] = "none",
                 margin: float = 0.2, seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(vocab_size, backbone, optimizer=optimizer, n_networks=1, **kwargs)
        # tau 0 or q 0 failed in the first training step, with a traceback from the loss
        check_ranges(self.hparams, positive=["tau"], nonnegative=["eps", "margin"], fractions=["q"])
        self._generator: torch.Generator | None = None

    def on_train_epoch_start(self) -> None:
        super().on_train_epoch_start()
        self._generator = None  # re-created from (seed, epoch, rank): exact after a resume

    def generator(self, device: torch.device) -> torch.Generator:
        """The per-rank generator of random negatives for this epoch, on the batch's device.

        Seeded from ``(seed, epoch, rank)`` at the epoch's first draw, so that an epoch draws
        the same negatives in a resumed run as in an uninterrupted one.
        """
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device=device)
            seed = self.training_seed if self.hparams.seed is None else self.hparams.seed
            self._generator.manual_seed(epoch_seed(seed, self.current_epoch,
                                                   METHOD_STREAM, self.global_rank))
        return self._generator

    def rcl_loss(self, sims: Tensor) -> Tensor:
        """Scalar loss of a ``(B, B)`` similarity matrix, reduced as the official code."""
        hp = self.hparams
        if hp.ablation == "none":
            per_sample = complementary_contrastive_loss(
                sims, tau=hp.tau, loss=hp.loss, q=hp.q, negative_ratio=hp.negative_ratio,
                generator=self.generator(sims.device), eps=hp.eps)
            return per_sample.mean()
        per_sample = rcl_ablation_loss(sims, hp.ablation, tau=hp.tau, margin=hp.margin,
                                       generator=self.generator(sims.device), eps=hp.eps)
        return per_sample.sum() if RCL_ABLATION_REDUCTION[hp.ablation] == "sum" else per_sample.mean()

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        sims = forward_batch(self.net, batch)  # (B, B)
        loss = self.rcl_loss(sims)
        self.log_train({"loss": loss}, batch_size=sims.shape[0])
        return loss
