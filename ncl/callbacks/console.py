"""The console settings of :mod:`ncl.console` in every process of a run, ``ddp_spawn``'s too."""

from __future__ import annotations

from typing import Any

import lightning as L

from ncl.console import configure_console


class ConsoleInEveryProcess(L.Callback):
    """Applies :func:`configure_console` in a process that receives the trainer by pickling.

    ``strategy: ddp_spawn`` starts each rank as a new interpreter and unpickles the trainer
    there, callbacks included; unpickling is the first ncl code such a process runs, earlier
    than any Lightning hook (the DataModule's ``setup`` warns before callbacks' ``setup``).
    Without it every rank would print, once each, the warnings :mod:`ncl.console` filters and NclWarnings
    in Python's two-line format. Holds no state (nothing is written into checkpoints).
    """

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        # Unpickled by calling _console_configured() (a stateless object's __setstate__
        # would not be called: pickle skips it when there is no state).
        return _console_configured, ()


def _console_configured() -> ConsoleInEveryProcess:
    """:func:`configure_console`, then a new :class:`ConsoleInEveryProcess` (for unpickling)."""
    configure_console()
    return ConsoleInEveryProcess()
