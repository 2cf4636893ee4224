"""CI runs exactly the README's test command (on parallel workers), fails on a failure or on
an empty collection, and parallel workers keep their two-process runs on their own ports."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from workers import port_is_free, worker_index, worker_port

REPO = Path(__file__).resolve().parents[1]


def readme_test_command() -> str:
    """The ``bash`` block line of the README that installs and runs the tests."""
    lines = [line for line in (REPO / "README.md").read_text().splitlines()
             if line.startswith("python3 -m pip install -r requirements.txt && python3 -m pytest")]
    assert len(lines) == 1, lines
    return lines[0]


def test_ci_runs_the_readme_command_verbatim_on_workers() -> None:
    command = readme_test_command()
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    # the command, then only the capture of its exit status
    assert any(line in (command, f"{command} || status=$?") for line in ci), command
    assert re.search(r"pytest -q -n \d+", command), command  # the suite runs on parallel workers


def fake_ci(tmp_path: Path, pytest_status: int) -> subprocess.CompletedProcess:
    """``.ci/run`` with ``python3`` replaced by a stub whose ``-m pytest`` exits with
    ``pytest_status`` (pip and venv succeed without doing anything)."""
    stub_dir = tmp_path / "bin"
    stub_dir.mkdir()
    stub = stub_dir / "python3"
    stub.write_text("#!/usr/bin/env bash\n"
                    f'if [ "$2" = pytest ]; then exit {pytest_status}; fi\n'
                    'if [ "$2" = venv ]; then mkdir -p "$3/bin"; touch "$3/bin/activate"; fi\n'
                    "exit 0\n")
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{stub_dir}{os.pathsep}{os.environ['PATH']}",
           "NCL_CI_VENV": str(tmp_path / "venv")}
    return subprocess.run(["bash", str(REPO / ".ci" / "run")], env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("status", [0, 1, 5])
def test_ci_exit_status_is_pytest_s(tmp_path: Path, status: int) -> None:
    done = fake_ci(tmp_path, status)
    assert done.returncode == status, done.stderr
    assert ("collected no tests" in done.stderr) == (status == 5)


def test_workers_have_disjoint_port_blocks() -> None:
    ports = {index: worker_port(index, start=os.getpid()) for index in range(4)}
    blocks = {port // 1000 for port in ports.values()}
    assert len(blocks) == 4, ports
    assert all(port < 32768 for port in ports.values())  # below Linux's ephemeral ports


def test_this_worker_has_its_master_port(monkeypatch: pytest.MonkeyPatch, master_port: int) -> None:
    block = 15000 + 1000 * worker_index()
    assert int(os.environ["MASTER_PORT"]) == master_port and block <= master_port < block + 1000
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    assert worker_index() == 3
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert worker_index() == 0


def test_a_held_port_is_passed_over() -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("", 0))
        port = held.getsockname()[1]
        assert not port_is_free(port)
    assert worker_port(0, start=0) == 15000 or not port_is_free(15000)
