"""The line progress bar shows only the training values logged in the current epoch (a warm-up's
loss key does not stay on the lines of later epochs), on a real two-epoch Lightning fit."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from ncl.callbacks.progress_bars import LineProgressBar, logged_since


class WarmupThenMain(L.LightningModule):
    """Logs ``train/loss`` every step, ``train/warmup_infonce`` in epoch 0 only and
    ``train/main`` from epoch 1 on (as ReCon's warm-up and training steps do)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(2, 1)

    def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        loss = self.layer(batch[0]).pow(2).mean()
        extra = "warmup_infonce" if self.current_epoch == 0 else "main"
        self.log_dict({"train/loss": loss, f"train/{extra}": loss + 1.0}, on_step=True,
                      on_epoch=True, prog_bar=False, batch_size=2)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_a_warmup_key_is_not_shown_after_the_warmup(tmp_path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    data = DataLoader(TensorDataset(torch.randn(6, 2)), batch_size=2)
    trainer = L.Trainer(max_epochs=2, callbacks=[LineProgressBar(every_n_steps=1)], logger=False,
                        enable_checkpointing=False, enable_model_summary=False,
                        default_root_dir=tmp_path, accelerator="cpu", devices=1)
    trainer.fit(WarmupThenMain(), data)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    first = [line for line in lines if line.startswith("epoch 0 ")]
    second = [line for line in lines if line.startswith("epoch 1 ")]
    assert len(first) == 3 and len(second) == 3, lines
    assert all(" loss " in line and " warmup_infonce " in line and " main " not in line
               for line in first), first
    assert all(" loss " in line and " main " in line and " warmup_infonce " not in line
               for line in second), second
    # Lightning itself still holds the warm-up key: the filtering is the bar's
    assert "train/warmup_infonce_step" in trainer.callback_metrics


def test_logged_since_keeps_new_keys_and_new_values_only() -> None:
    old, same = torch.tensor(1.0), torch.tensor(2.0)
    snapshot = {"stale": old, "relogged": same}
    now = {"stale": old, "relogged": torch.tensor(2.0), "new": torch.tensor(3.0)}
    assert set(logged_since(now, snapshot)) == {"relogged", "new"}
    assert logged_since(now, {}) == now
