"""When the refinement and self-refining callbacks run, with a real Trainer: SelfRefining
re-initialises in ``on_train_epoch_start`` at piece boundaries only (before the module's hook),
MomentumRefinement writes a step's values in ``on_train_batch_end`` (with the method's rule)
and prepares the next epoch's in ``on_train_epoch_end`` (before the checkpoint) or, when a
checkpoint lacks them, at the next epoch start; CRCL's labels, re-initialisation and restarted
schedule through them."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn

from ncl.division.stats import label_stats
from ncl.callbacks.protocols import Refinable
from ncl.callbacks.refinement import MomentumRefinement
from ncl.callbacks.self_refining import SelfRefining, fresh_weights
from ncl.data.datamodule import SyntheticDataModule
from ncl.errors import ConfigError
from ncl.methods.crcl import CRCL
from ncl.models.sgraf import SGRAF
from ncl.training.state import PerSampleState

TINY = dict(img_dim=16, num_regions=6, word_dim=8, embed_size=16, sim_dim=8,
            similarity_strategy="chunked")  # dropout on: reseeded per epoch


class _Recorder(L.LightningModule):
    """A fake refinable, rebuildable method that records every event, in order."""

    def __init__(self, when: str = "step") -> None:
        super().__init__()
        self.save_hyperparameters()
        self.hparams.vocab_size = 0
        self.nets = nn.ModuleList([nn.Linear(2, 1)])
        self.training_seed = 0
        self.events: list[tuple[str, int]] = []
        self.table = PerSampleState(1, fill=1.0)
        self.table.reset(8)

    def backbone_factory(self, vocab_size: int) -> nn.Module:
        self.events.append(("factory", self.current_epoch))
        return nn.Linear(2, 1)

    # Refinable
    def refinement_table(self) -> PerSampleState:
        return self.table

    def refinement_when(self) -> str:
        return self.hparams.when

    def refinement_rule(self):  # noqa: ANN201 - the momentum rule, beta 0.5
        return lambda old, new: 0.5 * old + 0.5 * new

    def refinement_due(self, epoch: int) -> bool:
        self.events.append(("due", epoch))
        return False

    def refinement_pass(self, epoch: int):  # noqa: ANN201
        raise AssertionError("never due")

    def accept_refinement(self, epoch: int, values: torch.Tensor) -> None:
        raise AssertionError("never due")

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(torch.arange(8), batch_size=4)

    def on_train_epoch_start(self) -> None:
        self.events.append(("module_epoch_start", self.current_epoch))

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> dict:
        self.events.append(("step", self.current_epoch))
        loss = self.nets[0](torch.ones(len(batch), 2)).sum()
        return {"loss": loss, "refine": (0, batch, torch.zeros(len(batch)))}

    def on_train_batch_end(self, outputs: dict, batch: torch.Tensor, batch_idx: int) -> None:
        self.events.append(("module_batch_end", int(self.table.values[0, batch[0]] * 100)))

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        self.events.append(("save", self.current_epoch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def configure_callbacks(self) -> list[L.Callback]:
        return [SelfRefining([2, 2]), MomentumRefinement()]


def _trainer(tmp_path: Path, max_epochs: int, **kwargs) -> L.Trainer:  # noqa: ANN003
    return L.Trainer(max_epochs=max_epochs, accelerator="cpu", logger=False,
                     enable_progress_bar=False, enable_model_summary=False,
                     default_root_dir=tmp_path, **kwargs)


def test_callbacks_run_in_their_hooks(tmp_path: Path) -> None:
    module = _Recorder()
    assert isinstance(module, Refinable)
    ckpt = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path, filename="{epoch}", save_top_k=-1)
    _trainer(tmp_path, 4, callbacks=[ckpt]).fit(module)
    events = module.events
    # per step: the rule (0.5 old + 0.5 new) is applied before the module's batch-end hook,
    # once per step (1 -> 0.5 in epoch 0, -> 0.25 in epoch 1); a per-step method has no pass
    assert events[:7] == [("module_epoch_start", 0), ("step", 0), ("module_batch_end", 50),
                          ("step", 0), ("module_batch_end", 50), ("save", 0),
                          ("module_epoch_start", 1)]
    assert ("module_batch_end", 25) in events and not any(e[0] == "due" for e in events)
    # re-initialisation at the one boundary (epoch 2 = piece 1), before the module's hook
    assert [e for e in events if e[0] == "factory"] == [("factory", 2)]
    at = events.index(("factory", 2))
    assert events[at - 1] == ("save", 1) and events[at + 1] == ("module_epoch_start", 2)


def test_per_epoch_refinement_is_asked_at_epoch_end_and_start(tmp_path: Path) -> None:
    module = _Recorder("epoch")
    ckpt = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path, filename="{epoch}", save_top_k=-1)
    _trainer(tmp_path, 2, callbacks=[ckpt]).fit(module)
    events = [e for e in module.events if e[0] in ("due", "save", "module_epoch_start")]
    # the fallback at every epoch start, the next epoch's at every epoch end before the
    # checkpoint, none for an epoch that will not run; no per-step writes
    assert events == [("due", 0), ("module_epoch_start", 0), ("due", 1), ("save", 0),
                      ("due", 1), ("module_epoch_start", 1), ("save", 1)]
    assert torch.equal(module.table.values, torch.ones(1, 8))


def test_callbacks_name_a_method_without_their_protocol(tmp_path: Path) -> None:
    class Plain(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(2, 1)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            return self.layer(torch.ones(len(batch), 2)).sum()

        def train_dataloader(self) -> torch.utils.data.DataLoader:
            return torch.utils.data.DataLoader(torch.arange(4), batch_size=4)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    for callback, name in ((MomentumRefinement(), "Refinable"), (SelfRefining([1, 1]), "ncl method")):
        with pytest.raises(ConfigError, match=name):
            _trainer(tmp_path, 1, callbacks=[callback]).fit(Plain())


def _data(cache: Path) -> SyntheticDataModule:
    return SyntheticDataModule(preset="tiny", cache_dir=str(cache), batch_size=16,
                               eval_batch_size=64, noise_type="caption", noise_ratio=0.4)


def _crcl(vocab: int, **kwargs) -> CRCL:  # noqa: ANN003 - forwarded switches
    torch.manual_seed(0)
    return CRCL(vocab, lambda v: SGRAF(v, **TINY), pieces=[2, 2], freeze_epochs=1,
                optimizer=lambda p: torch.optim.AdamW(p, lr=2e-3), lr_update=1, **kwargs)


@pytest.fixture
def vocab(synthetic_cache: Path) -> int:
    return _data(synthetic_cache).vocab_size


class _Weights(L.Callback):
    """Records the weights and optimiser state at every epoch start (before the method's
    callbacks: trainer callbacks come first) and at the first batch (after them)."""

    def __init__(self) -> None:
        self.at_start: dict[int, list[torch.Tensor]] = {}
        self.at_first_batch: dict[int, list[torch.Tensor]] = {}
        self.optimizer_state: dict[int, int] = {}
        self.lr: dict[int, float] = {}

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.at_start[trainer.current_epoch] = [p.detach().clone() for p in pl_module.parameters()]

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: object,
                             batch_idx: int) -> None:
        if batch_idx == 0:
            epoch = trainer.current_epoch
            self.at_first_batch[epoch] = [p.detach().clone() for p in pl_module.parameters()]
            self.optimizer_state[epoch] = len(trainer.optimizers[0].state)
            self.lr[epoch] = trainer.optimizers[0].param_groups[0]["lr"]


def test_real_crcl_reinitialises_at_boundaries_only(tmp_path: Path, synthetic_cache: Path,
                                                     vocab: int) -> None:
    module, weights = _crcl(vocab), _Weights()
    params = list(module.parameters())
    trainer = _trainer(tmp_path, 4, callbacks=[weights], limit_train_batches=3, limit_val_batches=0)
    trainer.fit(module, datamodule=_data(synthetic_cache))
    assert all(a is b for a, b in zip(module.parameters(), params))
    for epoch in (1, 3):  # inside a piece: untouched
        pairs = zip(weights.at_start[epoch], weights.at_first_batch[epoch])
        assert all(torch.equal(a, b) for a, b in pairs)
        assert weights.optimizer_state[epoch] > 0
    # the boundary: fresh weights (as fresh_weights(piece 1) builds them), empty optimiser state
    assert weights.optimizer_state[2] == 0
    reference = _crcl(vocab)
    reference._training_seed = module.training_seed
    fresh_weights(reference, 1)
    assert all(torch.equal(a, b) for a, b in zip(reference.parameters(), weights.at_first_batch[2]))
    (refining,) = [c for c in trainer.callbacks if isinstance(c, SelfRefining)]
    assert refining.initialised_piece == 1
    assert bool((module.labels.values < 1).any())  # the official rule moved the labels per step
    # lr_update 1: the step schedule restarts in every piece; LambdaLR's last step is 2 epochs
    # past the last piece's start
    assert weights.lr == pytest.approx({0: 2e-3, 1: 2e-4, 2: 2e-3, 3: 2e-4})
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(2e-3 * 0.01)


def test_paper_rule_labels_from_a_checkpoint_without_them(tmp_path: Path, synthetic_cache: Path,
                                                          vocab: int) -> None:
    """A checkpoint written at validation end (before on_train_epoch_end) lacks the next
    epoch's labels; the fallback computes them at the next epoch start from the same
    weights, so the resumed run ends exactly as the uninterrupted one."""
    def run(root: Path, max_epochs: int, ckpt_path: str | None = None) -> CRCL:
        module = _crcl(vocab, rule="paper")
        ckpt = L.pytorch.callbacks.ModelCheckpoint(dirpath=root, filename="{epoch}", save_top_k=-1,
                                                   save_on_train_epoch_end=False)
        L.seed_everything(0)
        trainer = _trainer(root, max_epochs, callbacks=[ckpt], limit_train_batches=3,
                           deterministic=True)
        trainer.fit(module, datamodule=_data(synthetic_cache), ckpt_path=ckpt_path)
        return module

    straight = run(tmp_path / "straight", 4)
    assert straight.label_epoch == 3
    saved = torch.load(tmp_path / "straight" / "epoch=0.ckpt", weights_only=False)
    assert saved["ncl_training_state"]["label_epoch"] == -1  # saved before epoch 1's labels
    resumed = run(tmp_path / "resumed", 4, str(tmp_path / "straight" / "epoch=0.ckpt"))
    assert resumed.label_epoch == 3
    assert torch.equal(resumed.labels.values, straight.labels.values)
    for a, b in zip(resumed.parameters(), straight.parameters()):
        assert torch.equal(a, b)


def test_label_stats_split_by_truth_and_flips() -> None:
    labels = torch.tensor([1.0, 0.95, 0.0, 0.3, 0.05])
    truth = torch.tensor([True, True, False, False, True])
    stats = label_stats(labels, truth, previous=torch.tensor([1.0, 0.2, 0.8, 0.3, 0.6]))
    assert stats["labels/all/mean"] == pytest.approx(0.46)
    assert stats["labels/all/zero"] == 1 and stats["labels/noisy/zero"] == 1
    assert stats["labels/clean/count"] == 3 and stats["labels/noisy/mean"] == pytest.approx(0.15)
    assert sum(stats[f"labels/all/hist{k:02d}"] for k in range(10)) == 5
    assert stats["labels/all/hist09"] == 2 and stats["labels/all/hist00"] == 2
    # flips across 0.5: 0.2 -> 0.95 (to clean), 0.8 -> 0.0 and 0.6 -> 0.05 (to noisy)
    flips = (stats["labels/flips"], stats["labels/flips_to_clean"], stats["labels/flips_to_noisy"])
    assert flips == (3, 1, 2)
    # detector "label < 0.5 = noisy": flags 3 pairs, 2 of them truly noisy, finds both
    assert stats["labels/noisy_precision"] == pytest.approx(2 / 3)
    assert stats["labels/noisy_recall"] == pytest.approx(1.0)
    assert "labels/clean/mean" not in label_stats(labels)
