"""GSC: the method's rules without a trainer (schedule, options, state), then through the real
CLI on tiny synthetic data (fit with the per-epoch split logged against the ground truth,
the tables in the checkpoint, test) and on two CPU processes (both ranks' scores stored).
Kill-and-resume equal to an uninterrupted run, two processes holding the same tables, and
bf16: tests/cli/test_resume.py, tests/cli/test_ddp_methods.py and tests/cli/test_bf16.py
(``gsc`` in tiny_runs.METHODS)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import torch
from tiny_runs import (
    DDP_DATA,
    DDP_TRAINER,
    METHODS,
    TINY_SGRAF,
    last_checkpoint,
    method_config,
    per_epoch,
    run_folder,
    sync_check_args,
)
from torch import nn

from ncl.cli import main
from ncl.errors import ConfigError
from ncl.methods.gsc import GSC, POSTERIOR, PRED, PRED_TARGET, SCORE, TARGET, TOPO_TARGET
from ncl.models.sgraf import SGRAF

BACKBONE = partial(SGRAF, **TINY_SGRAF)


def gsc(**options) -> GSC:
    return GSC(50, BACKBONE, **options)


def test_learning_rate_falls_by_a_fifth_every_lr_update_epochs() -> None:
    method = gsc(lr_update=15)
    assert [method.lr_factor(e) for e in (0, 14, 15, 29, 30, 59)] == \
        pytest.approx([1, 1, 0.2, 0.2, 0.04, 0.008])
    warm = gsc(lr_update=2, warmup_epochs=3)  # the warm-up runs at lr0, then counting starts
    assert [warm.lr_factor(e) for e in range(7)] == pytest.approx([1, 1, 1, 1, 1, 0.2, 0.2])


@pytest.mark.parametrize(("option", "value"), [("gamma", -1.0), ("beta", 1.5), ("temperature", 0.0),
                                               ("lr_decay", 1.0), ("warmup_epochs", -1),
                                               ("warmup_loss", "rince")])
def test_bad_options_name_themselves(option: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"model.{option}"):
        gsc(**{option: value})


def test_backbone_without_a_similarity_head_is_refused() -> None:
    class Pooled(nn.Module):
        def __init__(self, vocab_size: int) -> None:
            super().__init__()
            self.layer = nn.Linear(2, 2)

    with pytest.raises(ConfigError, match="SGRAF"):
        GSC(50, Pooled)


def test_tables_are_training_state() -> None:
    method = gsc()
    method.stored.reset(5)
    method.targets.reset(5)
    method.stored.values[SCORE] = torch.arange(5.0)
    method.targets.values[TARGET] = torch.linspace(0, 1, 5, dtype=torch.float64)
    method.targets_epoch = 4
    other = gsc()
    other.load_training_state(method.training_state())
    assert other.targets_epoch == 4
    assert torch.equal(other.stored.values, method.stored.values)
    assert torch.equal(other.targets.values, method.targets.values)


def tiny_config(root: Path, cache: Path, epochs: int = 3, steps: int = 4, **kwargs) -> Path:
    return method_config(root, cache, METHODS["gsc"], max_epochs=epochs, steps=steps, **kwargs)


def test_fit_splits_every_epoch_and_tests(tmp_path: Path, synthetic_cache: Path) -> None:
    config = tiny_config(tmp_path, synthetic_cache, steps=100)  # every batch: every pair stored
    main(["fit", "--config", str(config)])
    folder = run_folder(tmp_path)
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1, 2]
    # epoch 0 trains on all-one targets; epochs 1 and 2 on the splits after 0 and 1
    for key in ("gsc/target_mean", "gsc/f1", "gsc/gmm_f1", "train/detection/f1",
                "gsc/target_true_clean", "gsc/target_true_noisy"):
        assert sorted(per_epoch(folder, key)) == [1, 2], key
    assert per_epoch(folder, "train/target_mean_epoch")[0] == 1.0
    assert all(0 < v < 1 for v in per_epoch(folder, "gsc/target_mean").values())
    state = last_checkpoint(folder)["ncl_training_state"]
    assert state["targets_epoch"] == 3  # the checkpoint of the last epoch holds the next targets
    stored, table = state["stored"]["values"], state["targets"]["values"]
    assert stored.shape == (2, 300) and table.shape == (4, 300)
    assert bool((stored[SCORE] != 1).all())  # every pair was visited and overwritten
    assert bool(((stored[PRED] > 0) & (stored[PRED] < 1)).all())
    assert torch.equal(table[TARGET], torch.minimum(table[TOPO_TARGET], table[PRED_TARGET]))
    assert bool(((table[POSTERIOR] >= 0) & (table[POSTERIOR] <= 1)).all())
    # three splits from the all-one start: pred = 0.7 p2 + 0.21 p1 + 0.063 p0 + 0.027 > 0.027
    assert bool((table[PRED_TARGET] > 0.027).all()) and bool((table[PRED_TARGET] < 1).all())
    main(["test", "--config", str(config), "--ckpt_path", "best"])
    results = json.loads(next(tmp_path.rglob("test_results.json")).read_text())
    assert "net" in results


def test_warmup_trains_unweighted_and_stores_nothing(tmp_path: Path, synthetic_cache: Path) -> None:
    method = {**METHODS["gsc"], "init_args": {**METHODS["gsc"]["init_args"], "warmup_epochs": 1,
                                               "warmup_loss": "triplet"}}
    config = method_config(tmp_path, synthetic_cache, method, max_epochs=1, steps=3)
    main(["fit", "--config", str(config)])
    state = last_checkpoint(run_folder(tmp_path))["ncl_training_state"]
    assert state["targets_epoch"] == -1  # no split after a warm-up epoch
    assert bool((state["stored"]["values"] == 1).all())


def test_two_cpu_processes_store_both_ranks_scores(tmp_path: Path, synthetic_cache: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step's scores are gathered from both ranks into the table. (The same weights and
    tables on both ranks, the validation counted once: tests/cli/test_ddp_methods.py.)"""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # read by the spawned processes' torch
    config = tiny_config(tmp_path, synthetic_cache, epochs=2, steps=DDP_TRAINER["limit_train_batches"],
                         trainer=DDP_TRAINER, data=DDP_DATA)
    main(["fit", "--config", str(config), *sync_check_args(tmp_path)])
    assert (tmp_path / "sync_ok_world2").read_text() == "1"  # weights and tables equal on both ranks
    state = last_checkpoint(run_folder(tmp_path))["ncl_training_state"]
    assert state["targets_epoch"] == 2
    # 3 steps x 2 ranks x 16 pairs stored per epoch (some twice: the ranks' shards differ per epoch)
    assert int((state["stored"]["values"][SCORE] != 1).sum()) >= 96
