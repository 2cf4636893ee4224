"""The argument parser of ``python -m ncl.reproduce`` and its ``slurm`` command: a mistake
is one line (:func:`ncl.reproduce.cli.main` prints it as ``ncl: error: ...``, exit status 2),
not argparse's usage text."""

from __future__ import annotations

import argparse
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """argparse whose mistakes raise ``SystemExit(message)`` instead of printing usage."""

    def error(self, message: str) -> NoReturn:
        raise SystemExit(f"{message} (see '{self.prog} --help')")
