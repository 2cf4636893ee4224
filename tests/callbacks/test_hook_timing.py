"""When the callbacks of stateful methods run, with a real Trainer (issue 10): GMMDivision in
``on_train_epoch_end`` (before the checkpoint of that epoch is written, so the checkpoint holds
the next epoch's division), MomentumRefinement in ``on_train_batch_end`` (after the step),
the diagnostics observer before the epoch's first batch (reading the method)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from torch import Tensor, nn

from ncl.callbacks.diagnostics import Diagnostics
from ncl.callbacks.division import GMMDivision
from ncl.callbacks.protocols import EpochDiagnostics, GMMSpec, PassSpec
from ncl.callbacks.refinement import MomentumRefinement
from ncl.division import momentum_update
from ncl.division.co_divide import Division
from ncl.training.state import PerSampleState


class _Recorder(L.LightningModule):
    """A fake stateful method (GMMDivisible from epoch 1, Refinable per step) that records
    every event, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.nets = nn.ModuleList([nn.Linear(2, 1)])
        self.training_seed = 0
        self.events: list[tuple[str, int]] = []
        self.division: Division | None = None
        self.momentum_targets = PerSampleState(1, fill=1.0)
        self.momentum_targets.reset(8)

    def division_due(self, epoch: int) -> bool:
        return epoch >= 1 and (self.division is None or self.division.epoch != epoch)

    def division_pass(self, epoch: int) -> tuple[PassSpec, GMMSpec]:
        return PassSpec(lambda net, batch: batch, (0,), 4, False, 0, 0), GMMSpec()

    def accept_division(self, epoch: int, values: Tensor, clean_prob: Tensor) -> None:
        self.events.append(("divide", epoch))
        self.division = Division(epoch, values, clean_prob, clean_prob > 0.5)

    def refinement_table(self) -> PerSampleState:
        return self.momentum_targets

    def refinement_when(self) -> str:
        return "step"

    def refinement_rule(self):  # noqa: ANN201 - (old, new) -> stored
        return partial(momentum_update, momentum=0.5)

    def refinement_due(self, epoch: int) -> bool:
        return False

    def refinement_pass(self, epoch: int) -> PassSpec:
        raise NotImplementedError

    def accept_refinement(self, epoch: int, values: Tensor) -> None:
        raise NotImplementedError

    def epoch_diagnostics(self, epoch: int, true_clean: Tensor | None) -> EpochDiagnostics:
        if self.division is None or self.division.epoch != epoch:
            return EpochDiagnostics()
        return EpochDiagnostics({"division/A/clean": float(self.division.clean.sum())})

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(torch.arange(8), batch_size=4)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> dict:
        self.events.append(("step", self.current_epoch))
        loss = self.nets[0](torch.ones(len(batch), 2)).sum()
        return {"loss": loss, "refine": (0, batch, torch.zeros(len(batch)))}

    def on_train_batch_end(self, outputs: dict, batch: torch.Tensor, batch_idx: int) -> None:
        # module hooks run after the callbacks' for on_train_batch_end
        self.events.append(("after_update", int(self.momentum_targets.values[0, 0] < 1)))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        self.events.append(("save", self.current_epoch))
        checkpoint["division_epoch"] = None if self.division is None else self.division.epoch

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def configure_callbacks(self) -> list[L.Callback]:
        return [Diagnostics(), MomentumRefinement(), GMMDivision()]  # order does not matter


def test_callbacks_run_in_their_hooks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = SimpleNamespace(train_pairs=lambda: None, num_workers=0)
    monkeypatch.setattr("ncl.callbacks.epoch_pass.retrieval_data", lambda trainer, name: data)
    monkeypatch.setattr("ncl.callbacks.epoch_pass.run_pass",  # (1, 8) losses of the pass
                        lambda *args, **kwargs: torch.linspace(0, 1, 8)[None])
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
    # the observer logged epochs 1 and 2's division, made before their first batch
    assert "division/A/clean" in trainer.logged_metrics
