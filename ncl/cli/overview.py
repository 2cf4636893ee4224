"""What ``ncl`` and ``ncl --help`` print: what ncl is and every subcommand in one line each,
and the one-line errors for a missing or unknown subcommand.

LightningCLI's own top-level help calls the program a "Lightning Trainer command line tool" and
lists fit/validate/test/predict only, so a newcomer never finds ``ncl data`` or the
reproduction tool; :func:`top_level` answers before LightningCLI is built.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Sequence
from functools import lru_cache

#: The LightningCLI subcommands -> one line each (Lightning fixes this set).
LIGHTNING_SUBCOMMANDS: dict[str, str] = {
    "fit": "train a method (ncl fit --config configs/rcl_sgr_coco.yaml); resume with --ckpt_path last",
    "validate": "score a checkpoint on the validation split",
    "test": "score a checkpoint on the test split(s) and write test_results.json",
    "predict": "rank a split's pairs by how likely they are mismatched (--out pairs.csv)",
}
#: A module ``ncl/cli/<name>_cli.py`` is the subcommand ``ncl <name>``, answered before
#: LightningCLI: it declares ``SUMMARY`` (its line in ``ncl --help``) and
#: ``main(argv) -> int`` (the words after the subcommand; the exit status). Adding one is
#: adding its file: no list names them.
TOOL_SUFFIX = "_cli"


def tool_module(name: str) -> str | None:
    """The module of the tool subcommand ``name`` (``ncl.cli.<name>_cli``), None if none.

    Found by name without importing it, so ``ncl fit`` never imports a tool."""
    if not name.isidentifier():
        return None
    module = f"{__package__}.{name}{TOOL_SUFFIX}"
    return module if importlib.util.find_spec(module) is not None else None


@lru_cache(maxsize=1)
def tool_subcommands() -> dict[str, str]:
    """Every tool subcommand -> its ``SUMMARY``, by name (the ``*_cli`` modules of ncl.cli)."""
    package = sys.modules[__package__]
    found: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.endswith(TOOL_SUFFIX):
            module = importlib.import_module(f"{__package__}.{info.name}")
            found[info.name[:-len(TOOL_SUFFIX)]] = module.SUMMARY
    return found


def subcommands() -> dict[str, str]:
    """Every subcommand of ``ncl`` -> one line: the LightningCLI ones, then the tools."""
    return {**LIGHTNING_SUBCOMMANDS, **tool_subcommands()}


OVERVIEW = """\
ncl: learning image-text retrieval from noisy correspondence.

The published noise-robust retrieval methods and non-robust baselines (ncl fit --help lists
them) on SGR/SAF, VSE-infinity and a video backbone, over the standard precomputed region
features, with one noise-injection scheme and one evaluation protocol.

usage: ncl SUBCOMMAND [--config FILE ...] [--key value ...]

subcommands:
{rows}

Each subcommand has its own help (ncl fit --help lists every method and DataModule).
Grids of fit + test runs: python -m ncl.reproduce --help.
First run: ncl fit --config configs/quickstart.yaml (README.md)."""


def overview() -> str:
    """The text of ``ncl --help`` (and of ``ncl help``)."""
    listed = subcommands()
    width = max(len(name) for name in listed)
    rows = "\n".join(f"  {name:<{width}}  {line}" for name, line in listed.items())
    return OVERVIEW.format(rows=rows)


def top_level(argv: Sequence[str], subcommand: str | None) -> int | None:
    """Answer a command line that names no runnable subcommand; ``None`` lets it run.

    ``ncl``, ``ncl --help`` / ``-h`` / ``help``: the overview (exit 0 for a help request, 2 with
    one error line for a bare ``ncl``). A first word that is no subcommand (``ncl fitt``): one
    error line naming the closest subcommand, exit 2.
    """
    if subcommand is None and any(arg in ("-h", "--help") for arg in argv) or subcommand == "help":
        print(overview())
        return 0
    if subcommand is None:
        print("ncl: error: no subcommand given; one of " + ", ".join(subcommands())
              + " (ncl --help says what each does)", file=sys.stderr)
        return 2
    known = subcommands()
    if subcommand not in known:
        close = difflib.get_close_matches(subcommand, list(known), n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; one of {', '.join(known)}"
        print(f"ncl: error: unknown subcommand '{subcommand}'{hint}", file=sys.stderr)
        return 2
    return None
