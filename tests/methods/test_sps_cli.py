"""SPS through the real CLI on tiny synthetic data: fit (warm-up, per-network split, strictly
clean, clean and proxy steps), test and predict. The SIGKILL resume, bf16 and two CPU processes
(both ranks' weights and ``training_state()`` compared as bytes after every epoch, every
validation sample counted once) are the shared tests' (``sps`` in tiny_runs.METHODS:
tests/cli/test_resume.py, test_bf16.py, test_ddp_methods.py)."""

from __future__ import annotations

from pathlib import Path

from ncl.cli import main
from tiny_runs import METHODS, last_checkpoint, method_config, per_epoch, run_folder, best_tested_and_predicted


def test_fit_splits_trains_tests_and_predicts(tmp_path: Path, synthetic_cache: Path) -> None:
    config = method_config(tmp_path, synthetic_cache, METHODS["sps"], max_epochs=3, steps=4,
                           data={"noise_type": "caption"})
    main(["fit", "--config", str(config)])
    folder = run_folder(tmp_path)
    assert sorted(per_epoch(folder, "val/rsum")) == [0, 1, 2]
    for net in "AB":
        assert sorted(per_epoch(folder, f"train/{net}/loss_strict_epoch")) == [1, 2]
        assert sorted(per_epoch(folder, f"train/{net}/structure_epoch")) == [1, 2]
    assert sorted(per_epoch(folder, "train/A/loss_proxy_epoch")) == [2]  # noisy_start_epoch 1
    for net in "AB":
        sizes = [per_epoch(folder, f"sps/{net}/{name}")[1] for name in ("strict", "clean", "noisy")]
        assert sum(sizes) == 300
    state = last_checkpoint(folder)["ncl_training_state"]
    assert state["division"]["subset"].shape == (2, 300)

    _, rows = best_tested_and_predicted(config, tmp_path)
    assert len(rows) == 300
