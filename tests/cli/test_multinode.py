"""Multi-node examples: the scripts parse, and two torchrun "nodes" on localhost train together.

The two-node run is what ``ncl_torchrun.sh`` (written by ``python -m ncl.reproduce slurm``) does
on two machines, with one CPU process per "node" and gloo (Lightning's choice on CPU): each node
runs its own ``torchrun`` (``--nnodes 2 --node_rank 0/1``), both meet at 127.0.0.1, and Lightning
takes the ranks from torchrun's environment (TorchElasticEnvironment). It must see a world of 2
and finish the epoch.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from launch import launch

REPO = Path(__file__).resolve().parents[2]
SLURM_DIR = REPO / "ncl" / "reproduce" / "templates"  # package data
SCRIPTS = [SLURM_DIR / "ncl_multinode.sbatch", SLURM_DIR / "ncl_torchrun.sh"]
TINY_BACKBONE = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8}
TIMEOUT_S = 240


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_script_is_valid_bash(script: Path) -> None:
    assert script.is_file()
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not found")
    result = subprocess.run([bash, "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    text = script.read_text()
    # the trainer flags that must agree with the launcher's node and process counts
    assert "--trainer.num_nodes" in text and "--trainer.devices" in text


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun() -> list[str]:
    exe = Path(sys.executable).parent / "torchrun"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "torch.distributed.run"]


def test_two_nodes_on_localhost(tmp_path: Path, synthetic_cache: Path) -> None:
    from ncl.data.datamodule import SyntheticDataModule

    # Generate the tiny dataset once here, so that the two nodes do not race to write it.
    SyntheticDataModule(preset="tiny", cache_dir=str(synthetic_cache))
    root = tmp_path / "root"
    override = {
        "data": {"class_path": "ncl.data.datamodule.SyntheticDataModule",
                 "init_args": {"preset": "tiny", "cache_dir": str(synthetic_cache),
                               "batch_size": 8, "eval_batch_size": 32, "noise_file": None}},
        "model": {"init_args": {"backbone": {"init_args": TINY_BACKBONE}}},
        "trainer": {"max_epochs": 1, "limit_train_batches": 2, "accelerator": "cpu",
                    "default_root_dir": str(root), "enable_progress_bar": False,
                    "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                               "init_args": {"save_dir": str(root), "name": "multinode"}}},
    }
    config = tmp_path / "tiny_multinode.yaml"
    config.write_text(yaml.safe_dump(override))
    port = free_port()
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1"}
    procs, logs = [], []
    for node_rank in (0, 1):
        node_dir = tmp_path / f"node{node_rank}"  # each "machine" starts in its own directory
        node_dir.mkdir()
        log = node_dir / "log.txt"
        logs.append(log)
        cmd = [*torchrun(), "--nnodes", "2", "--nproc_per_node", "1", "--node_rank", str(node_rank),
               "--master_addr", "127.0.0.1", "--master_port", str(port),
               "-m", "ncl.cli", "fit", "--config", str(REPO / "configs" / "rcl_sgr_f30k.yaml"),
               "--config", str(config),
               "--trainer.num_nodes", "2", "--trainer.devices", "1", "--trainer.strategy", "ddp"]
        with log.open("w") as out:
            procs.append(launch(cmd, popen=True, cwd=node_dir, env=env, stdout=out,
                                stderr=subprocess.STDOUT))
    try:
        codes = [p.wait(timeout=TIMEOUT_S) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    texts = [log.read_text() for log in logs]
    for node_rank, (code, text) in enumerate(zip(codes, texts)):
        assert code == 0, f"node {node_rank} exited {code}:\n{text[-4000:]}"
    # Lightning saw two processes, rank 1 on the second node, and chose gloo on CPU.
    assert "GLOBAL_RANK: 0, MEMBER: 1/2" in texts[0], texts[0][-4000:]
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in texts[1], texts[1][-4000:]
    assert "distributed_backend=gloo" in texts[0]
    assert "Starting with 2 processes" in texts[0]
    # ncl's start-up note on rank 0 reports the world size it saw.
    assert "2 processes each train on data.batch_size=8" in texts[0]
    # The epoch ran to its end: rank 0 wrote the last checkpoint and the validation metrics.
    ckpt = list(root.rglob("last.ckpt"))
    assert len(ckpt) == 1, sorted(str(p) for p in root.rglob("*"))
    import torch
    state = torch.load(ckpt[0], map_location="cpu", weights_only=False)
    assert state["epoch"] == 0 and state["global_step"] >= 2
    metrics = list(root.rglob("metrics.csv"))
    assert len(metrics) == 1 and "val/rsum" in metrics[0].read_text().splitlines()[0]
