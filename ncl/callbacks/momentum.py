"""LNC's momentum targets gamma for the warm-up regulariser (LNC Eq. 4-6): the update after
every training step.

One target per training pair and network, ``gamma^0 = 1`` (Eq. 5), held by the method in a
:class:`~ncl.training.state.PerSampleState` (``module.momentum_targets``, checkpointed with
the method's training state). A pair's target moves each time the network trains on it,
i.e. once per warm-up epoch: ``gamma <- beta * gamma + (1 - beta) * P`` with the detached
prediction of that step. The training step returns ``momentum_update = (net, index, P)``;
this callback applies it in ``on_train_batch_end``. Under DDP the updates are all-gathered
by sample index and applied on every rank in rank order, so all ranks (and the checkpoint
written by rank 0) hold the same targets at every moment.
"""

from __future__ import annotations

from typing import Any

import lightning as L

from ncl.division import momentum_update


class MomentumTargets(L.Callback):
    """Applies a step's momentum-target update (LNC Eq. 5) after the step.

    Args:
        momentum: beta in [0, 1] (the paper gives no value).
    """

    def __init__(self, momentum: float = 0.9) -> None:
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum must lie in [0, 1], got {momentum}")
        self.momentum = momentum

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        update = outputs.get("momentum_update") if isinstance(outputs, dict) else None
        if update is None:
            return
        net, index, predictions = update
        pl_module.momentum_targets.scatter(  # type: ignore[attr-defined]
            net, index, predictions.float(), lambda old, new: momentum_update(old, new, self.momentum))
