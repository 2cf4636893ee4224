"""Ground-truth diagnostics are skipped, with one info line, when the data has real noise
(issue 11 D): CC152K's clean mask calls every pair clean, and scoring against it logged F1 = 0."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ncl.callbacks import diagnostics
from ncl.callbacks.diagnostics import Diagnostics, ground_truth
from ncl.callbacks.protocols import EpochDiagnostics
from ncl.division.stats import division_stats, label_stats
from ncl.division.co_divide import Division

N = 6
TRUTH = np.array([True, True, True, False, False, True])


class _Data:
    """A DataModule stand-in: the clean mask and whether it is the ground truth."""

    def __init__(self, known: bool | None) -> None:
        self.clean_mask = np.ones(N, dtype=bool) if known is False else TRUTH  # CC152K: "all clean"
        if known is not None:  # None: a DataModule written before clean_mask_known existed
            self.clean_mask_known = known


class _Module:
    """Records what the callbacks log."""

    network_names = ("A", "B")

    def __init__(self) -> None:
        clean = torch.tensor([[True, True, False, False, True, True]] * 2)
        self.division = Division(epoch=3, losses=torch.rand(2, N), prob=clean.float(), clean=clean)
        self.label_snapshot = None
        self.logged: dict[str, float] = {}

    def log_dict(self, stats: dict[str, float], **_: object) -> None:
        self.logged.update(stats)

    def location(self, epoch: int) -> tuple[int, int]:
        return 0, epoch

    def corrected_labels(self) -> torch.Tensor:
        return torch.tensor([0.9, 0.8, 0.7, 0.1, 0.2, 0.9])


@pytest.fixture
def infos(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    lines: list[str] = []
    monkeypatch.setattr(diagnostics, "rank_zero_info", lambda message: lines.append(message),
                        raising=False)
    return lines


def _trainer(known: bool | None) -> SimpleNamespace:
    return SimpleNamespace(datamodule=_Data(known), current_epoch=3, is_global_zero=True)


def test_ground_truth_is_none_without_it_and_said_once(infos: list[str]) -> None:
    trainer = _trainer(known=False)
    assert ground_truth(trainer, N) is None
    assert ground_truth(trainer, N) is None
    assert len(infos) == 1 and "real noise" in infos[0] and "skipped" in infos[0]
    assert ground_truth(_trainer(known=False), N) is None and len(infos) == 2  # a new run: said again


@pytest.mark.parametrize("known", [True, None])
def test_ground_truth_when_known(infos: list[str], known: bool | None) -> None:
    assert torch.equal(ground_truth(_trainer(known), N), torch.as_tensor(TRUTH))
    assert infos == []


@pytest.mark.parametrize("known", [False, True])
def test_division_diagnostics(infos: list[str], known: bool) -> None:
    module = _Module()  # an NCR-like epoch_diagnostics: division_stats of its division
    module.epoch_diagnostics = lambda epoch, truth: EpochDiagnostics(
        division_stats(module.division, module.network_names, truth))
    Diagnostics().on_train_batch_start(_trainer(known), module, None, 0)
    assert module.logged["division/A/clean"] == 4  # sizes are logged either way
    assert ("division/A/f1" in module.logged) is known
    assert ("division/B/precision" in module.logged) is known
    assert len(infos) == (0 if known else 1)


@pytest.mark.parametrize("known", [False, True])
def test_label_diagnostics(infos: list[str], known: bool) -> None:
    module = _Module()  # a CRCL-like epoch_diagnostics: label_stats of its labels
    labels = module.corrected_labels()
    module.epoch_diagnostics = lambda epoch, truth: EpochDiagnostics(label_stats(labels, truth))
    Diagnostics().on_train_batch_start(_trainer(known), module, None, 0)
    assert "labels/all/mean" in module.logged
    assert ("labels/noisy_f1" in module.logged) is known
    assert ("labels/clean/mean" in module.logged) is known
    assert len(infos) == (0 if known else 1)
