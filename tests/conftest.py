"""Shared fixtures: paths to ../shared/data and tiny datasets in the official layout."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
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


# Two-process runs (``ddp_spawn`` in this process, ``--trainer.devices=2`` in a child) meet on
# MASTER_PORT. Lightning otherwise asks the OS for a free port and then keeps it in os.environ
# for the rest of the process; two parallel workers could draw the same one. Each worker takes
# one from its own block instead (a user's own MASTER_PORT wins).
os.environ.setdefault("MASTER_PORT", str(worker_port(worker_index(), os.getpid())))


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
