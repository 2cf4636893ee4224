"""The measured tables of ``docs/results.md``, generated from ``ncl/numbers/measured/``.

``python -m ncl.numbers.measured_pages`` prints the page with every generated table
rewritten from the data; ``--write`` rewrites the page in place, ``--check`` exits with 1 when
the page differs. A table stands between two markers, the prose around it stays hand-written::

    <!-- generated: measured <preset> <table> begin -->
    | ... |
    <!-- generated: measured <preset> <table> end -->

Tables (:data:`RENDERERS`): ``rsum`` (test rSum, ``mean ± std [min, max]``),
``recalls <kind>`` (the papers' layout: six recalls, rSum and ``n`` per ratio),
``detection <kind>`` (LNC Table 7 layout), ``purity`` (ReCon's clean sets). Rows come in
the data's order (:func:`ncl.numbers.measured.load_preset`); columns are the kinds and
ratios the data holds. ``table <name>`` is the table file ``<preset>/<name>.table.csv``
(:func:`ncl.numbers.measured.load_table`): its sidecar's header and row labels, each cell
the text of its pieces.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Callable

from ncl.errors import NclUserError
from ncl.io import atomic_write_text
from ncl.numbers.measured import (CLEAN, DETECTION, MEASURED, RECALLS, STAGES, TEST, MeasuredRow,
                                  MeasuredTable, load_preset, load_table)
from ncl.numbers.stats import format_stat

MARKER = re.compile(r"(<!-- generated: measured (?P<preset>\S+) (?P<table>[a-z0-9_ -]+?) begin -->\n)"
                    r"(?P<body>.*?)"
                    r"(<!-- generated: measured (?P=preset) (?P=table) end -->)", re.S)
STAGE_NAMES = {"after_warmup": "after warm-up", "end": "end"}


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _head(cells: list[str]) -> list[str]:
    return [_line(cells), "|" + "---|" * len(cells)]


def kinds(rows: list[MeasuredRow]) -> list[str]:
    """The noise kinds the rows hold (ratio 0, ``clean``, aside)."""
    return sorted({key[0] for row in rows for key in row.stats} - {CLEAN})


def ratios(rows: list[MeasuredRow]) -> list[float]:
    """The noise ratios above 0 the rows hold."""
    return sorted({key[1] for row in rows for key in row.stats if key[1] > 0})


def _percent(ratio: float) -> str:
    return f"{round(100 * ratio)} %"


def rsum_table(rows: list[MeasuredRow]) -> str:
    """Rows = method, columns = clean and (kind, ratio): test rSum ``mean ± std [min, max]``."""
    columns = [(CLEAN, 0.0)] + [(k, r) for k in kinds(rows) for r in ratios(rows)]
    lines = _head(["method"] + ["clean" if k == CLEAN else f"{k} {_percent(r)}" for k, r in columns])
    for row in rows:
        if "rsum" in row.provenance.tables:
            lines.append(_line([row.label] + [format_stat(row.stat(k, r, TEST, "rsum"), with_range=True)
                                              for k, r in columns]))
    return "\n".join(lines)


def recall_table(rows: list[MeasuredRow], kind: str) -> str:
    """Rows = method, column groups = ratio (0 first) with the six recalls, rSum and ``n``
    (the seeds behind the rSum), ``mean ± std``; rows without recalls are left out."""
    noises = [0.0] + ratios(rows)
    head = ["method"]
    for r in noises:
        head += [f"{_percent(r)}: i2t R@1", "R@5", "R@10", "t2i R@1", "R@5", "R@10", "rSum", "n"]
    lines = _head(head)
    for row in rows:
        if "recalls" not in row.provenance.tables or not any(
                row.stat(kind, r, TEST, "i2t_r1") for r in noises):
            continue
        cells = [row.label]
        for r in noises:
            rsum = row.stat(kind, r, TEST, "rsum")
            n = "0" if rsum is None else "-" if rsum.n is None else str(rsum.n)
            cells += [format_stat(row.stat(kind, r, TEST, m)) for m in RECALLS] + [n]
        lines.append(_line(cells))
    return "\n".join(lines)


def _groups(rows: list[MeasuredRow]) -> list[list[MeasuredRow]]:
    """Consecutive rows of one ``group`` (a sidecar key) together; other rows alone."""
    out: list[list[MeasuredRow]] = []
    for row in rows:
        group = row.provenance.group
        if out and group is not None and out[-1][0].provenance.group == group:
            out[-1].append(row)
        else:
            out.append([row])
    return out


def detection_table(rows: list[MeasuredRow], kind: str) -> str:
    """LNC Table 7 layout: rows = (method, stage), column groups = ratio with precision,
    recall and F1 (%) of the detected noisy pairs; the rows of one group stage by stage."""
    noises = ratios(rows)
    lines = _head(["method", "stage"] + [f"{_percent(r)}: {m}" if i == 0 else m
                                         for r in noises for i, m in enumerate(("P", "R", "F1"))])
    for group in _groups(rows):
        shown = [row for row in group if "detection" in row.provenance.tables and any(
            row.stat(kind, r, s, m) for r in noises for s in STAGES for m in DETECTION)]
        for stage in STAGES:
            for row in shown:
                lines.append(_line([row.label, STAGE_NAMES[stage]] + [
                    format_stat(row.stat(kind, r, stage, m)) for r in noises for m in DETECTION]))
    return "\n".join(lines)


def purity_table(rows: list[MeasuredRow]) -> str:
    """ReCon's intra-modal check: truly noisy pairs (%) in ``D_c + D_l`` and in ``D_c``,
    after warm-up and at the end; rows = (method, kind, ratio) that hold them."""
    lines = _head(["method", "noise", "after warm-up: D_c + D_l", "D_c", "end: D_c + D_l", "D_c"])
    for row in rows:
        for kind in kinds(rows):
            for r in ratios(rows):
                if "purity" not in row.provenance.tables or row.stat(kind, r, "end", "clean_noisy") is None:
                    continue
                lines.append(_line([row.label, f"{kind} {_percent(r)}"] + [
                    format_stat(row.stat(kind, r, s, m)) for s in STAGES
                    for m in ("rough_clean_noisy", "clean_noisy")]))
    return "\n".join(lines)


def file_table(table: MeasuredTable) -> str:
    """A table file as markdown: the sidecar's ``columns`` as header, one line per row label
    (the sidecar's order), each cell its pieces' text (an empty cell as ``| |``)."""
    columns = table.provenance.columns
    lines = _head(list(columns))
    for key, label in table.provenance.labels.items():
        cells = [label] + [table.cell(key, column) for column in columns[1:]]
        lines.append("|" + "".join(f" {c} |" if c else " |" for c in cells))
    return "\n".join(lines)


def renderer(table: str) -> Callable[[list[MeasuredRow]], str]:
    """The function that renders a marker's table name."""
    fixed: dict[str, Callable[[list[MeasuredRow]], str]] = {"rsum": rsum_table, "purity": purity_table}
    if table in fixed:
        return fixed[table]
    name, _, kind = table.partition(" ")
    if name == "recalls" and kind:
        return lambda rows: recall_table(rows, kind)
    if name == "detection" and kind:
        return lambda rows: detection_table(rows, kind)
    raise NclUserError(f"unknown generated table {table!r}: "
                       "rsum, purity, recalls <kind>, detection <kind>, table <name>")


#: The table names a marker may carry (``<kind>``: a noise kind of the preset's data;
#: ``<name>``: a table file of the preset).
RENDERERS = ("rsum", "recalls <kind>", "detection <kind>", "purity", "table <name>")


def render_page(text: str, root: Path = MEASURED) -> str:
    """``text`` with the body between every pair of markers rewritten from the data."""
    cache: dict[str, list[MeasuredRow]] = {}

    def replace(match: re.Match[str]) -> str:
        preset = match["preset"]
        if match["table"].startswith("table "):
            body = file_table(load_table(preset, match["table"].removeprefix("table ").strip(), root))
            return f"{match.group(1)}{body}\n{match.group(5)}"
        if preset not in cache:
            cache[preset] = load_preset(preset, root)
        return f"{match.group(1)}{renderer(match['table'])(cache[preset])}\n{match.group(5)}"

    return MARKER.sub(replace, text)


def main(argv: list[str] | None = None) -> int:
    """Print (or ``--write`` / ``--check``) the page with its generated tables."""
    parser = argparse.ArgumentParser(prog="python -m ncl.numbers.measured_pages", description=__doc__.split("\n\n")[0])
    parser.add_argument("--page", type=Path, default=Path("docs/results.md"), help="the page (default docs/results.md)")
    parser.add_argument("--data", type=Path, default=MEASURED, help="the measured rows' folder")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite the page in place")
    action.add_argument("--check", action="store_true", help="exit 1 if the page differs from the data")
    args = parser.parse_args(argv)
    try:
        if not args.page.is_file():
            raise NclUserError(f"--page {args.page}: no such file (run from a checkout, or pass --page)")
        old = args.page.read_text(encoding="utf-8")
        if not MARKER.search(old):
            raise NclUserError(f"--page {args.page}: no '<!-- generated: measured <preset> <table> begin -->' markers")
        new = render_page(old, args.data)
    except NclUserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.check:
        if new != old:
            print(f"{args.page} differs from the measured data: run python -m ncl.numbers.measured_pages --write",
                  file=sys.stderr)
            return 1
        return 0
    if args.write:
        if new != old:
            atomic_write_text(args.page, new)
        return 0
    sys.stdout.write(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
