"""What ``ncl`` and ``ncl --help`` print: what ncl is and every subcommand in one line each,
and the one-line errors for a missing or unknown subcommand.

LightningCLI's own top-level help calls the program a "Lightning Trainer command line tool" and
lists fit/validate/test/predict only, so a newcomer never finds ``ncl data`` or the
reproduction tool; :func:`top_level` answers before LightningCLI is built.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence

#: Every subcommand of ``ncl`` -> one line (the LightningCLI ones, then ``data``).
SUBCOMMANDS: dict[str, str] = {
    "fit": "train a method (ncl fit --config configs/rcl_sgr_coco.yaml); resume with --ckpt_path last",
    "validate": "score a checkpoint on the validation split",
    "test": "score a checkpoint on the test split(s) and write test_results.json",
    "predict": "rank a split's pairs by how likely they are mismatched (--out pairs.csv)",
    "data": "check a dataset folder, identify or convert noise files, download archives "
            "(ncl data check|noise|get)",
}

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
    width = max(len(name) for name in SUBCOMMANDS)
    rows = "\n".join(f"  {name:<{width}}  {line}" for name, line in SUBCOMMANDS.items())
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
        print("ncl: error: no subcommand given; one of " + ", ".join(SUBCOMMANDS)
              + " (ncl --help says what each does)", file=sys.stderr)
        return 2
    if subcommand not in SUBCOMMANDS:
        close = difflib.get_close_matches(subcommand, list(SUBCOMMANDS), n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; one of {', '.join(SUBCOMMANDS)}"
        print(f"ncl: error: unknown subcommand '{subcommand}'{hint}", file=sys.stderr)
        return 2
    return None
