"""What the DataModule tells methods and users (issue 11 D, E): whether its clean mask is the
ground truth (not for CC152K's real noise), and the per-device batch under DDP."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from ncl.data.batch_policy import per_device_batch_note
from ncl.data.contracts import clean_mask_known
from ncl.data.datamodule import PrecompDataModule
from ncl.data.facts import real_noise_default
from ncl.errors import NclWarning

from helpers import write_split, write_vocab


def _dataset(root: Path, name: str) -> Path:
    write_split(root / name, "train", 20, per=1)
    write_split(root / name, "dev", 6, per=1, seed=1)
    write_vocab(root / "vocab" / f"{name}_vocab.json", ["a", "dog", "runs", "on", "the", "grass"])
    return root


# --------------------------------------------------------------------- real noise
@pytest.mark.parametrize("name, real", [("cc152k_precomp", True), ("CC152K_precomp", True),
                                        ("f30k_precomp", False), ("coco_precomp", False),
                                        ("synthetic_precomp", False)])
def test_real_noise_default(name: str, real: bool) -> None:
    assert real_noise_default(name) is real


def test_cc152k_has_no_ground_truth(tmp_path: Path) -> None:
    dm = PrecompDataModule(str(_dataset(tmp_path, "cc152k_precomp")), "cc152k_precomp", batch_size=4)
    assert dm.real_noise and dm.clean_mask_known is False and not clean_mask_known(dm)
    assert dm.hparams["real_noise"] is None  # the option as given; the decision is dm.real_noise


@pytest.mark.parametrize("option, known", [(None, True), (True, False), (False, True)])
def test_real_noise_option(tmp_path: Path, option: bool | None, known: bool) -> None:
    dm = PrecompDataModule(str(_dataset(tmp_path, "toy_precomp")), "toy_precomp", batch_size=4,
                           real_noise=option)
    assert dm.clean_mask_known is known


def test_datamodule_without_the_member_is_taken_to_know_its_mask() -> None:
    assert clean_mask_known(SimpleNamespace(clean_mask=None))


# --------------------------------------------------------------------- DDP batch semantics
def test_per_device_batch_note() -> None:
    assert per_device_batch_note(1, 128, acknowledged=False) is None
    assert per_device_batch_note(4, 128, acknowledged=True) is None
    note = per_device_batch_note(4, 128, acknowledged=False)
    assert note is not None and "\n" not in note
    assert "4 processes" in note and "512 pairs per optimizer step" in note
    assert "own 128" in note and "per_device_batch: true" in note


def _fake_trainer(tmp_path: Path, world_size: int, rank: int) -> SimpleNamespace:
    return SimpleNamespace(world_size=world_size, is_global_zero=rank == 0, log_dir=str(tmp_path),
                           default_root_dir=str(tmp_path), lightning_module=None)


def _setup_warnings(tmp_path: Path, world_size: int, rank: int, acknowledged: bool) -> list[str]:
    dm = PrecompDataModule(str(_dataset(tmp_path / "data", "toy_precomp")), "toy_precomp",
                           batch_size=8, per_device_batch=acknowledged)
    dm.trainer = _fake_trainer(tmp_path, world_size, rank)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dm.setup("fit")
        dm.setup("fit")  # a second call (validate after fit) says nothing new
    return [str(w.message) for w in caught if issubclass(w.category, NclWarning)]


def test_ddp_warns_once_on_rank_zero(tmp_path: Path) -> None:
    messages = _setup_warnings(tmp_path, world_size=2, rank=0, acknowledged=False)
    assert len(messages) == 1 and "2 processes each train on data.batch_size=8" in messages[0]


@pytest.mark.parametrize("world_size, rank, acknowledged", [(2, 1, False), (2, 0, True), (1, 0, False)])
def test_ddp_warning_is_silent(tmp_path: Path, world_size: int, rank: int, acknowledged: bool) -> None:
    assert _setup_warnings(tmp_path, world_size, rank, acknowledged) == []
