"""Write the snapshot of every config in ``configs/`` that has none.

``tests/cli/test_config_snapshot.py`` holds every resolved config the same, as refactors keep
numbers: it compares ``ncl fit --config configs/<name>.yaml --print_config`` with
``tests/cli/config_snapshot/<name>.yaml`` and allows only its listed, reasoned differences.
A new config needs a snapshot; this script writes it with the test's own ``--print_config``
(:func:`print_config`), so a fresh snapshot passes the test. It never replaces a snapshot
unless told to with ``--force`` (a change of a resolved config is a decision: the test lists
the allowed ones with their reasons)::

    python scripts/config_snapshots.py                          # every config without a snapshot
    python scripts/config_snapshots.py --force rcl_sgr_f30k     # write this one again
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections.abc import Collection, Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's ncl, whatever is installed

CONFIGS = REPO / "configs"
SNAPSHOTS = REPO / "tests" / "cli" / "config_snapshot"


def print_config(config: Path) -> str:
    """What ``ncl fit --config <config> --print_config`` prints (run in this process)."""
    from ncl.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(["fit", "--config", str(config), "--print_config"])
    return out.getvalue()


def config_names(configs: Path = CONFIGS) -> list[str]:
    """The configs a snapshot is kept for: every ``configs/<name>.yaml`` (not the fragments in
    its sub-folders), by name."""
    return sorted(p.stem for p in configs.glob("*.yaml"))


def write_snapshots(names: Iterable[str], snapshots: Path = SNAPSHOTS, configs: Path = CONFIGS,
                    force: Collection[str] = ()) -> list[Path]:
    """Write ``<snapshots>/<name>.yaml`` for each of ``names`` that has no snapshot, or is in
    ``force``; an existing snapshot of any other name is left as it is.

    Returns:
        the files written.
    """
    written = []
    for name in names:
        target = snapshots / f"{name}.yaml"
        if target.exists() and name not in force:
            continue
        text = print_config(configs / f"{name}.yaml")
        if not text.strip():
            raise RuntimeError(f"ncl fit --config configs/{name}.yaml --print_config printed nothing")
        snapshots.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    """Write the missing snapshots (and the ``--force`` ones); the exit status."""
    parser = argparse.ArgumentParser(prog="python scripts/config_snapshots.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", nargs="+", default=[], metavar="NAME",
                        help="write these configs' snapshots again (config names without .yaml)")
    args = parser.parse_args(argv)
    names = config_names()
    unknown = sorted(set(args.force) - set(names))
    if unknown:
        parser.error(f"--force {' '.join(unknown)}: no such config in configs/ (a name without .yaml)")
    written = write_snapshots(names, force=set(args.force))
    for path in written:
        print(f"wrote {path.relative_to(REPO)}")
    if not written:
        print("every config has a snapshot; --force NAME writes one again")
    return 0


if __name__ == "__main__":
    sys.exit(main())
