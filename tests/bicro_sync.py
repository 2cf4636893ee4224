"""The two-process check of tests/methods/test_bicro_cli.py: :class:`tiny_runs.RankSyncCheck`
with NaN equal to NaN (BiCro's official division keeps a NaN clean probability at the smallest
loss, docs/methods/bicro.md, quirk 4; ``torch.equal`` would call equal records different)."""

from __future__ import annotations

import lightning as L
import torch

from tiny_runs import RankSyncCheck


class NanEqualSyncCheck(RankSyncCheck):
    """:class:`~tiny_runs.RankSyncCheck` comparing NaN as a value (each NaN -> a fixed number)."""

    @staticmethod
    def check(trainer: L.Trainer, pl_module: L.LightningModule, tensors: dict[str, torch.Tensor]) -> None:
        RankSyncCheck.check(trainer, pl_module,
                            {k: torch.nan_to_num(v.double(), nan=-12345.0) for k, v in tensors.items()})
