"""The training skeleton every method shares, kept beside the base class so that
:mod:`ncl.methods.base` reads as networks, optimisation and evaluation.

:class:`TrainingSkeleton` is a mixin of :class:`~ncl.methods.base.RetrievalMethod`. It owns, once:

* the warm-up: a method with a ``warmup_epochs`` option has that many warm-up epochs
  (:meth:`~TrainingSkeleton.is_warmup_epoch`), which model selection leaves out unless
  ``select_warmup``;
* the warm-up-then-step learning-rate schedule (:meth:`~TrainingSkeleton.lr_factor`): the step
  schedule counts from epoch 0 (``global``) or from the first epoch after the warm-up
  (``after_warmup``), by the method's ``lr_schedule`` option or, without one, its class's
  :attr:`~TrainingSkeleton.default_lr_schedule`;
* the callbacks: a method names its own in :meth:`~TrainingSkeleton.method_callbacks`;
  :class:`~ncl.callbacks.diagnostics.Diagnostics` is added when the ``diagnostics`` option is on;
* gradient clipping under manual optimisation (automatic optimisation clips in the base's
  ``configure_gradient_clipping``);
* a training plan: :meth:`~TrainingSkeleton.take_train_loader` hands the training loader to the
  method for a fit, and ``teardown`` gives it back;
* the per-network training logs of a method that steps one network at a time
  (:meth:`~TrainingSkeleton.log_net`).

Option range checks live in :func:`check_ranges` (one message per kind of rule).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Literal

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import Dataset

from ncl.callbacks.diagnostics import Diagnostics
from ncl.data.contracts import RetrievalData, retrieval_data
from ncl.errors import ConfigError
from ncl.training.schedule import step_decay

LrSchedule = Literal["after_warmup", "global"]


class TrainingSkeleton:
    """Warm-up, learning-rate schedule, callbacks, manual clipping and training-plan hooks of a
    LightningModule (used as a base class before ``L.LightningModule``)."""

    #: Where the step schedule starts for a method without an ``lr_schedule`` option: NCR/LNC
    #: and L2RM run their warm-up at lr0 (``after_warmup``); Triplet's "SGR*" counts from 0.
    default_lr_schedule: ClassVar[LrSchedule] = "global"
    #: Log ``train/lr_factor`` every epoch (NCR/LNC and L2RM).
    logs_lr_factor: ClassVar[bool] = False

    hparams: Any  # given by the LightningModule it is mixed into
    trainer: Any
    network_names: tuple[str, ...]
    automatic_optimization: bool
    _took_train_plan: bool = False

    # ------------------------------------------------------------------ warm-up and schedule
    @property
    def warmup_length(self) -> int:
        """The ``warmup_epochs`` option, 0 for a method without one."""
        return int(self.hparams.get("warmup_epochs", 0))

    def is_warmup_epoch(self, epoch: int) -> bool:
        """Whether ``epoch`` is a warm-up epoch (``epoch < warmup_epochs``): validated, selected
        only with ``select_warmup`` (the official codes select among the main epochs, spec
        4.2.3, 5.5). A method with another kind of warm-up (CRCL's frozen epochs) overrides it."""
        return epoch < self.warmup_length

    def lr_schedule_start(self) -> int:
        """The first epoch the step schedule counts: 0, or ``warmup_epochs`` (``after_warmup``)."""
        schedule = self.hparams.get("lr_schedule", self.default_lr_schedule)
        return self.warmup_length if schedule == "after_warmup" else 0

    def lr_factor(self, epoch: int) -> float:
        """Learning-rate multiplier of ``epoch`` (``LambdaLR``): lr0 until
        :meth:`lr_schedule_start`, then times 0.1 every ``lr_update`` epochs (spec 4.1)."""
        return step_decay(epoch, self.hparams.lr_update, self.lr_schedule_start())

    def extra_optimizers(self) -> list[torch.optim.Optimizer]:
        """Optimisers of parts other than the networks (L2RM's cost network), after theirs."""
        return []

    # ------------------------------------------------------------------ callbacks
    def method_callbacks(self) -> list[L.Callback]:
        """The callbacks the method attaches itself (its division, refinement, pieces)."""
        return []

    def configure_callbacks(self) -> list[L.Callback]:
        """:meth:`method_callbacks`, then :class:`~ncl.callbacks.diagnostics.Diagnostics` when
        the ``diagnostics`` option is on (it acts before an epoch's first batch only, so its
        place in the list does not matter)."""
        callbacks = list(self.method_callbacks())
        if self.hparams.get("diagnostics", False):
            callbacks.append(Diagnostics())
        return callbacks

    # ------------------------------------------------------------------ manual optimisation
    def clips(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether ``grad_clip`` applies to ``optimizer`` (all of them unless a method says)."""
        return True

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Manual optimisation: clip the global gradient norm at ``grad_clip`` (spec 4.1) here
        rather than before ``opt.step()``: Lightning calls this hook after the precision plugin
        unscaled the gradients (``16-mixed``), so the clip is in true units. Automatic
        optimisation clips in ``configure_gradient_clipping`` instead (not twice)."""
        if self.automatic_optimization or self.hparams.grad_clip <= 0 or not self.clips(optimizer):
            return
        self.clip_gradients(optimizer, gradient_clip_val=self.hparams.grad_clip,
                            gradient_clip_algorithm="norm")

    # ------------------------------------------------------------------ per-network logging
    def log_net(self, k: int, values: dict[str, Tensor], batch_size: int) -> None:
        """Log network ``k``'s ``values`` (a method that steps one network at a time, NCR/LNC) as ``train/<net>/<key>_step`` (this rank's value) and
        ``train/<net>/<key>_epoch`` (the mean over the epoch and the ranks).

        The names Lightning gives a value logged ``on_step`` and ``on_epoch`` at once, but two
        entries: with ``sync_dist`` Lightning all-reduces an ``on_step`` value at every step
        (a barrier and an all-reduce per key), while an ``on_epoch``-only value is accumulated
        on each rank and all-reduced once, when the epoch's mean is computed. In one process
        both are what one forked entry logged; under DDP the step values are rank 0's own, like
        :meth:`~ncl.methods.base.RetrievalMethod.log_train`'s.
        """
        name = self.network_names[k]
        self.log_dict({f"train/{name}/{key}_step": v for key, v in values.items()}, on_step=True,
                      on_epoch=False, batch_size=batch_size, sync_dist=False)
        self.log_dict({f"train/{name}/{key}_epoch": v for key, v in values.items()},
                      on_step=False, on_epoch=True, batch_size=batch_size, sync_dist=True)

    # ------------------------------------------------------------------ training plan
    def take_train_loader(self, plan: Callable[[Dataset], Iterable], needed_by: str) -> RetrievalData:
        """For a fit: the DataModule's training loader becomes ``plan(train_pairs())``, built
        anew every epoch (a method's batch plan); :meth:`teardown` restores the default."""
        dm = retrieval_data(self.trainer, needed_by)
        self.trainer.reload_dataloaders_every_n_epochs = 1
        dm.use_train_plan(plan)
        self._took_train_plan = True
        return dm

    def teardown(self, stage: str) -> None:
        """Give the training loader back to the DataModule if :meth:`take_train_loader` took it."""
        trainer = getattr(self, "_trainer", None)
        dm = getattr(trainer, "datamodule", None) if trainer is not None else None
        if self._took_train_plan and isinstance(dm, RetrievalData):
            dm.use_train_plan(None)
            self._took_train_plan = False


def check_ranges(hp: Mapping[str, Any], *, integers: Mapping[str, int] | None = None,
                 positive: Iterable[str] = (), nonnegative: Iterable[str] = (),
                 unit: Iterable[str] = (), open_unit: Iterable[str] = (),
                 fractions: Iterable[str] = (), optional_positive: Iterable[str] = (),
                 optional_nonnegative: Iterable[str] = (), batch_sizes: Iterable[str] = ()) -> None:
    """Raise ConfigError (a ValueError) naming the first ``model.*`` option out of range.

    Args:
        hp: the method's hyperparameters.
        integers: name -> least value of an integer option.
        positive: options that must be > 0; ``nonnegative``: >= 0; ``unit``: in [0, 1];
            ``open_unit``: in (0, 1); ``fractions``: in (0, 1].
        optional_positive: ``None`` or > 0; ``optional_nonnegative``: ``None`` or >= 0.
        batch_sizes: optional batch sizes: ``None`` or >= 2.
    """
    for name, least in (integers or {}).items():
        if int(hp[name]) != hp[name] or hp[name] < least:
            raise ConfigError(f"model.{name} must be an integer >= {least}, got {hp[name]}")
    for names, ok, rule in ((positive, lambda v: v > 0, "be > 0"),
                            (nonnegative, lambda v: v >= 0, "be >= 0"),
                            (unit, lambda v: 0.0 <= v <= 1.0, "lie in [0, 1]"),
                            (open_unit, lambda v: 0.0 < v < 1.0, "lie in (0, 1)"),
                            (fractions, lambda v: 0.0 < v <= 1.0, "lie in (0, 1]"),
                            (optional_positive, lambda v: v is None or v > 0, "be > 0 or null"),
                            (optional_nonnegative, lambda v: v is None or v >= 0, "be >= 0 or null")):
        for name in names:
            if not ok(hp[name]):
                raise ConfigError(f"model.{name} must {rule}, got {hp[name]}")
    for name in batch_sizes:
        if hp[name] is not None and hp[name] < 2:
            raise ConfigError(f"model.{name} must be >= 2 or null, got {hp[name]}")
