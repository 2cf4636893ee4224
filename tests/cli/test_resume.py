"""Resume: one run folder per run, reused by ``--ckpt_path last``; kill -9 and resume equals
an uninterrupted run for every single-network method and for NCR/LNC (issues 9 and 13; CRCL
and ReCon: tests/methods/test_crcl_cli.py, tests/methods/test_recon_cli.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ncl.cli import main
from ncl.runs.folders import newest_checkpoint, runs_root
from ncl.runs.loggers import WANDB_ID_FILE, NclWandbLogger
from resume_helpers import fit_killed_at
from tiny_runs import METHODS, assert_same_checkpoints, last_checkpoint, method_config, per_epoch, run_folder

STEPS_PER_EPOCH = 4


def write_config(root: Path, cache: Path, method: dict) -> Path:
    return method_config(root, cache, method, max_epochs=3, steps=STEPS_PER_EPOCH)


def val_rsum(folder: Path) -> dict[int, float]:
    return per_epoch(folder, "val/rsum")


def best_tracking(ckpt: dict) -> dict:
    """The state of the checkpoint callback that monitors ``val/rsum``."""
    return next(v for k, v in ckpt["callbacks"].items() if "val/rsum" in k)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_kill_and_resume_equals_uninterrupted(tmp_path: Path, synthetic_cache: Path, name: str) -> None:
    straight_cfg = write_config(tmp_path / "straight", synthetic_cache, METHODS[name])
    main(["fit", "--config", str(straight_cfg)])
    straight = run_folder(tmp_path / "straight")

    killed_cfg = write_config(tmp_path / "killed", synthetic_cache, METHODS[name])
    killed = fit_killed_at(killed_cfg, tmp_path, STEPS_PER_EPOCH + 2)  # mid second epoch
    assert killed.returncode == -9, killed.stderr[-2000:]
    folder = run_folder(tmp_path / "killed")
    assert last_checkpoint(folder)["epoch"] == 0

    main(["fit", "--config", str(killed_cfg), "--ckpt_path", "last"])
    assert run_folder(tmp_path / "killed") == folder  # the same folder, no second run

    assert val_rsum(folder) == val_rsum(straight)
    assert sorted(val_rsum(folder)) == [0, 1, 2]
    ckpt_a, ckpt_b = last_checkpoint(straight), last_checkpoint(folder)
    assert_same_checkpoints(ckpt_a, ckpt_b)  # weights and per-sample state (NCR/LNC)
    if name == "lnc":  # the state LNC adds to NCR is there to be compared
        assert ckpt_b["ncl_training_state"]["momentum_targets"] is not None
        assert per_epoch(folder, "division/abandoned") == per_epoch(straight, "division/abandoned")
    # best-checkpoint tracking survived the resume: same best score, same file name
    best_a, best_b = best_tracking(ckpt_a), best_tracking(ckpt_b)
    assert best_a["best_model_score"] == best_b["best_model_score"]
    assert Path(best_a["best_model_path"]).name == Path(best_b["best_model_path"]).name
    assert len(list((folder / "checkpoints").glob("best*.ckpt"))) == 1


def test_resume_without_checkpoint_is_one_clear_error(tmp_path: Path, synthetic_cache: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    config = write_config(tmp_path, synthetic_cache, METHODS["rcl"])
    for ckpt in ("last", str(tmp_path / "missing.ckpt")):
        with pytest.raises(SystemExit) as stop:
            main(["fit", "--config", str(config), "--ckpt_path", ckpt])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("ncl: error: --ckpt_path") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()  # nothing that looks like a run was started


def test_fresh_if_missing_starts_a_run(tmp_path: Path, synthetic_cache: Path) -> None:
    config = write_config(tmp_path, synthetic_cache, METHODS["rcl"])
    main(["fit", "--config", str(config), "--ckpt_path", "last", "--fresh_if_missing", "true",
          "--trainer.max_epochs=1"])
    assert (run_folder(tmp_path) / "checkpoints" / "last.ckpt").is_file()


def test_corrupt_checkpoint_is_reported(tmp_path: Path, synthetic_cache: Path,
                                        capsys: pytest.CaptureFixture) -> None:
    config = write_config(tmp_path, synthetic_cache, METHODS["rcl"])
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(SystemExit) as stop:
        main(["fit", "--config", str(config), "--ckpt_path", str(bad)])
    assert stop.value.code == 2 and "cannot be read" in capsys.readouterr().err


def test_test_best_of_newest_run(tmp_path: Path, synthetic_cache: Path) -> None:
    config = write_config(tmp_path, synthetic_cache, METHODS["rcl"])
    main(["fit", "--config", str(config), "--trainer.max_epochs=2"])
    best = list((run_folder(tmp_path) / "checkpoints").glob("best*.ckpt"))
    assert len(best) == 1
    main(["test", "--config", str(config), "--ckpt_path", "best"])
    assert list(tmp_path.rglob("test_results.json"))


def test_options_replaced_by_the_checkpoint_are_named(tmp_path: Path, synthetic_cache: Path,
                                                      capfd: pytest.CaptureFixture[str]) -> None:
    """LightningCLI re-applies a checkpoint's hyperparameters over the command line: an
    override it replaces is named in one warning line, and no warning without one."""
    config = write_config(tmp_path, synthetic_cache, METHODS["rcl"])
    main(["fit", "--config", str(config), "--trainer.max_epochs=1"])
    capfd.readouterr()
    main(["test", "--config", str(config), "--ckpt_path", "best"])
    assert "replace the config's" not in capfd.readouterr().err
    main(["fit", "--config", str(config), "--ckpt_path", "last", "--trainer.max_epochs=2"])
    assert "replace the config's" not in capfd.readouterr().err  # a plain resume: silent
    main(["test", "--config", str(config), "--ckpt_path", "best", "--model.init_args.tau=0.3"])
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "replace the config's" in line]
    assert len(lines) == 1 and "model.init_args.tau 0.3 -> 0.05" in lines[0], err[-2000:]


def test_runs_root_and_newest_checkpoint(tmp_path: Path) -> None:
    trainer = {"default_root_dir": str(tmp_path),
               "logger": {"class_path": "ncl.runs.loggers.NclWandbLogger",
                          "init_args": {"save_dir": str(tmp_path / "runs"), "project": "p", "name": "exp"}}}
    root = runs_root(trainer)
    assert root == tmp_path / "runs" / "p" / "exp"
    assert newest_checkpoint(trainer) is None
    for i, stamp in enumerate(["20260101-000000-1", "20260102-000000-2"]):
        ckpt = root / stamp / "checkpoints" / "last.ckpt"
        ckpt.parent.mkdir(parents=True)
        ckpt.write_bytes(b"x")
        os.utime(ckpt, (1000 + i, 1000 + i))
    assert newest_checkpoint(trainer) == root / "20260102-000000-2" / "checkpoints" / "last.ckpt"
    assert runs_root({"default_root_dir": str(tmp_path), "logger": None}) == tmp_path / "lightning_logs"
    assert runs_root({"default_root_dir": str(tmp_path), "logger": False}) is None


def test_wandb_run_id_is_kept_in_the_run_folder(tmp_path: Path) -> None:
    first = NclWandbLogger(project="p", name="exp", save_dir=str(tmp_path), mode="disabled")
    folder = Path(first.save_dir)
    assert folder.parent == tmp_path / "p" / "exp"
    run_id = (folder / WANDB_ID_FILE).read_text().strip()
    assert first._wandb_init["id"] == run_id
    again = NclWandbLogger(project="p", name="exp", save_dir=str(tmp_path), mode="disabled",
                           run_dir=str(folder), resume_epoch=3)
    assert again._wandb_init["id"] == run_id and again._wandb_init["resume"] == "allow"
    assert Path(again.save_dir) == folder
