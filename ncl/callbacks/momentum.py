"""LNC momentum targets gamma for the warm-up regulariser (LNC Eq. 4-6).

One target per training pair and network, ``gamma^0 = 1`` (Eq. 5). A pair's target moves
each time the network trains on the pair, i.e. once per warm-up epoch (``tau`` is the
epoch in Eq. 5): ``gamma <- beta * gamma + (1 - beta) * P`` with the detached prediction
of that step. Under DDP every step's updates are all-gathered by sample index and applied
on every rank in rank order, so all ranks (and the checkpoint written by rank 0) hold the
same targets at every moment. The targets are kept in this callback's checkpoint state,
not in a module buffer (DDP would broadcast an N-length buffer every step).
"""

from __future__ import annotations

from typing import Any

import lightning as L
from torch import Tensor

from ncl.division import momentum_update
from ncl.training.state import PerSampleState


class MomentumTargets(L.Callback):
    """Per-sample momentum targets of each network (LNC Eq. 5), in a
    :class:`~ncl.training.state.PerSampleState` (``gamma^0 = 1``).

    Args:
        momentum: beta in [0, 1] (the paper gives no value).
        num_networks: networks with their own targets (2 for co-teaching).
    """

    def __init__(self, momentum: float = 0.9, num_networks: int = 2) -> None:
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum must lie in [0, 1], got {momentum}")
        if num_networks < 1:
            raise ValueError(f"num_networks must be >= 1, got {num_networks}")
        self.momentum, self.num_networks = momentum, num_networks
        self.table = PerSampleState(num_networks, fill=1.0)

    @property
    def gamma(self) -> Tensor | None:
        """``(K, N)`` float32 targets on the CPU (``None`` before setup)."""
        return self.table.values

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit" and not self.table.ready:
            self.reset(len(trainer.datamodule.train_pairs()))

    def reset(self, num_samples: int) -> None:
        """``gamma^0 = 1`` for every pair and network."""
        self.table.reset(num_samples)

    def targets(self, net: int, index: Tensor) -> Tensor:
        """``(B,)`` current targets of network ``net`` for dataset indices ``index``."""
        if not self.table.ready:
            raise RuntimeError("MomentumTargets used before setup (no training set size yet)")
        return self.table.get(net, index)

    def update(self, net: int, index: Tensor, predictions: Tensor) -> None:
        """Apply Eq. 5 to this step's samples on every rank (all-gathered by index).

        Args:
            net: the network whose targets move.
            index: ``(B,)`` dataset indices of the batch.
            predictions: ``(B,)`` the network's predictions P of the batch (detached here).
        """
        self.table.scatter(net, index, predictions.float(),
                           lambda old, new: momentum_update(old, new, self.momentum))

    def state_dict(self) -> dict[str, Any]:
        return {"gamma": self.gamma, "momentum": self.momentum}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.table.load_state_dict({"values": state_dict["gamma"]})
