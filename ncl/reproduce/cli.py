"""Reproduction grid: methods x backbone x noise kind x noise ratio x seeds, resumable, with tables.

Every cell is ``ncl fit`` then ``ncl test`` of its best checkpoint (by validation rSum) through
the real CLI, in fresh processes. Outputs under ``--out``:

* ``cells/<cell id>.json`` - one file per *finished* cell, written atomically after its test:
  test R@1/5/10 both ways and rSum (and the median ranks where the test writes them), the
  validation curve, noise-detection precision / recall / F1, wall times. A run skips every
  cell whose file exists, so a grid that was killed is continued by running the same command
  again. A killed cell has no file; its rerun resumes the fit from the cell's ``last.ckpt``
  (``--ckpt_path last``), or starts it again when no epoch had finished.
* ``runs/<cell id>/`` (the cell's run folder) and ``logs/<cell id>.log`` (CLI output).
* ``results.md`` - R@1/5/10 both ways and rSum, mean ± std over seeds, one table per noise
  kind (rows = method, column groups = noise ratio), and the noise-detection table
  (precision / recall / F1 after warm-up and at the end, LNC Table 7) for the methods that
  divide the data; ``cells.csv`` - every finished cell as a flat row; ``rsum_vs_noise.png`` -
  test rSum against noise ratio per method with ± std error bars, one panel per noise kind.

Noise kinds: ``caption`` is NCR's caption shuffling, ``image`` RCL's image-level permutation.
Ratio 0 is the same data for both kinds, so it is one cell (kind ``clean``) that stands in
both tables.

Presets (``--preset``; ``--methods``/``--backbones``/``--noise``/``--noise-types``/``--seeds``/
``--epochs`` narrow or change them, ``--extra=--OPTION=VALUE`` adds an override to every cell):

* ``tiny`` - CI smoke test: NCR and RCL (SAF), both kinds, 0 / 50 %, one seed, 2 epochs on
  the ``tiny`` synthetic data (60 images).
* ``synthetic-small`` - every implemented method on the quickstart data (1,000 images x 5
  captions), both kinds, 0/20/50/80 %, seeds 0-2, 8 epochs of batch 16 (313 steps an epoch),
  3 warm-up epochs; about 4 hours (7.7 h of CPU, measured) on an idle 2-core CPU with
  ``--jobs 2`` (docs/results.md, "The reproduction tool").
* ``benchmark`` - the single-seed benchmark of docs/results.md and the method pages: any
  method row on the quickstart data, batch 64, 14 epochs, 5 warm-up epochs.
* ``quickstart`` - configs/quickstart.yaml as shipped over seeds 0-4 (docs/quickstart.md,
  "Measurement"; ``--threads`` and ``--extra=--data.synthetic_seed=N`` vary the rest).
* ``paper`` - the official datasets with the method configs in ``configs/`` (e.g.
  ``configs/ncr_sgr_f30k.yaml``; ``--dataset f30k|coco``), their own schedules: every declared
  row with a paper config, on each of its backbones that has a config for the dataset; needs
  the official features under ``--data-root``. Check the command lines with ``--dry-run``.
* ``video-synthetic`` - configs/*_video_synthetic.yaml as shipped (every declared row with
  one: RCL, summed triplet and LNC) on synthetic video data (docs/video.md).

The grids read the repository's ``configs/`` (``./configs``, or ``--configs DIR``); they are not
part of the installed package. ``python -m ncl.reproduce slurm --out DIR`` writes the SLURM and
torchrun templates for multi-node training instead (see its ``--help``).

Examples:

    python -m ncl.reproduce --preset synthetic-small --jobs 2 --out runs/reproduce
    python -m ncl.reproduce --preset paper --dataset f30k --devices 0,1 --data-root data \\
        --out runs/reproduce_f30k
    python -m ncl.reproduce --preset paper --dry-run --out /tmp/grid
    python -m ncl.reproduce slurm --out slurm
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ncl.reproduce.cells import METHODS, configs_dir
from ncl.reproduce.grid import (
    BACKBONES,
    NOISE_KINDS,
    PAPER_CONFIGS,
    PRESETS,
    Cell,
    Preset,
    Setting,
    backbone_allowed,
    grid,
)
from ncl.reproduce.one_line import OneLineParser
from ncl.reproduce.records import load_records
from ncl.reproduce.runner import Runner, run_all
from ncl.reproduce.tables import write_outputs

PROG = "python -m ncl.reproduce"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The grid's command line."""
    parser = OneLineParser(prog=PROG, description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="synthetic-small")
    parser.add_argument("--out", type=Path, required=True, help="output folder (cells, runs, tables)")
    parser.add_argument("--methods", nargs="+", help="only these methods (of the preset's rows, or any "
                        f"of {sorted(METHODS)} with --backbones)")
    parser.add_argument("--backbones", nargs="+", help="with --methods: every method on each of these")
    parser.add_argument("--noise-types", nargs="+", choices=NOISE_KINDS)
    parser.add_argument("--noise", nargs="+", type=float, help="noise ratios (default: the preset's)")
    parser.add_argument("--seeds", nargs="+", type=int)
    parser.add_argument("--epochs", type=int, help="override the preset's max_epochs")
    parser.add_argument("--extra", action="append", default=[], metavar="=--OPTION=VALUE",
                        help="one more CLI override of every cell (fit and test), repeatable, e.g. "
                             "--extra=--model.optimizer.init_args.lr=2e-4; the cell ids do not "
                             "include it, so give each setting its own --out")
    parser.add_argument("--jobs", type=int, default=1, help="cells at a time on the CPU")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS per cell (default: CPUs // jobs)")
    parser.add_argument("--devices", help="GPU ids, e.g. 0,1: one cell per GPU at a time (CUDA_VISIBLE_DEVICES; replaces --jobs)")
    parser.add_argument("--dataset", default="f30k", choices=["f30k", "coco"], help="paper preset only")
    parser.add_argument("--data-root", help="config presets: folder of the official features")
    parser.add_argument("--configs", type=Path, help="the repository's configs/ folder (default: ./configs)")
    parser.add_argument("--dry-run", action="store_true", help="print the cells' command lines, run nothing")
    parser.add_argument("--tables-only", action="store_true", help="write the tables from finished cells")
    return parser.parse_args(argv)


def select(args: argparse.Namespace, configs: Path) -> tuple[Preset, list[Cell]]:
    """The preset with its rows (a config preset's from ``configs``) and the command line's
    changes, and its cells.

    Raises:
        SystemExit: an option names something the preset cannot run.
    """
    preset = PRESETS[args.preset].resolved(configs, args.dataset)
    rows = list(preset.rows)
    if args.methods:
        unknown = sorted(set(args.methods) - set(METHODS) - set(PAPER_CONFIGS))
        if unknown:
            raise SystemExit(f"--methods: unknown {unknown}; known: {sorted(METHODS)}")
        if args.backbones:
            rows = [(m, b) for m in args.methods for b in args.backbones]
        else:
            rows = [r for r in rows if r[0] in args.methods]
            if not rows:
                raise SystemExit(f"--methods {args.methods}: not in preset {preset.name}; add --backbones")
    elif args.backbones:
        rows = [r for r in rows if r[1].lower() in {b.lower() for b in args.backbones}]
    if not preset.from_configs:
        bad = sorted({b for m, b in rows if not backbone_allowed(m, b)})
        if bad:
            raise SystemExit(f"--backbones {bad}: the synthetic presets run {list(BACKBONES)} (and the "
                             "backbones a method's row declares)")
    if args.epochs is not None and args.epochs < 1:
        raise SystemExit(f"--epochs {args.epochs}: must be at least 1")
    if args.noise and any(not 0 <= n < 1 for n in args.noise):
        raise SystemExit(f"--noise {args.noise}: ratios must lie in [0, 1)")
    preset = replace(preset, rows=tuple(rows),
                     epochs=args.epochs if args.epochs is not None else preset.epochs)
    cells = grid(rows, args.noise_types or preset.noise_types, args.noise or preset.noises,
                 args.seeds if args.seeds is not None else preset.seeds)
    return preset, cells


def main(argv: Sequence[str] | None = None) -> int:
    """Run (or continue) a grid and write its tables; ``slurm`` writes the cluster templates.

    A mistake on the command line (a ``SystemExit`` with a message) is one ``ncl: error:``
    line and exit status 2, as ``ncl``'s own."""
    try:
        return _main(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as stop:
        if not isinstance(stop.code, str):
            raise
        print(f"ncl: error: {PROG}: {' '.join(stop.code.split())}", file=sys.stderr)
        raise SystemExit(2) from None


def _main(argv: list[str]) -> int:
    """:func:`main` without the one-line error report."""
    if argv[:1] == ["slurm"]:
        from ncl.reproduce.slurm import main as slurm_main

        return slurm_main(argv[1:])
    args = parse_args(argv)
    configs = configs_dir(args.configs)
    preset, cells = select(args, configs)
    for option, value in (("--jobs", args.jobs), ("--threads", args.threads)):
        if value is not None and value < 1:
            raise SystemExit(f"{option} {value}: must be at least 1")
    slots = args.devices.split(",") if args.devices else [f"cpu{i}" for i in range(args.jobs)]
    threads = args.threads or max(1, (os.cpu_count() or 1) // len(slots))
    setting = Setting(configs=configs, dataset=args.dataset, data_root=args.data_root,
                      gpu=bool(args.devices), extra=tuple(args.extra))
    runner = Runner(preset, args.out, threads, setting)
    todo = [c for c in cells if not runner.paths(c)[0].exists()]
    print(f"{len(cells)} cells, {len(cells) - len(todo)} finished before, {len(todo)} to run "
          f"({len(slots)} at a time, OMP_NUM_THREADS={threads})", flush=True)
    if args.dry_run:
        for cell in todo:
            try:
                for command in runner.commands(cell):
                    print(shlex.join(command))
            except FileNotFoundError as err:
                print(f"# {cell.id}: {err}")
        return 0
    failed = [] if args.tables_only else run_all(runner, todo, slots)
    kinds = list(args.noise_types or preset.noise_types)
    command = "python -m ncl.reproduce " + shlex.join(argv)
    write_outputs(args.out, load_records(args.out, cells), cells, kinds, command)
    print(f"tables: {args.out / 'results.md'}", flush=True)
    if failed:
        print(f"{len(failed)} cells failed: {failed}", flush=True)
    return 1 if failed else 0
