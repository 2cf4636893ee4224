"""The docs' tables generated from the numbers files.

``python -m ncl.numbers.pages paper-rows``            print every generated table of
                                                      ``docs/paper_rows.md``, each between its markers
``python -m ncl.numbers.pages paper-rows --write``    replace the tables in the page
``python -m ncl.numbers.pages paper-rows --check``    exit 1 when the page differs

A generated table sits between ``<!-- generated: paper-rows NAME begin -->`` and
``<!-- generated: paper-rows NAME end -->``; the prose around it is written by hand. NAME is a
``section`` of the published rows (one table per section, rows in file order, one line per row
id with its ratios side by side) or ``quoted`` (the rows several papers print for the same
method and setting, where their numbers differ) or ``ablations`` (the papers' ablation and
side tables, :mod:`ncl.numbers.ablations`).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from ncl.numbers import ablations
from ncl.numbers.published import PublishedRow, load, quoted_by_several, rsum_value

#: The page whose tables :func:`paper_rows_blocks` generates (in a source checkout).
PAPER_ROWS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "paper_rows.md"
MARKER = re.compile(r"<!-- generated: paper-rows (\S+) (begin|end) -->")
KIND_SHORT = {"caption": "cap", "image": "img", "real": "real"}
HEADER = ("| # | row | data | noise · ratios | backbone | train | evaluate | paper |\n"
          "|---|---|---|---|---|---|---|---|")


def ratio_short(ratio: float | None) -> str:
    """0 -> ``0``, 0.2 -> ``.2``."""
    if ratio is None:
        return ""
    return "0" if ratio == 0 else f"{ratio:g}".lstrip("0")


def number_cell(row: PublishedRow) -> str:
    """A row's number as the page shows it: the printed rSum; ``Σ`` and the sum of the six
    recalls where the table prints no rSum; ``R@1 a/b`` where a recall is blank; ``not
    checked`` where there is none."""
    value, printed = rsum_value(row)
    if value is not None:
        return f"{value:.1f}" if printed else f"Σ{value:.1f}"
    i2t, t2i = row.recalls[0], row.recalls[3]
    if i2t is not None and t2i is not None:
        return f"R@1 {i2t}/{t2i}"
    return "not checked"


def _groups(rows: Sequence[PublishedRow]) -> list[list[PublishedRow]]:
    """Consecutive rows with the same row id (one page line each)."""
    groups: list[list[PublishedRow]] = []
    for row in rows:
        if groups and groups[-1][0].row == row.row:
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


def noise_cell(group: Sequence[PublishedRow]) -> str:
    """``cap 0/.2/.5``, ``img .2/.4``, ``real``."""
    first = group[0]
    if first.noise == "real":
        return "real"
    return f"{KIND_SHORT[first.noise]} " + "/".join(ratio_short(r.ratio) for r in group)


def section_table(rows: Sequence[PublishedRow]) -> str:
    """One page table: a line per row id, its ratios' numbers joined by `` · ``."""
    lines = [HEADER]
    for group in _groups(rows):
        first = group[0]
        numbers = " · ".join(number_cell(r) for r in group)
        if all(number_cell(r) == "not checked" for r in group):
            numbers = "not checked"
        cells = (first.row, first.label, first.data_name, noise_cell(group), first.backbone,
                 first.train, first.evaluate, numbers)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def quoted_table(rows: Sequence[PublishedRow]) -> str:
    """The same method, model and setting printed by several papers with different rSums
    (printed, or summed from the six recalls)."""
    lines = ["| method | backbone | data | noise | printed by (row): rSum |", "|---|---|---|---|---|"]
    for group in quoted_by_several(rows):
        values = {rsum_value(r)[0] for r in group} - {None}
        if len(values) < 2:
            continue
        cells = [number_cell(r) for r in group]
        first = group[0]
        noise = "real" if first.noise == "real" else f"{KIND_SHORT[first.noise]} {ratio_short(first.ratio)}"
        by = " · ".join(f"{r.paper} {r.table} ({r.row}) {c}" for r, c in zip(group, cells))
        lines.append(f"| {first.method} | {first.backbone} | {first.data_name} | {noise} | {by} |")
    return "\n".join(lines)


def paper_rows_blocks(rows: Sequence[PublishedRow] | None = None,
                      ablation_lines: tuple[ablations.AblationLine, ...] | None = None) -> dict[str, str]:
    """Every generated table of ``docs/paper_rows.md`` by marker name, in data order (the
    shipped files where ``rows`` / ``ablation_lines`` is None)."""
    rows = load() if rows is None else rows
    sections: dict[str, list[PublishedRow]] = {}
    for row in rows:
        sections.setdefault(row.section, []).append(row)
    blocks = {name: section_table(members) for name, members in sections.items()}
    blocks["quoted"] = quoted_table(rows)
    blocks["ablations"] = ablations.page_table(ablation_lines)
    return blocks


def render(blocks: dict[str, str]) -> str:
    """All blocks, each between its markers (what ``paper-rows`` prints)."""
    return "\n\n".join(f"<!-- generated: paper-rows {name} begin -->\n{text}\n"
                       f"<!-- generated: paper-rows {name} end -->" for name, text in blocks.items())


def replace_blocks(page: str, blocks: dict[str, str]) -> str:
    """The page with every marked block replaced; ValueError for a marker without its pair, a
    block the page lacks or one the data lacks."""
    out, pos, seen = [], 0, set()
    for begin in MARKER.finditer(page):
        if begin.group(2) != "begin" or begin.start() < pos:
            continue
        name = begin.group(1)
        end = page.find(f"<!-- generated: paper-rows {name} end -->", begin.end())
        if end < 0:
            raise ValueError(f"marker '{name}' has no end marker")
        if name not in blocks:
            raise ValueError(f"the page marks a table '{name}' that the data does not have")
        out.append(page[pos:begin.end()] + "\n" + blocks[name] + "\n")
        pos, _ = end, seen.add(name)
    missing = [name for name in blocks if name not in seen]
    if missing:
        raise ValueError(f"the page has no markers for: {', '.join(missing)}")
    return "".join(out) + page[pos:]


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m ncl.numbers.pages")
    parser.add_argument("page", choices=["paper-rows"])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="update the page in place")
    mode.add_argument("--check", action="store_true", help="exit 1 when the page differs")
    parser.add_argument("--path", type=Path, default=PAPER_ROWS_PAGE, help="the page file")
    args = parser.parse_args(argv)
    blocks = paper_rows_blocks()
    if not (args.write or args.check):
        print(render(blocks))
        return 0
    text = args.path.read_text(encoding="utf-8")
    try:
        new = replace_blocks(text, blocks)
    except ValueError as err:
        print(f"{args.path}: {err}", file=sys.stderr)
        return 1
    if args.check:
        if new != text:
            print(f"{args.path} differs from the data; run: python -m ncl.numbers.pages "
                  "paper-rows --write", file=sys.stderr)
            return 1
        return 0
    if new != text:
        args.path.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
