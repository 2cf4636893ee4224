"""ncl.io: atomic writes give files the mode a plain open() would (issue 9, item 10)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from ncl.io import atomic_save_npy, atomic_write_text, current_umask


@pytest.fixture
def umask():
    """Set the process umask for one test and restore it afterwards."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda mask: os.umask(mask)
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_atomic_write_honours_the_umask(tmp_path: Path, umask, mask: int) -> None:
    umask(mask)
    assert current_umask() == mask
    text = atomic_write_text(tmp_path / "a" / "noise.json", "{}")
    array = atomic_save_npy(tmp_path / "noise_index.npy", np.arange(3))
    plain = tmp_path / "plain.txt"
    plain.write_text("x")  # what a normal open() gives
    for path in (text, array):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask == stat.S_IMODE(plain.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "noise_index.npy", "plain.txt"]


def test_checkpoints_are_group_readable(tmp_path: Path, umask) -> None:
    import torch

    from ncl.runs.checkpoints import AtomicCheckpointIO

    umask(0o027)
    AtomicCheckpointIO().save_checkpoint({"x": torch.ones(1)}, tmp_path / "last.ckpt")
    assert stat.S_IMODE((tmp_path / "last.ckpt").stat().st_mode) == 0o640
