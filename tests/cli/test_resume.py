"""Resume: one run folder per run, reused by ``--ckpt_path last``; kill -9 and resume equals
an uninterrupted run for every single-network method (issue 9)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from ncl.cli import main
from ncl.loggers import WANDB_ID_FILE, NclWandbLogger
from ncl.runs import newest_checkpoint, runs_root

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
BACKBONE = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8,
            "similarity_strategy": "chunked"}  # dropout left at 0.4: global-RNG draws matter
METHODS = {
    # random negatives (negative_ratio in (0, 1)) exercise the method's own generator
    "rcl": {"class_path": "ncl.methods.rcl.RCL", "init_args": {"negative_ratio": 0.5}},
    "triplet_warmup": {"class_path": "ncl.methods.baselines.Triplet",
                       "init_args": {"warmup_epochs": 1, "negatives": "hardest"}},
    "infonce_clean": {"class_path": "ncl.methods.baselines.InfoNCE", "init_args": {"clean_only": True}},
    # co-teaching with dropout on: its plans are seeded per epoch, dropout by the base class
    "ncr": {"class_path": "ncl.methods.ncr.NCR", "init_args": {"warmup_epochs": 1, "unlabelled_start": 0}},
}
STEPS_PER_EPOCH = 4


def write_config(root: Path, cache: Path, method: dict) -> Path:
    model = {"class_path": method["class_path"],
             "init_args": {**method["init_args"],
                           "backbone": {"class_path": "ncl.models.sgraf.SGRAF", "init_args": BACKBONE},
                           "optimizer": {"class_path": "torch.optim.Adam", "init_args": {"lr": 2e-3}}}}
    cfg = {
        "seed_everything": 0,
        "trainer": {"accelerator": "cpu", "devices": 1, "max_epochs": 3, "deterministic": True,
                    "log_every_n_steps": 1, "enable_model_summary": False,
                    "enable_progress_bar": False, "limit_train_batches": STEPS_PER_EPOCH,
                    "default_root_dir": str(root / "runs"),
                    "callbacks": [
                        {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                         "init_args": {"monitor": "val/rsum", "mode": "max", "filename": "best-{epoch}"}},
                        {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                         "init_args": {"filename": "last", "enable_version_counter": False}}]},
        "model": model,
        "data": {"class_path": "ncl.data.datamodule.SyntheticDataModule",
                 "init_args": {"preset": "tiny", "cache_dir": str(cache), "batch_size": 16,
                               "eval_batch_size": 64, "noise_type": "image", "noise_ratio": 0.4}},
    }
    root.mkdir(parents=True, exist_ok=True)
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_folder(root: Path) -> Path:
    folders = sorted((root / "runs" / "lightning_logs").iterdir())
    assert len(folders) == 1, folders
    return folders[0]


def val_rsum(folder: Path) -> dict[int, float]:
    with open(folder / "metrics.csv") as handle:
        rows = [r for r in csv.DictReader(handle) if r.get("val/rsum")]
    epochs = [int(r["epoch"]) for r in rows]
    assert len(epochs) == len(set(epochs)), f"duplicated validation rows: {epochs}"
    return {int(r["epoch"]): float(r["val/rsum"]) for r in rows}


def checkpoint_state(folder: Path) -> tuple[dict, dict]:
    ckpt = torch.load(folder / "checkpoints" / "last.ckpt", weights_only=False)
    best = {k: v for k, v in ckpt["callbacks"].items() if "val/rsum" in k}
    return ckpt, next(iter(best.values()))


def kill_during_second_epoch(config: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "ncl.cli", "fit", "--config", str(config),
           "--trainer.callbacks+=resume_helpers.KillAtStep",
           f"--trainer.callbacks.step={STEPS_PER_EPOCH + 2}"]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_kill_and_resume_equals_uninterrupted(tmp_path: Path, synthetic_cache: Path, name: str) -> None:
    straight_cfg = write_config(tmp_path / "straight", synthetic_cache, METHODS[name])
    main(["fit", "--config", str(straight_cfg)])
    straight = run_folder(tmp_path / "straight")

    killed_cfg = write_config(tmp_path / "killed", synthetic_cache, METHODS[name])
    killed = kill_during_second_epoch(killed_cfg, tmp_path)
    assert killed.returncode == -9, killed.stderr[-2000:]
    folder = run_folder(tmp_path / "killed")
    assert torch.load(folder / "checkpoints" / "last.ckpt", weights_only=False)["epoch"] == 0

    main(["fit", "--config", str(killed_cfg), "--ckpt_path", "last"])
    assert run_folder(tmp_path / "killed") == folder  # the same folder, no second run

    assert val_rsum(folder) == val_rsum(straight)
    assert sorted(val_rsum(folder)) == [0, 1, 2]
    ckpt_a, best_a = checkpoint_state(straight)
    ckpt_b, best_b = checkpoint_state(folder)
    for key, value in ckpt_a["state_dict"].items():
        assert torch.equal(value, ckpt_b["state_dict"][key]), key
    if "ncl_training_state" in ckpt_a:  # per-sample state of co-teaching
        assert torch.equal(ckpt_a["ncl_training_state"]["division"]["prob"],
                           ckpt_b["ncl_training_state"]["division"]["prob"])
    # best-checkpoint tracking survived the resume: same best score, same file name
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


def test_runs_root_and_newest_checkpoint(tmp_path: Path) -> None:
    trainer = {"default_root_dir": str(tmp_path),
               "logger": {"class_path": "ncl.loggers.NclWandbLogger",
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
