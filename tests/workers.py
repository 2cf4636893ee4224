"""Parallel test workers (pytest-xdist, ``-n 2``): which worker this is, and the TCP ports its
two-process runs meet on (a new MASTER_PORT for every test, set by conftest.py)."""

from __future__ import annotations

import os
import socket


def worker_index() -> int:
    """This pytest-xdist worker's number (``gw3`` -> 3); 0 without workers."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


def worker_port(index: int, start: int) -> int:
    """The first free TCP port at or after ``start`` (taken modulo 1,000) in worker ``index``'s
    own block of 1,000 ports (15000 + 1000 * index, below Linux's ephemeral range, so that
    no port the OS hands out collides with it)."""
    block = 15000 + 1000 * index
    for step in range(1000):
        port = block + (start + step) % 1000
        if port_is_free(port):
            return port
    raise RuntimeError(f"no free port in {block}..{block + 999}")
