"""A callback of IN2R's two-process test (tests/methods/test_in2r_ddp.py), importable by class
path from the spawned processes."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch

from ncl.training.distributed import all_gather_cat


class QueueCheck(L.Callback):
    """After every co-training epoch: both ranks hold the same non-empty queues (rows, pointer,
    full flag); rank 0 writes how many epochs were checked into ``<marker_dir>/queues_ok``."""

    def __init__(self, marker_dir: str = ".") -> None:
        self.marker_dir, self.checked = marker_dir, 0

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        queues = pl_module.queues  # type: ignore[attr-defined]
        if queues[0] is None:  # the warm-up
            return
        for q in queues:
            assert q is not None and q.filled > 0
            local = torch.cat([q.images.reshape(-1), q.captions.reshape(-1),
                               torch.tensor([q.ptr, float(q.full)])]).double()
            rows = all_gather_cat(local.unsqueeze(0))
            assert torch.equal(rows[0], rows[1]), "the ranks' queues differ"
        self.checked += 1
        if trainer.is_global_zero:
            Path(self.marker_dir, "queues_ok").write_text(str(self.checked))
