"""Shared fixtures: paths to ../shared/data, tiny datasets in the official layout, a MASTER_PORT
per parallel worker, and tiny runs trained once per session for the tests that only read them."""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from helpers import write_split, write_vocab
from workers import worker_index, worker_port

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

os.environ.setdefault("WANDB_MODE", "disabled")  # tests never talk to W&B
# Token ids are cached between runs (ncl.data.token_cache); tests keep theirs apart from the
# user's cache, in one folder per session, so that a test never reads ids an earlier session wrote.
os.environ["NCL_TOKEN_CACHE"] = tempfile.mkdtemp(prefix="ncl-token-cache-")
atexit.register(shutil.rmtree, os.environ["NCL_TOKEN_CACHE"], ignore_errors=True)
# Tiny models are dominated by per-op overhead; with two threads, OpenMP's spin-waiting makes
# them 10-50x slower whenever another process shares the cores. One thread is faster here.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)


#: Where the next test's MASTER_PORT is looked for in this worker's block: offset by the process
#: id, so that two suites on one machine start apart, then one port further for every test.
_next_port = itertools.count(os.getpid() % 1000)


@pytest.fixture(autouse=True)
def master_port(monkeypatch: pytest.MonkeyPatch) -> int:
    """A MASTER_PORT of its own for every test, from this worker's block of ports.

    Two-process runs (``ddp_fork``/``ddp_spawn`` from this process, ``--trainer.devices=2`` in a child) meet
    on MASTER_PORT. Lightning otherwise asks the OS for a free port and then leaves it in
    os.environ for the rest of the process: two parallel workers could draw the same one, and
    a run that reuses the previous run's port can find it still held (TIME_WAIT)."""
    port = worker_port(worker_index(), next(_next_port))
    monkeypatch.setenv("MASTER_PORT", str(port))
    return port


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def tiny_root(tmp_path: Path) -> Path:
    """``<root>/toy_precomp/{train,dev,test}`` (5 captions per image) and its vocabulary."""
    data_dir = tmp_path / "toy_precomp"
    write_split(data_dir, "train", 20, seed=0)
    write_split(data_dir, "dev", 6, seed=1)
    write_split(data_dir, "test", 6, seed=2)
    write_vocab(tmp_path / "vocab" / "toy_precomp_vocab.json", ["a", "dog", "runs", "on", "the", "grass"])
    return tmp_path


@pytest.fixture(scope="session")
def synthetic_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache folder for generated synthetic datasets, shared by the session's tests."""
    return tmp_path_factory.mktemp("synthetic_cache")


#: The tiny backbone of the shared trained runs (the ``tiny`` preset's 6 regions x 16 dims).
TINY_SGRAF_DIMS = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8}


def train_rcl_f30k(root: Path, cache: Path, module: str) -> Path:
    """``ncl fit`` of configs/rcl_<module>_f30k.yaml for 4 steps on the tiny preset with 40%
    caption noise (seed 0) and tiny dims, in ``root``; the best checkpoint."""
    import contextlib

    import yaml

    from ncl.cli import main

    config = REPO / "configs" / f"rcl_{module.lower()}_f30k.yaml"
    override = root / f"fit_{module}.yaml"
    override.write_text(yaml.safe_dump({
        "data": {"class_path": "ncl.data.datamodule.SyntheticDataModule",
                 "init_args": {"preset": "tiny", "n_train": None, "cache_dir": str(cache), "batch_size": 16,
                               "eval_batch_size": 32, "noise_type": "caption", "noise_ratio": 0.4,
                               "noise_seed": 0, "noise_file": None}},
        "model": {"init_args": {"backbone": {"init_args": TINY_SGRAF_DIMS}}},
        "trainer": {"max_epochs": 1, "limit_train_batches": 4, "accelerator": "cpu",
                    "enable_progress_bar": False}}))
    with contextlib.chdir(root):  # the config writes runs/<project>/<name>/... under the cwd
        main(["fit", "--config", str(config), "--config", str(override)])
    [found] = sorted((root / "runs" / "ncl" / config.stem).rglob("best-*.ckpt"))
    return found


@pytest.fixture(scope="session")
def rcl_f30k_checkpoint(tmp_path_factory: pytest.TempPathFactory,
                        synthetic_cache: Path) -> Callable[[str], Path]:
    """``checkpoint("SGR" | "SAF")``: the best checkpoint of :func:`train_rcl_f30k`, trained
    once per test session (per worker) for every test that only reads it (``ncl predict``,
    ``ncl test`` of ensembles). A test that would write into the run copies it first."""
    trained: dict[str, Path] = {}

    def checkpoint(module: str) -> Path:
        if module not in trained:
            trained[module] = train_rcl_f30k(tmp_path_factory.mktemp(f"rcl_{module.lower()}_f30k"),
                                             synthetic_cache, module)
        return trained[module]

    return checkpoint
