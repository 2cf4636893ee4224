"""``ncl data``: check the data and know the published noise files (issue 27).

``ncl data noise list``                      the registry of published noise-index files
``ncl data noise identify FILE``             which published pairing a file gives, or "new"
``ncl data noise convert FILE OUT --to F``   the same pairing in the other file format
``ncl data check --data_root DIR --dataset NAME [--full] [--config FILE ...]``
                                             is a dataset folder usable (ncl.datatools.layout_check)
``ncl data get URL [URL ...] --out DIR [--sha256 HEX] [--size BYTES] [--unpack]``
                                             a resumable, checked download (ncl.datatools.download)

:func:`ncl.cli.main` hands the words after ``data`` here before LightningCLI sees them: these
commands read files and print, they build no trainer, model or run folder. Like the rest of
the ``ncl`` command, a user's mistake is one ``ncl: error: ...`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

import numpy as np

from ncl.data import noise_registry as registry
from ncl.data.facts import DATASETS, TRAIN_COUNTS
from ncl.errors import NclUserError

#: This module's line in ``ncl --help`` (:mod:`ncl.cli.overview` finds ``*_cli`` modules).
SUMMARY = ("check a dataset folder, identify or convert noise files, download archives "
           "(ncl data check|noise|get)")
#: Exit status of a user error, as everywhere in ``ncl`` (argparse's own convention).
USAGE_ERROR = 2
#: The module ``ncl data check`` runs; imported only when the command is used, so that the
#: noise commands work (and ``--help`` lists ``check``) whatever state that module is in.
LAYOUT_CHECK_MODULE = "ncl.datatools.layout_check"


class _UsageError(Exception):
    """A command-line mistake found by argparse (reported by :func:`main` as one line)."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a mistake as one line instead of usage text and ``exit(2)``.

    The rest of ``ncl`` prints exactly one ``ncl: error:`` line per user error, which tests
    and scripts rely on; argparse's default prints the usage block first.
    """

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{self.prog}: {message} (see '{self.prog} --help')")


def _print_error(message: str) -> None:
    """The one line a user error prints."""
    print(f"ncl: error: {message}", file=sys.stderr)


# --------------------------------------------------------------------------- the parser
def _split_options(parser: argparse.ArgumentParser) -> None:
    """``--dataset`` or ``--n_images/--n_captions``: the training split a noise file is for.

    A noise file's pairing is only defined against a split (its digest depends on the
    captions per image); without either, the split is the known one of the file's length.
    """
    parser.add_argument("--dataset", choices=sorted(TRAIN_COUNTS),
                        help="the training split the file is for (default: the known split "
                             "whose image or caption count is the file's length)")
    parser.add_argument("--n_images", type=int, metavar="N",
                        help="training images of a split of your own (with --n_captions)")
    parser.add_argument("--n_captions", type=int, metavar="N",
                        help="training captions of a split of your own (with --n_images)")


def _build_parser() -> _Parser:
    """``ncl data`` and its subcommands; each leaf stores its handler as ``run``."""
    parser = _Parser(prog="ncl data", description="Check the data and know the noise files.")
    commands = parser.add_subparsers(dest="command", metavar="{noise,check,get}", required=True)

    noise = commands.add_parser("noise", help="the registry of published noise-index files",
                                description="The published noise-index files ncl knows, and "
                                            "which of them a file is.")
    noise_commands = noise.add_subparsers(dest="noise_command", metavar="{list,identify,convert}",
                                          required=True)
    listing = noise_commands.add_parser("list", help="the registered files and their pairings")
    listing.set_defaults(run=_run_list)

    identify = noise_commands.add_parser(
        "identify", help="which published pairing a noise file gives, or 'new'",
        description="Print a noise file's SHA-256, format, noise rate, pairing digest and the "
                    "registered files with the same pairing (in any format), or 'new'.")
    identify.add_argument("file", metavar="FILE", type=Path, help="a noise-index .npy file")
    _split_options(identify)
    identify.add_argument("--json", action="store_true", help="print the result as JSON")
    identify.set_defaults(run=_run_identify)

    convert = noise_commands.add_parser(
        "convert", help="write a noise file's pairing in the other format",
        description="Write FILE's pairing to OUT as a caption-level (one entry per caption) or "
                    "image-level (one entry per image) int64 .npy file. Image level only works "
                    "when all captions of each image move together.")
    convert.add_argument("file", metavar="FILE", type=Path, help="a noise-index .npy file")
    convert.add_argument("out", metavar="OUT", type=Path, help="the file to write")
    convert.add_argument("--to", required=True, choices=("caption", "image"), dest="to_format",
                         help="the format to write")
    _split_options(convert)
    convert.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    convert.set_defaults(run=_run_convert)

    check = commands.add_parser(
        "check", help="is a dataset folder usable",
        description="Check a dataset folder: files, shapes, dtypes, counts, vocabulary, "
                    "NaN/Inf and noise files. Exit status 0 when usable, 2 otherwise.")
    check.add_argument("--data_root", required=True, type=Path, metavar="DIR",
                       help="the folder holding <dataset>/ and vocab/")
    check.add_argument("--dataset", required=True, metavar="NAME",
                       help=", ".join(DATASETS) + " (checked against the official counts) "
                            "or a folder of your own in the precomp layout")
    check.add_argument("--full", action="store_true",
                       help="scan every feature for NaN/Inf (default: a sample)")
    check.add_argument("--config", type=Path, nargs="+", action="extend", default=[],
                       metavar="FILE", dest="configs",
                       help="configs whose noise files must be present and valid (the files "
                            "named as published noise files in the dataset folder are "
                            "always checked)")
    check.set_defaults(run=_run_check)
    _add_get(commands)
    return parser


def _add_get(commands: argparse._SubParsersAction) -> None:
    """``ncl data get``: its own function, the options being many and self-contained."""
    get = commands.add_parser(
        "get", help="download (and unpack) a dataset archive, resumably",
        description="Download a file to DIR/<name>.part, resuming an earlier partial download "
                    "with an HTTP Range request, check its size and SHA-256, then rename it to "
                    "DIR/<name>. Several URLs are mirrors of the same file, tried in order.")
    get.add_argument("urls", metavar="URL", nargs="+", help="the file's URL, then any mirrors")
    get.add_argument("--out", required=True, type=Path, metavar="DIR",
                     help="the folder receiving the file (and what --unpack extracts)")
    get.add_argument("--sha256", metavar="HEX", type=_sha256_hex,
                     help="expected SHA-256 of the file")
    get.add_argument("--size", metavar="BYTES", type=_non_negative, help="expected size")
    get.add_argument("--unpack", action="store_true",
                     help="extract the .tar/.tar.gz/.zip into DIR once it is checked")
    get.add_argument("--retries", metavar="N", type=_non_negative, default=3,
                     help="extra attempts per mirror after a dropped connection (default 3)")
    get.set_defaults(run=_run_get)


def _sha256_hex(text: str) -> str:
    """A 64-digit hex SHA-256 (lower-cased), else an argparse error."""
    if len(text) != 64 or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise argparse.ArgumentTypeError(f"expected 64 hex digits, got {text!r}")
    return text.lower()


def _non_negative(text: str) -> int:
    """An integer >= 0, else an argparse error."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


# ------------------------------------------------------------------- the training split
def _file_length(path: Path) -> int:
    """Entries of a 1-D ``.npy`` file, read from its header only (memory-mapped).

    Raises:
        NclUserError: the file is missing, not a ``.npy`` array or not 1-D (the same
            wording :func:`ncl.data.noise.load_noise_file` would use later).
    """
    if not path.is_file():
        raise NclUserError(f"noise file not found: {path}")
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as err:
        raise NclUserError(f"noise file {path} is not a readable .npy array: {err}") from None
    if not isinstance(arr, np.ndarray):  # np.load opens an .npz archive as a mapping
        raise NclUserError(f"noise file {path} is an .npz archive, not a .npy array")
    if arr.ndim != 1:
        raise NclUserError(f"noise file {path} must be a 1-D integer array, found shape "
                           f"{arr.shape}")
    return int(arr.shape[0])


def _check_own_split(n_images: int, n_captions: int) -> None:
    """A split of one's own has images, and a whole number of captions for each."""
    if n_images <= 0 or n_captions <= 0 or n_captions % n_images:
        raise NclUserError(f"--n_images {n_images} --n_captions {n_captions}: expected positive "
                           "counts with a whole number of captions per image")


def _split_counts(args: argparse.Namespace) -> tuple[int, int]:
    """``(n_images, n_captions)`` of the training split named by the options, or of the
    known split matching the file's length."""
    if (args.n_images is None) != (args.n_captions is None):
        raise NclUserError("--n_images and --n_captions go together")
    if args.n_images is not None and args.dataset is not None:
        raise NclUserError("give --dataset or --n_images/--n_captions, not both")
    if args.n_images is not None:
        _check_own_split(args.n_images, args.n_captions)
    # Read the header whatever the options: a file that is no 1-D .npy array is then one
    # clear line here rather than an error from deeper code that assumes an array.
    length = _file_length(args.file)
    if args.n_images is not None:
        return args.n_images, args.n_captions
    if args.dataset is not None:
        return TRAIN_COUNTS[args.dataset]
    known = registry.counts_for_length(length)
    if known is None:
        raise NclUserError(
            f"noise file {args.file} has {length} entries, which is no known training split's "
            "image or caption count; name the split with --dataset or --n_images/--n_captions")
    return known[1], known[2]


# ------------------------------------------------------------------------ noise list
def _paper_short_names(papers: Sequence[str]) -> str:
    """``RCL, L2RM`` from the registry's full citations (``"RCL: Hu et al., ..."``)."""
    return ", ".join(paper.split(":", 1)[0] for paper in papers)


def registry_table() -> str:
    """The registry as an aligned text table, one row per published file; the ``digests``
    column says whether the digests were computed from the file (``file``) or are presumed
    (``presumed``), and ``drawn by`` the seeded draw of NCR's or RCL's generator that gives the
    file, if known."""
    header = ("name", "dataset", "format", "entries", "ratio", "pairing", "papers", "digests",
              "drawn by")
    rows = [(e.name, e.dataset, e.format, str(e.entries), f"{e.ratio:g}", e.pairing_sha256[:12],
             _paper_short_names(e.papers), "presumed" if e.presumed else "file",
             registry.describe_draw(e.generated_by) if e.generated_by else "-")
            for e in registry.REGISTRY]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in (header, *rows)]
    return "\n".join(lines)


def _run_list(args: argparse.Namespace) -> int:
    """``ncl data noise list``."""
    del args  # no options
    print(registry_table())
    print()
    # Why equal "pairing" columns matter, and what the table leaves out, said once.
    print(textwrap.fill("Rows with the same pairing digest (the first 12 hex shown) give the "
                        "same caption-image pairs in different file formats; runs record it "
                        "as noise_pairing_digest and noise_pairing.", width=100))
    if any(e.presumed for e in registry.REGISTRY):
        print(textwrap.fill(registry.PRESUMED_NOTE, width=100))
    print(textwrap.fill(registry.SEEDED_NOTE, width=100))
    return 0


# -------------------------------------------------------------------- noise identify
def _describe(summary: dict[str, object]) -> str:
    """An identification as ``key: value`` lines (the JSON form is ``--json``)."""
    matches = summary["pairing_name"]
    same_file = summary["same_file"]
    lines = [f"file:            {summary['path']}",
             f"file sha256:     {summary['file_sha256']}",
             f"format:          {summary['format']} level, {summary['length']} entries",
             f"noise rate:      {summary['noise_rate']:.6f}",
             f"pairing digest:  {summary['pairing_sha256']}",
             f"registry:        {matches}"]
    if same_file:
        lines.append(f"same bytes as:   {', '.join(same_file)}")
    if summary["papers"]:
        lines.append(f"used by:         {'; '.join(summary['papers'])}")
    if summary["draws"]:  # the file can be redrawn: noise_seed with the named algorithm
        lines.append(f"drawn by:        {'; '.join(summary['draws'])}")
    return "\n".join(lines)


def _run_identify(args: argparse.Namespace) -> int:
    """``ncl data noise identify FILE``."""
    n_images, n_captions = _split_counts(args)
    found = registry.identify(args.file, n_images, n_captions)
    summary = found.summary()
    print(json.dumps(summary, indent=2) if args.json else _describe(summary))
    return 0


# --------------------------------------------------------------------- noise convert
def _run_convert(args: argparse.Namespace) -> int:
    """``ncl data noise convert FILE OUT --to caption|image``."""
    n_images, n_captions = _split_counts(args)
    try:
        out = registry.convert(args.file, args.out, args.to_format, n_images, n_captions,
                               overwrite=args.overwrite)
    except OSError as err:  # a folder that cannot be written; convert left nothing behind
        raise NclUserError(f"cannot write {args.out}: {err.strerror or err}") from None
    # Read back what was written: the digest shows the pairing survived the conversion.
    written = registry.identify(out, n_images, n_captions)
    print(f"wrote {out}: {written.format} level, {written.length} entries, pairing "
          f"{written.pairing_sha256[:12]} ({written.pairing_name})")
    return 0


# ------------------------------------------------------------------------ data check
def _load_layout_check() -> Callable[..., object]:
    """``check_layout`` of :data:`LAYOUT_CHECK_MODULE`, imported now (not at start-up)."""
    try:
        module = importlib.import_module(LAYOUT_CHECK_MODULE)
    except ModuleNotFoundError as err:
        if err.name != LAYOUT_CHECK_MODULE:
            raise  # a dependency of the module is missing: a real bug, keep the traceback
        raise NclUserError("'ncl data check' is not available in this installation "
                           f"({LAYOUT_CHECK_MODULE} is missing)") from None
    return module.check_layout


def _run_check(args: argparse.Namespace) -> int:
    """``ncl data check``: the report's table and warnings; one error line per problem."""
    check_layout = _load_layout_check()
    report = check_layout(args.data_root, args.dataset, full_scan=args.full,
                          configs=args.configs)
    print(report.table())
    if report.noise_files:
        print("\nnoise files:")
        for line in report.noise_files:
            print(f"  {line}")
    for warning in report.warnings:
        print(f"ncl: warning: {warning}", file=sys.stderr)
    for problem in report.problems:
        _print_error(problem)
    return USAGE_ERROR if report.problems else 0


# -------------------------------------------------------------------------- data get
def _run_get(args: argparse.Namespace) -> int:
    """``ncl data get``: download, check, optionally unpack; print what is now in DIR."""
    from ncl.datatools import download as dl  # imported here: the other commands never need it

    name = dl.file_name(args.urls[0])
    path = dl.download(args.urls, args.out, sha256=args.sha256, size=args.size,
                       retries=args.retries, progress=dl.terminal_progress(name))
    print(f"downloaded {path} ({path.stat().st_size} bytes"
          f"{', sha256 checked' if args.sha256 else ''})")
    if args.unpack:
        for entry in dl.unpack(path, args.out):
            print(f"unpacked {entry}{os.sep if entry.is_dir() else ''}")
    return 0


# ------------------------------------------------------------------------------ main
def main(argv: Sequence[str]) -> int:
    """Run ``ncl data`` with the words after ``data``; returns the exit status.

    User errors (bad options, a file that is missing, invalid or not convertible) print one
    ``ncl: error:`` line and return 2; ``--help`` prints help and returns 0.
    """
    parser = _build_parser()
    try:
        args = parser.parse_args(list(argv))
    except _UsageError as err:
        _print_error(str(err))
        return USAGE_ERROR
    except SystemExit as done:  # --help: argparse printed it and asked to exit
        return int(done.code or 0) if not isinstance(done.code, str) else USAGE_ERROR
    try:
        return args.run(args)
    except NclUserError as err:
        _print_error(str(err))
        return USAGE_ERROR
    except OSError as err:  # e.g. a noise file that cannot be read (permissions)
        name = os.fsdecode(err.filename) if err.filename is not None else "a file"
        _print_error(f"cannot access {name}: {err.strerror or err}")
        return USAGE_ERROR
