"""When the callbacks of stateful methods run, with a real Trainer (issue 10): CoDivide in
``on_train_epoch_end`` (before the checkpoint of that epoch is written, so the checkpoint
holds the next epoch's division), MomentumTargets in ``on_train_batch_end`` (after the
step), DivisionDiagnostics in ``on_train_epoch_start`` (reading the module)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from torch import nn

from ncl.callbacks import CoDivide, DivisionDiagnostics, MomentumTargets
from ncl.training.division import Division
from ncl.training.state import PerSampleState


class _Recorder(L.LightningModule):
    """A fake stateful method that records every event, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(2, 1)
        self.events: list[tuple[str, int]] = []
        self.division: Division | None = None
        self.momentum_targets = PerSampleState(1, fill=1.0)
        self.momentum_targets.reset(8)
        self.network_names = ("A",)

    def prepare_division(self, epoch: int) -> None:
        self.events.append(("divide", epoch))
        n = 8
        self.division = Division(epoch, torch.zeros(1, n), torch.ones(1, n), torch.ones(1, n, dtype=torch.bool))

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(torch.arange(8), batch_size=4)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> dict:
        self.events.append(("step", self.current_epoch))
        loss = self.layer(torch.ones(len(batch), 2)).sum()
        return {"loss": loss, "momentum_update": (0, batch, torch.zeros(len(batch)))}

    def on_train_batch_end(self, outputs: dict, batch: torch.Tensor, batch_idx: int) -> None:
        # module hooks run after the callbacks' for on_train_batch_end
        self.events.append(("after_update", int(self.momentum_targets.values[0, 0] < 1)))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        self.events.append(("save", self.current_epoch))
        checkpoint["division_epoch"] = None if self.division is None else self.division.epoch

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def configure_callbacks(self) -> list[L.Callback]:
        return [CoDivide(), MomentumTargets(0.5), DivisionDiagnostics()]


def test_callbacks_run_in_their_hooks(tmp_path: Path) -> None:
    module = _Recorder()
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path,
                        callbacks=[L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path, filename="{epoch}",
                                                                       save_top_k=-1)])
    trainer.fit(module)
    events = module.events
    # epoch e: two steps, then the division for e + 1, then the checkpoint of epoch e
    assert events[:7] == [("step", 0), ("after_update", 1), ("step", 0), ("after_update", 1),
                          ("divide", 1), ("save", 0), ("step", 1)]
    assert ("divide", 3) not in events  # no division for an epoch that will not run
    for epoch, division_epoch in [(0, 1), (1, 2), (2, 2)]:  # the last epoch keeps its own
        ckpt = torch.load(tmp_path / f"epoch={epoch}.ckpt", weights_only=False)
        assert ckpt["division_epoch"] == division_epoch, epoch
    # diagnostics logged the division sizes of epochs 1 and 2 from the module's division
    assert "division/A/clean" in trainer.logged_metrics
