"""``python -m ncl.reproduce slurm --out DIR``: write the multi-node templates shipped with ncl.

Two commented examples for 2 nodes x 4 GPUs (world size 8), installed as package data
(``ncl/reproduce/templates/``):

* ``ncl_multinode.sbatch`` - SLURM: ``sbatch DIR/ncl_multinode.sbatch``; ``srun`` starts one
  task per GPU and Lightning reads the ranks from SLURM's variables.
* ``ncl_torchrun.sh`` - without SLURM: run on every node with ``NODE_RANK`` and ``MASTER_HOST``
  set; ``torchrun`` starts the processes.

Both train ``configs/rcl_sgr_coco.yaml``: edit the ``ncl fit`` line, and run them from the
folder that holds your ``configs/``.
"""

from __future__ import annotations

import argparse
import stat
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from ncl.reproduce.one_line import OneLineParser

TEMPLATES = ("ncl_multinode.sbatch", "ncl_torchrun.sh")


def template_text(name: str) -> str:
    """The text of the shipped template ``name`` (one of :data:`TEMPLATES`)."""
    return (resources.files("ncl.reproduce") / "templates" / name).read_text(encoding="utf-8")


def write_templates(out: Path, force: bool = False) -> list[Path]:
    """Write every template into ``out`` (created), executable; the paths written.

    Raises:
        FileExistsError: a file of that name exists and ``force`` is false (nothing is written).
    """
    targets = [out / name for name in TEMPLATES]
    existing = [str(p) for p in targets if p.exists()]
    if existing and not force:
        raise FileExistsError(f"{', '.join(existing)} exists; pass --force to overwrite")
    out.mkdir(parents=True, exist_ok=True)
    for path in targets:
        path.write_text(template_text(path.name), encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return targets


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of ``python -m ncl.reproduce slurm``; a mistake is a ``SystemExit`` with its
    message, which :func:`ncl.reproduce.cli.main` prints as one line."""
    parser = OneLineParser(prog="python -m ncl.reproduce slurm", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder to write the templates into")
    parser.add_argument("--force", action="store_true", help="overwrite existing files")
    args = parser.parse_args(argv)
    try:
        written = write_templates(args.out, args.force)
    except FileExistsError as err:
        raise SystemExit(f"slurm: {err}") from None
    for path in written:
        print(f"wrote {path}")
    return 0
