"""One per-epoch pass over the training set, then its result accepted: the shared skeleton of
:class:`~ncl.callbacks.division.GMMDivision` (the pass feeds a mixture, the method takes the
division) and :class:`~ncl.callbacks.refinement.MomentumRefinement`'s per-epoch path (the method
takes the values into its table: CRCL's paper rule, DECL's prediction).

A callback states its pass as a :class:`~ncl.callbacks.protocols.EpochPass` (due, spec,
accept); :func:`run_epoch_pass` runs it: if due, the eval-mode pass
(:func:`~ncl.training.passes.run_pass`, sharded over ranks and gathered by index) and
``accept`` with the ``(K, N, ...)`` CPU values, identical on every rank.
:class:`EpochPassCallback` runs it at the two hooks: ``on_train_epoch_end`` of epoch ``e - 1``
for epoch ``e`` (Lightning runs the checkpoint callbacks after the others, so the checkpoint of
``e - 1`` already holds ``e``'s result and a resumed run trains on it unchanged) and
``on_train_epoch_start`` of ``e`` as a fallback (the first epoch after a warm-up, a run whose
``max_epochs`` was raised on resume). ``due`` is false once the method holds the epoch's
result, and nothing changes the weights between the two hooks, so the result is the same
whichever runs it.
"""

from __future__ import annotations

import lightning as L

from ncl.callbacks.protocols import EpochPass, PerSampleSource
from ncl.data.contracts import retrieval_data
from ncl.training.passes import run_pass
from ncl.training.schedule import has_epoch


def run_epoch_pass(trainer: L.Trainer, method: PerSampleSource, epoch_pass: EpochPass,
                   epoch: int) -> bool:
    """Run ``epoch_pass`` for ``epoch`` over ``method``'s networks if it is due (every rank).

    Returns:
        Whether the pass ran (and its result was accepted) now.
    """
    if not epoch_pass.due(epoch):
        return False
    data = retrieval_data(trainer, type(method).__name__)
    values = run_pass(epoch_pass.spec(epoch), method.nets, data.train_pairs(), epoch, method.device,
                      trainer.global_rank, trainer.world_size, data.num_workers,
                      description=epoch_pass.description)
    epoch_pass.accept(epoch, values.cpu())  # (K, N) or (K, N, C)
    return True


class EpochPassCallback(L.Callback):
    """Runs the method's :class:`~ncl.callbacks.protocols.EpochPass` one epoch ahead, or at the
    epoch's start if it is missing; a subclass says which pass (:meth:`epoch_pass`)."""

    def epoch_pass(self, pl_module: L.LightningModule) -> EpochPass | None:
        """The method's per-epoch pass, or ``None`` when it has none to run."""
        raise NotImplementedError

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._run(trainer, pl_module, trainer.current_epoch)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        following = trainer.current_epoch + 1
        if has_epoch(trainer.max_epochs, following):
            self._run(trainer, pl_module, following)

    def _run(self, trainer: L.Trainer, pl_module: L.LightningModule, epoch: int) -> None:
        epoch_pass = self.epoch_pass(pl_module)
        if epoch_pass is not None:
            run_epoch_pass(trainer, pl_module, epoch_pass, epoch)  # type: ignore[arg-type]
