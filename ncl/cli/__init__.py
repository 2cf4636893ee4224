"""The ``ncl`` command (console script ``ncl = "ncl.cli:main"``, or ``python -m ncl.cli``):
runs the application of :mod:`ncl.cli.app`.

``ncl fit | validate | test | predict --config FILE [--config FILE ...] [--key value ...]``;
``ncl`` and ``ncl --help`` say what ncl is and list every subcommand (:mod:`ncl.cli.overview`);
``ncl predict ... --out FILE`` ranks a split's pairs by how likely they are mismatched
(:mod:`ncl.evaluation.ranking`).
``ncl data noise list|identify|convert``, ``ncl data check`` and ``ncl data get`` inspect
data and noise files and download archives (:mod:`ncl.cli.data_cli`); like every tool
subcommand (a module ``ncl/cli/<name>_cli.py``, :func:`ncl.cli.overview.tool_module`) they are
handled before LightningCLI.
Methods (``model``) and DataModules (``data``) are chosen by ``class_path`` in YAML; the
resolved config is saved as ``config.yaml`` in every run directory. User errors end with one
``ncl: error:`` line and exit status 2.
"""

from __future__ import annotations

import importlib
import os
import shlex
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import lightning as L

from ncl.cli.app import NclCLI, added_callbacks  # noqa: F401 - re-exported: names users and tests import
from ncl.cli.overview import tool_module, top_level
from ncl.cli.parser import (  # noqa: F401 - re-exported as well
    _OUTPUT_ROOTS,
    UNAVAILABLE,
    NclArgumentParser,
    _output_error,
    _subcommand_of,
    catalogue,
    check_output_folders,
)
from ncl.console import configure_console
from ncl.errors import NclUserError
from ncl.methods.base import RetrievalMethod


def _root_cause(err: BaseException) -> BaseException:
    """The innermost NclUserError in an exception chain (jsonargparse may wrap it)."""
    seen = err
    while seen is not None:
        if isinstance(seen, NclUserError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return err


def _run_tool(module: str, argv: list[str]) -> None:
    """``ncl data ...``, ``ncl results ...``: a tool subcommand (a ``*_cli`` module of
    :mod:`ncl.cli`, imported here: fit/test never need it); exits with its status when it is
    not 0."""
    status = importlib.import_module(module).main(argv)
    if status:
        raise SystemExit(status)


@contextmanager
def _interrupts_noted() -> Iterator[list[bool]]:
    """Note a Ctrl-C (SIGINT) while the block runs; it still raises KeyboardInterrupt as
    Python's own handler does. Lightning turns that into its graceful shutdown and ``exit(1)``,
    so only the note tells :func:`main` that the user stopped the run. Outside the main thread
    (no signal handlers there) nothing is noted."""
    noted: list[bool] = []

    def note(signum: int, frame: object) -> None:
        noted.append(True)
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGINT, note)
    except ValueError:  # not the main thread
        yield noted
        return
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupted(argv: list[str], subcommand: str | None) -> SystemExit:
    """One line on how to go on after Ctrl-C, and exit status 130 (128 + SIGINT), as shells
    report an interrupted command."""
    line = "ncl: interrupted"
    if subcommand == "fit":
        rest, skip = [], False
        for arg in argv:  # drop a --ckpt_path given before: last is the one to resume from
            if skip or arg.startswith("--ckpt_path="):
                skip = False
                continue
            skip = arg == "--ckpt_path"
            if not skip:
                rest.append(arg)
        line += (": checkpoints of finished epochs are kept; resume with: ncl "
                 + shlex.join([*rest, "--ckpt_path", "last"]))
    print(line, file=sys.stderr)
    return SystemExit(130)


def main(args: Sequence[str] | None = None) -> None:
    """Console entry point. User errors end with one message and exit status 2."""
    configure_console()
    argv = list(args) if args is not None else sys.argv[1:]
    tool = tool_module(argv[0]) if argv else None
    if tool is not None:  # file tools, not a Lightning run: no trainer, config or run folder
        _run_tool(tool, argv[1:])
        return
    subcommand = _subcommand_of(argv)
    status = top_level(argv, subcommand)  # ncl, ncl --help, ncl fitt: before LightningCLI
    if status is not None:
        if status:
            raise SystemExit(status)
        return
    if subcommand in UNAVAILABLE:  # before any parsing, trainer or run folder
        print(f"ncl: error: {UNAVAILABLE[subcommand]}", file=sys.stderr)
        raise SystemExit(2)
    _OUTPUT_ROOTS.clear()
    epilog = catalogue()
    noted: list[bool] = []
    try:
        with _interrupts_noted() as noted:
            _run_application(args, epilog)
    except (KeyboardInterrupt, SystemExit) as stop:
        if noted or isinstance(stop, KeyboardInterrupt):
            raise _interrupted(argv, subcommand) from None
        raise


def _run_application(args: Sequence[str] | None, epilog: str) -> None:
    """The LightningCLI application; a user error is one ``ncl: error:`` line, exit status 2."""
    try:
        NclCLI(RetrievalMethod, L.LightningDataModule, subclass_mode_model=True,
               subclass_mode_data=True, args=list(args) if args is not None else None,
               save_config_kwargs={"overwrite": True}, auto_configure_optimizers=False,
               parser_class=NclArgumentParser,
               parser_kwargs={sub: {"epilog": epilog} for sub in ("fit", "validate", "test", "predict")})
    except Exception as err:  # noqa: BLE001 - only user errors are reported briefly
        cause = _root_cause(err)
        if isinstance(cause, NclUserError):
            print(f"ncl: error: {cause}", file=sys.stderr)
            raise SystemExit(2) from None
        failed_write = _output_error(err)
        if failed_write is not None:  # e.g. a full disk or a folder made read-only mid-run
            print(f"ncl: error: cannot write {os.fsdecode(failed_write.filename)}: "
                  f"{failed_write.strerror}", file=sys.stderr)
            raise SystemExit(2) from None
        raise

