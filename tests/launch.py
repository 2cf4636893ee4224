"""How tests run ``ncl``: in this process (:func:`ncl_here`) unless a process is the point,
and then through the one launcher (:func:`launch`) for a new process.

A bare ``import ncl.cli`` costs about 5 s (10 s on a loaded machine) in a fresh interpreter,
so a new process is kept for what only a process shows: a SIGKILL in the middle of a run, the
console script's exit status and console output (warnings, which pytest captures in-process),
two ranks, a multi-node launch. :func:`launch` records every process it starts in the file
named by ``$NCL_TEST_LAUNCH_LOG`` (when set), so a suite run can count them.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: A file that :func:`launch` appends one line to per process started (unset: no record).
LAUNCH_LOG_ENV = "NCL_TEST_LAUNCH_LOG"
TESTS = Path(__file__).resolve().parent


def ncl_executable() -> str:
    """The installed console script (beside this interpreter when it is not on PATH)."""
    return shutil.which("ncl") or str(Path(sys.executable).parent / "ncl")


def tests_on_pythonpath(env: dict[str, str]) -> dict[str, str]:
    """``env`` with ``tests/`` on PYTHONPATH (after any given), so that a child process can
    import the helper callbacks (``resume_helpers.KillAtStep``) a command line names."""
    paths = [p for p in (env.get("PYTHONPATH"), str(TESTS)) if p]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def _record(cmd: Sequence[str]) -> None:
    """One line per started process in ``$NCL_TEST_LAUNCH_LOG`` (appends are atomic for lines
    this short, so parallel workers can share the file)."""
    log = os.environ.get(LAUNCH_LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '?')}\t{' '.join(map(str, cmd[:3]))}\n")


def launch(cmd: Sequence[str], *, cwd: Path | str | None = None, env: dict[str, str] | None = None,
           timeout: float = 600, popen: bool = False, **kwargs: Any) -> Any:
    """Start ``cmd`` in a new process: ``subprocess.run`` (text output captured unless
    ``kwargs`` say otherwise) or, with ``popen``, a ``subprocess.Popen`` the caller waits for.
    ``env`` defaults to this process's environment with W&B disabled."""
    _record(cmd)
    env = {**os.environ, "WANDB_MODE": "disabled"} if env is None else env
    if popen:
        return subprocess.Popen(list(cmd), cwd=cwd, env=env, **kwargs)
    if "stdout" not in kwargs and "stderr" not in kwargs:
        kwargs["capture_output"] = True
    kwargs.setdefault("text", True)
    return subprocess.run(list(cmd), cwd=cwd, env=env, timeout=timeout, **kwargs)


def _exit_status(code: object) -> int:
    """The process exit status that ``SystemExit(code)`` would give."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def ncl_here(*args: str, cwd: Path | str) -> subprocess.CompletedProcess:
    """``ncl ARGS`` run by :func:`ncl.cli.main` in this process, in ``cwd``, with stdout and
    stderr captured: the same result object as a process gives (return code 0, or the exit
    status of a ``SystemExit``). Any other exception propagates, with its traceback, to the
    test; a process would exit 1 with it on stderr."""
    from ncl.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
            status = 0
        except SystemExit as stop:
            status = _exit_status(stop.code)
    return subprocess.CompletedProcess(["ncl", *args], status, out.getvalue(), err.getvalue())
