"""``ncl results``: every published number of one setting side by side (issue 52).

``ncl results --dataset f30k --noise caption --ratio 0.2 [--protocol 1k|5fold1k|5k]
[--format markdown|csv]`` prints the rows of ``ncl/numbers/published/*.csv`` for that setting
(:mod:`ncl.numbers.results`): method, paper and table, backbone, single model or ensemble,
noise file, protocol, checkpoint selection, the six recalls and rSum, with the differences
that matter marked. ``--dataset synthetic-small`` (a preset with measured rows) prints ncl's
grid rows of that setting instead (:func:`ncl.numbers.results.measured_lines`). Reads files and prints: no trainer, config or
run folder. A mistake is one ``ncl: error:`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from ncl.errors import NclUserError
from ncl.numbers.published import DATASETS, NOISE_KINDS, PROTOCOLS, PublishedDataError, load
from ncl.numbers.results import (
    FORMATS,
    csv_text,
    markdown,
    resolve_setting,
    result_lines,
    without_numbers,
)

#: This module's line in ``ncl --help`` (:mod:`ncl.cli.overview` finds ``*_cli`` modules).
SUMMARY = ("the papers' published numbers for one setting side by side "
           "(ncl results --dataset f30k --noise caption --ratio 0.2)")
USAGE_ERROR = 2


class _UsageError(Exception):
    """A command-line mistake argparse found."""


class _Parser(argparse.ArgumentParser):
    """argparse reporting a mistake as one line instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{self.prog}: {message} (see '{self.prog} --help')")


def _parser() -> _Parser:
    parser = _Parser(
        prog="ncl results",
        description="Every published number of one setting side by side: the rows of the "
                    "papers ncl's docs cite (ncl/numbers/published/*.csv), with the protocol "
                    "differences that matter marked (single model or ensemble, noise file, "
                    "checkpoint selection).")
    parser.add_argument("--dataset", required=True, metavar="NAME", help=", ".join(DATASETS))
    parser.add_argument("--noise", required=True, metavar="KIND",
                        help=", ".join(NOISE_KINDS) + " (real: cc152k)")
    parser.add_argument("--ratio", metavar="R", help="the noise ratio, e.g. 0.2 (none for real)")
    parser.add_argument("--protocol", metavar="P",
                        help=", ".join(PROTOCOLS) + " (default: every protocol of the dataset)")
    parser.add_argument("--format", default="markdown", metavar="F", dest="fmt",
                        help=" or ".join(FORMATS) + " (default markdown)")
    return parser


def main(argv: Sequence[str]) -> int:
    """Run ``ncl results`` with the words after ``results``; returns the exit status."""
    try:
        args = _parser().parse_args(list(argv))
    except _UsageError as err:
        print(f"ncl: error: {err}", file=sys.stderr)
        return USAGE_ERROR
    except SystemExit as done:  # --help printed
        return int(done.code or 0) if not isinstance(done.code, str) else USAGE_ERROR
    try:
        if args.fmt not in FORMATS:
            raise NclUserError(f"--format {args.fmt!r}: one of {', '.join(FORMATS)}")
        rows = load()
        setting = resolve_setting(rows, args.dataset, args.noise, args.ratio, args.protocol)
    except (NclUserError, PublishedDataError) as err:
        print(f"ncl: error: {err}", file=sys.stderr)
        return USAGE_ERROR
    lines = result_lines(rows, setting)
    text = (markdown(lines, setting, without_numbers(rows, setting)) if args.fmt == "markdown"
            else csv_text(lines))
    print(text, end="" if text.endswith("\n") else "\n")
    return 0
