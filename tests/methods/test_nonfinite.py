"""NaN/Inf in training and evaluation: one clear error (issue 9), from the shared base's
``on_before_backward`` and from :mod:`ncl.evaluation.nonfinite`."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
from torch import Tensor, nn

from ncl.errors import DataError, TrainingError
from ncl.evaluation.nonfinite import EvalSite, check_finite_embeddings, check_finite_similarities
from ncl.methods.base import RetrievalMethod


class _Scalar(nn.Module):
    """The smallest backbone: one weight."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))


class _Automatic(RetrievalMethod):
    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        scale = float("inf") if batch_idx == 2 else 1.0
        return (self.net.w * batch.float().sum() * scale).sum()


class _Manual(RetrievalMethod):
    """Manual optimisation as NCR's: the hook must fire for ``manual_backward`` too."""

    def __init__(self) -> None:
        super().__init__(vocab_size=3, backbone=_Scalar)
        self.automatic_optimization = False

    def training_step(self, batch: Tensor, batch_idx: int) -> None:
        opt = self.optimizers()
        opt.zero_grad()
        scale = float("nan") if batch_idx == 1 else 1.0
        self.manual_backward((self.net.w * batch.float().sum() * scale).sum())
        opt.step()


def _fit(module: RetrievalMethod, root: Path) -> None:
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=root,
                        callbacks=[L.pytorch.callbacks.ModelCheckpoint(dirpath=root, every_n_train_steps=1)])
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(torch.arange(8), batch_size=2))


@pytest.mark.parametrize("make, message", [
    (lambda: _Automatic(vocab_size=3, backbone=_Scalar),
     "loss of _Automatic is Inf at global step 2 (epoch 0)"),
    (_Manual, "loss of _Manual is NaN at global step 1 (epoch 0)"),
])
def test_non_finite_loss_stops_training(tmp_path: Path, make, message: str) -> None:
    module = make()
    with pytest.raises(TrainingError) as err:
        _fit(module, tmp_path)
    assert message in str(err.value) and "--data.nan_check full" in str(err.value)
    assert "learning rate" in str(err.value)
    assert torch.isfinite(module.net.w).all()  # the diverged step never reached the weights
    # The checkpoints written before are of finite steps; none is of the diverged one.
    saved = sorted(p.name for p in tmp_path.glob("*.ckpt"))
    steps = [int(n.split("step=")[1].split(".")[0]) for n in saved]
    assert all(s <= int(message.split("global step ")[1].split()[0]) for s in steps)
    for ckpt in tmp_path.glob("*.ckpt"):
        state = torch.load(ckpt, weights_only=False)["state_dict"]
        assert all(torch.isfinite(v).all() for v in state.values())


def test_finite_loss_passes() -> None:
    _Automatic(vocab_size=3, backbone=_Scalar).on_before_backward(torch.tensor(1.5))


def _fake_split(features: np.ndarray, tmp_path: Path) -> SimpleNamespace:
    return SimpleNamespace(features=features, n_images=len(features), feature_path=tmp_path / "dev_ims.npy",
                           caption_path=tmp_path / "dev_caps.txt")


def _site(split: SimpleNamespace | None, testing: bool) -> EvalSite:
    """What a method evaluating ``split`` passes (:meth:`EvalSite.of` a trainer)."""
    dm = SimpleNamespace(val_data=None if testing else split, test_data=split if testing else None)
    return EvalSite.of(SimpleNamespace(testing=testing, datamodule=dm), "_Automatic")


@pytest.mark.parametrize("testing, label", [(False, "validation"), (True, "test")])
def test_nan_features_at_evaluation_name_split_file_and_images(tmp_path: Path, testing: bool,
                                                                 label: str) -> None:
    feats = np.zeros((6, 2, 4), np.float32)
    feats[[2, 4]] = np.nan
    site = _site(_fake_split(feats, tmp_path), testing)
    img, cap = torch.zeros(6, 2, 3), torch.zeros(30, 5, 3)
    img[[2, 4]] = float("nan")
    with pytest.raises(DataError) as err:
        check_finite_embeddings(site, "net", img, cap, torch.full((30,), 5))
    msg = str(err.value)
    assert f"the {label} features in {tmp_path / 'dev_ims.npy'}" in msg
    assert "2 of 6 images (images 2, 4)" in msg and "\n" not in msg


def test_nan_weights_at_evaluation_blame_the_model(tmp_path: Path) -> None:
    site = _site(_fake_split(np.zeros((6, 2, 4), np.float32), tmp_path), testing=True)
    img, cap = torch.full((6, 2, 3), float("nan")), torch.full((30, 5, 3), float("inf"))
    with pytest.raises(TrainingError, match=r"network net \(_Automatic\) gives NaN/Inf embeddings on "
                                            r"the test split .*dev_ims.npy.* for 6 of 6 images and "
                                            r"30 of 30 captions although the features are finite"):
        check_finite_embeddings(site, "net", img, cap, torch.full((30,), 5))


def test_caption_padding_is_not_checked_and_sims_are(tmp_path: Path) -> None:
    site = EvalSite.of(None, "_Automatic")  # no trainer: the validation split, no files known
    cap = torch.zeros(4, 5, 3)
    cap[0, 3:] = float("nan")  # padding beyond the length of 3
    check_finite_embeddings(site, "net", torch.zeros(2, 2, 3), cap, torch.tensor([3, 5, 5, 5]))
    sims = torch.zeros(2, 4)
    sims[1, 2] = float("inf")
    with pytest.raises(TrainingError,
                       match=r"similarities on the validation split for 1 of 2 images \(image 1\)"):
        check_finite_similarities(site, "net", sims)
