"""Checkpoints: atomic writes, and a last.ckpt that always holds the latest epoch."""

from __future__ import annotations

import importlib
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers import TINY_BACKBONE_ARGS
from ncl.cli import NclCLI
from ncl.compose import merged
from ncl.methods.base import RetrievalMethod
from ncl.runs.checkpoints import AtomicCheckpointIO

REPO = Path(__file__).resolve().parents[2]
TINY = TINY_BACKBONE_ARGS


def test_atomic_write_keeps_previous_checkpoint_on_failure(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "ckpts" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"epoch": 1}, path)
    assert torch.load(path)["epoch"] == 1

    def crash(obj, handle) -> None:  # writes half a file, then dies (e.g. disk full)
        handle.write(b"partial")
        raise OSError("No space left on device")

    monkeypatch.setattr("ncl.runs.checkpoints.torch.save", crash)
    with pytest.raises(OSError):
        io.save_checkpoint({"epoch": 2}, path)
    assert torch.load(path)["epoch"] == 1  # the previous complete checkpoint survives
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]  # no temporary left


class _Declining(L.LightningModule):
    """A model whose validation rSum gets worse every epoch: only epoch 0 is a best."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.log("val/rsum_selected", 100.0 - self.current_epoch)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _config_callbacks(config: Path) -> list:
    callbacks = []
    for entry in merged(config, with_defaults=True)["trainer"]["callbacks"]:
        if not entry["class_path"].endswith("ModelCheckpoint"):
            continue  # the checkpoint policy only (the LR monitor needs a logger)
        module, name = entry["class_path"].rsplit(".", 1)
        callbacks.append(getattr(importlib.import_module(module), name)(**entry.get("init_args", {})))
    return callbacks


def test_last_checkpoint_is_the_latest_epoch_not_the_best(tmp_path: Path) -> None:
    # The configs' own callbacks: last.ckpt must follow the latest epoch (for resuming) even
    # when that epoch is not a new best, while best-*.ckpt stays at the best epoch.
    data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    trainer = L.Trainer(max_epochs=3, callbacks=_config_callbacks(REPO / "configs" / "quickstart.yaml"),
                        plugins=[AtomicCheckpointIO()], default_root_dir=tmp_path, logger=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(_Declining(), data, data)
    ckpts = {p.name: p for p in tmp_path.rglob("*.ckpt")}
    assert set(ckpts) == {"best-epoch=0.ckpt", "last.ckpt"}
    assert torch.load(ckpts["last.ckpt"], weights_only=False)["epoch"] == 2
    assert torch.load(ckpts["best-epoch=0.ckpt"], weights_only=False)["epoch"] == 0
    assert not list(tmp_path.rglob("*.tmp"))


def test_cli_trainer_writes_checkpoints_atomically(synthetic_cache: Path) -> None:
    cli = NclCLI(RetrievalMethod, L.LightningDataModule, subclass_mode_model=True,
                 subclass_mode_data=True, auto_configure_optimizers=False, run=False,
                 args=["--config", str(REPO / "configs" / "quickstart.yaml"), *TINY,
                       "--data.preset=tiny", "--data.n_train=null", f"--data.cache_dir={synthetic_cache}"])
    assert isinstance(cli.trainer.strategy.checkpoint_io, AtomicCheckpointIO)


# The key every best checkpoint monitors: val/rsum_selected, the rSum of an epoch that may be
# selected and -1 otherwise (a warm-up epoch, an epoch outside CRCL's last piece with
# model.selection: last_piece), logged by every method (ncl.evaluation.selection).
SELECTED_KEY = "val/rsum_selected"


def test_every_training_config_keeps_a_last_checkpoint() -> None:
    for config in sorted((REPO / "configs").glob("*.yaml")):
        loaded = merged(config, with_defaults=True)
        callbacks = loaded.get("trainer", {}).get("callbacks") or []
        ckpts = [c.get("init_args", {}) for c in callbacks if c["class_path"].endswith("ModelCheckpoint")]
        if not ckpts:
            continue  # evaluation-only configs
        assert any(c.get("monitor") == SELECTED_KEY for c in ckpts), config.name
        assert any(c.get("monitor") is None and c.get("filename") == "last" for c in ckpts), config.name
        assert not any(c.get("save_last") and c.get("monitor") for c in ckpts), config.name


def test_resume_ignores_options_an_older_ncl_stored(tmp_path: Path, synthetic_cache: Path,
                                                    capfd: pytest.CaptureFixture[str]) -> None:
    """A checkpoint written before an option was removed (NCR's ``loss_figure``, issue 23)
    resumes with one warning naming it, instead of a traceback when the method is built."""
    from ncl.cli import main

    root = tmp_path / "runs"
    args = ["fit", "--config", str(REPO / "configs" / "quickstart.yaml"), *TINY, "--data.preset=tiny",
            "--data.n_train=null", f"--data.cache_dir={synthetic_cache}", f"--trainer.default_root_dir={root}",
            "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
            "--trainer.enable_progress_bar=false", "--trainer.logger=false"]
    main([*args, "--trainer.max_epochs=1"])
    [last] = root.rglob("last.ckpt")
    ckpt = torch.load(last, weights_only=False)
    ckpt["hyper_parameters"]["loss_figure"] = False  # what ncl before issue 23 stored for NCR
    torch.save(ckpt, last)
    main([*args, "--trainer.max_epochs=2", f"--ckpt_path={last}"])
    assert torch.load(last, weights_only=False)["epoch"] == 1  # it trained the second epoch
    said = [line for line in capfd.readouterr().err.splitlines() if "no longer has" in line]
    assert len(said) == 1 and said[0].startswith("ncl: warning:")
    assert said[0].endswith("ignored: loss_figure")
