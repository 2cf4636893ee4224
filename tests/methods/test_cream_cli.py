"""CREAM through the real CLI on tiny synthetic data: fit (warm-up, division, three steps),
test, predict, and a SIGKILL inside the warm-up's selection. The SIGKILL resume after the
warm-up, bf16 and two CPU processes (both ranks' weights and ``training_state()`` compared as
bytes after every epoch, every validation sample counted once) are the shared tests'
(``cream`` in tiny_runs.METHODS: tests/cli/test_resume.py, test_bf16.py, test_ddp_methods.py)."""

from __future__ import annotations

from pathlib import Path

from ncl.cli import main
from resume_helpers import fit_killed_at
from tiny_runs import (METHODS, assert_same_checkpoints, last_checkpoint, method_config, per_epoch,
                       run_folder, best_tested_and_predicted)


def tiny_config(root: Path, cache: Path, **kwargs) -> Path:  # noqa: ANN003 - forwarded
    return method_config(root, cache, METHODS["cream"], max_epochs=3, steps=4,
                         data={"noise_type": "caption"}, **kwargs)


def test_fit_divides_trains_three_steps_tests_and_predicts(tmp_path: Path, synthetic_cache: Path) -> None:
    config = tiny_config(tmp_path, synthetic_cache)
    main(["fit", "--config", str(config)])
    folder = run_folder(tmp_path)
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1, 2]
    assert sorted(per_epoch(folder, "train/A/warmup_infonce_epoch")) == [0]
    for net in "AB":
        assert sorted(per_epoch(folder, f"train/{net}/loss_clean_epoch")) == [1, 2]
    assert sorted(per_epoch(folder, "train/B/loss_noisy_epoch")) == [2]  # noisy_start_epoch 1
    sizes = [per_epoch(folder, f"cream/{name}")[1] for name in ("clean", "hard", "noisy")]
    assert sum(sizes) == 300
    assert sorted(per_epoch(folder, "train/detection/f1")) == [1, 2]
    state = last_checkpoint(folder)["ncl_training_state"]
    assert state["division"]["epoch"] == 2 and state["division"]["prob"].shape == (2, 300)
    assert state["warmup_done"] and state["warmup_best"] is None  # applied, weights dropped

    _, rows = best_tested_and_predicted(config, tmp_path)
    assert len(rows) == 300


def test_killed_inside_the_warmup_resumes_its_selection_exactly(tmp_path: Path,
                                                                 synthetic_cache: Path) -> None:
    """Two warm-up epochs, killed in the second: the checkpoint of the first holds the running
    maxima and the kept epoch's weights, and the resumed run selects, divides and trains as
    the uninterrupted one."""
    method = {**METHODS["cream"], "init_args": {**METHODS["cream"]["init_args"], "warmup_epochs": 2}}

    def config(root: Path) -> Path:
        return method_config(root, synthetic_cache, method, max_epochs=3, steps=4,
                             data={"noise_type": "caption"})

    main(["fit", "--config", str(config(tmp_path / "straight"))])
    straight = run_folder(tmp_path / "straight")
    killed_cfg = config(tmp_path / "killed")
    killed = fit_killed_at(killed_cfg, tmp_path, 4 + 2)  # the second warm-up epoch
    assert killed.returncode == -9, killed.stderr[-2000:]
    folder = run_folder(tmp_path / "killed")
    state = last_checkpoint(folder)["ncl_training_state"]
    assert last_checkpoint(folder)["epoch"] == 0 and not state["warmup_done"]
    assert state["warmup_maxima"] is not None and state["warmup_best"]["epoch"] == 0
    main(["fit", "--config", str(killed_cfg), "--ckpt_path", "last"])
    assert per_epoch(folder, "val/rsum") == per_epoch(straight, "val/rsum")
    assert_same_checkpoints(last_checkpoint(straight), last_checkpoint(folder))
