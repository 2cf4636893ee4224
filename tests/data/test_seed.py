"""One ``seed_everything: N`` in a config seeds everything random in a run (issue 13):
Python's ``random``, NumPy and torch in the main process, the DataLoader workers' global
streams (Lightning's ``seed_everything(workers=True)``, which LightningCLI calls), the
method's and the DataModule's ``(seed, epoch)`` streams, and so the augmentation drawn in a
worker. Two runs with the same seed draw the same numbers everywhere; another seed changes
every one of them."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from ncl.cli import main
from tiny_runs import METHODS, method_config

FILL = 1e-10  # CaptionRegionAugment's fill value of a dropped region (its default)


class GlobalDraws(Dataset):
    """Item ``i``: the worker that read it and one draw from each global stream there."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> list[float]:
        worker = get_worker_info()
        return [float(worker.id if worker else -1), random.random(), float(np.random.random()),
                float(torch.rand(()))]


class SeedProbe(L.Callback):
    """Record what a run's seed decides into ``<out>``: the seed environment, main-process
    draws at setup, draws of every global stream inside two DataLoader workers started as
    the training loader starts its own, the module's and DataModule's seeds, and which
    regions the augmentation dropped, per training caption.

    Args:
        out: JSON file written at the end of the training epoch.
    """

    def __init__(self, out: str) -> None:
        self.out, self.record = out, {}  # type: ignore[var-annotated]
        self.dropped: dict[str, list[bool]] = {}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.record.update(env=[os.environ.get("PL_GLOBAL_SEED"), os.environ.get("PL_SEED_WORKERS")],
                           main=[random.random(), float(np.random.random()), float(torch.rand(()))])

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loader = trainer.train_dataloader
        assert isinstance(loader, DataLoader) and loader.worker_init_fn is not None, \
            "the training loader's workers are not seeded (seed_everything(workers=True))"
        generator = torch.Generator()
        generator.set_state(loader.generator.get_state())  # the base seed the loader will draw
        probe = DataLoader(GlobalDraws(), batch_size=None, num_workers=2,
                           worker_init_fn=loader.worker_init_fn, generator=generator)
        self.record["workers"] = [list(item) for item in probe]
        self.record["seeds"] = [pl_module.training_seed,  # type: ignore[attr-defined]
                                trainer.datamodule.shuffle_seed]  # type: ignore[attr-defined]

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        dropped = (batch["images"] == FILL).all(dim=-1)  # (B, R): regions filled by the augmentation
        for index, row in zip(batch["index"].tolist(), dropped.tolist()):
            self.dropped[str(index)] = row

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        Path(self.out).write_text(json.dumps({**self.record, "dropped": self.dropped}))


def seeded_run(root: Path, cache: Path, seed: int) -> dict[str, Any]:
    """One training epoch of 4 steps (no validation) with ``seed_everything: seed``, regions
    dropped by the augmentation in two DataLoader workers; what :class:`SeedProbe` saw."""
    config = method_config(root, cache, METHODS["rcl"], max_epochs=1, steps=4,
                           trainer={"callbacks": [], "enable_checkpointing": False,
                                    "limit_val_batches": 0, "num_sanity_val_steps": 0},
                           data={"num_workers": 2, "augment": {
                               "class_path": "ncl.data.augment.CaptionRegionAugment",
                               "init_args": {"caption_rate": 0.0, "region_rate": 0.5}}})
    text = config.read_text().replace("seed_everything: 0", f"seed_everything: {seed}")
    assert text != config.read_text()
    config.write_text(text)
    out = root / "probe.json"
    main(["fit", "--config", str(config), "--trainer.callbacks+=data.test_seed.SeedProbe",
          f"--trainer.callbacks.out={out}"])
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, synthetic_cache: Path) -> list[dict[str, Any]]:
    """Runs with seeds 3, 3 and 4."""
    return [seeded_run(tmp_path_factory.mktemp(f"seed{seed}"), synthetic_cache, seed)
            for seed in (3, 3, 4)]


def test_the_seed_reaches_every_stream(runs: list[dict[str, Any]]) -> None:
    first = runs[0]
    assert first["env"] == ["3", "1"]  # PL_GLOBAL_SEED, PL_SEED_WORKERS (workers=True)
    assert first["seeds"] == [3, 3]  # the method's and the DataModule's (seed, epoch) streams
    worker_ids = [int(row[0]) for row in first["workers"]]
    assert worker_ids == [0, 1, 0, 1]
    # each worker's NumPy stream is seeded apart; without a worker seed both forked
    # workers would draw the parent's NumPy numbers
    assert first["workers"][0][2] != first["workers"][1][2]
    assert len(first["dropped"]) == 4 * 16 and any(any(row) for row in first["dropped"].values())


def test_same_seed_same_draws_other_seed_other_draws(runs: list[dict[str, Any]]) -> None:
    same, again, other = runs
    for key in ("main", "workers", "dropped"):
        assert same[key] == again[key], key
    assert other["env"][0] == "4" and other["seeds"] == [4, 4]
    for k in range(3):  # Python, NumPy, torch
        assert same["main"][k] != other["main"][k]
        assert same["workers"][0][k + 1] != other["workers"][0][k + 1]
    # the augmentation is keyed by caption index, so compare the captions both epochs drew
    common = sorted(same["dropped"].keys() & other["dropped"].keys())
    assert common and any(same["dropped"][i] != other["dropped"][i] for i in common)
