"""Small file helpers: atomic writes (nothing half-written ever looks complete) and hashes."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np


def current_umask() -> int:
    """The process's file-mode creation mask (read without changing it where possible)."""
    try:  # Linux: no window in which another thread would see a different umask
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_file_mode() -> int:
    """The mode ``open(path, "w")`` would give a new file: ``0o666`` minus the umask."""
    return 0o666 & ~current_umask()


def new_temporary(path: Path) -> tuple[int, str]:
    """A hidden temporary file beside ``path`` (``(fd, name)``) with a normal file's mode.

    ``tempfile.mkstemp`` creates files with mode ``0o600`` whatever the umask, so a renamed
    checkpoint or dataset would be unreadable by the group on a shared cluster.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if hasattr(os, "fchmod"):  # POSIX; elsewhere mkstemp's mode is all there is
            os.fchmod(fd, default_file_mode())
    except BaseException:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    return fd, tmp


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(handle)`` on a temporary file beside ``path``, then rename it to ``path``.

    A crash leaves at most a hidden ``.<name>.*.tmp`` file, never a truncated ``path``. The
    file gets the mode a plain ``open()`` would give it (``0o666`` minus the umask).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = new_temporary(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write UTF-8 ``text`` atomically."""
    return atomic_write(path, lambda h: h.write(text.encode("utf-8")))


def atomic_save_npy(path: str | Path, array: np.ndarray) -> Path:
    """``np.save`` atomically (the file name is used as given, no ``.npy`` appended)."""
    return atomic_write(path, lambda h: np.save(h, array))


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_array(array: np.ndarray) -> str:
    """Hex SHA-256 of the ``.npy`` serialisation of ``array`` (equals the saved file's hash)."""
    digest = hashlib.sha256()

    class _Sink:
        def write(self, data: bytes) -> int:
            digest.update(data)
            return len(data)

    np.save(_Sink(), np.ascontiguousarray(array))  # type: ignore[arg-type]
    return digest.hexdigest()
