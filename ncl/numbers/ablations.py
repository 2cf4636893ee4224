"""The papers' ablation and side tables, read from ``ncl/numbers/published/ablations/*.csv``.

Companion of :mod:`ncl.numbers.published` for the rows that are not main results (a loss
ablation, a component ablation, noise-detection scores): they are never offered as a setting's
rows (``ncl results``), only shown on ``docs/paper_rows.md``'s "Ablation and side tables".

One CSV per source paper (:data:`COLUMNS`); each line is one printed row of the paper's
table at one setting: its ``variant`` (the paper's row label), the source (paper, venue, year,
table) and setting (dataset, protocol, noise kind, ratio, backbone), the numbers as printed
(six recalls, rSum, noise-detection recall / precision / F1 in %; blank where the line does
not hold them) and ``shown``: the line's text in the page's "paper" cell, ``{rsum}``,
``{recall}``, ``{precision}``, ``{f1}`` standing for a printed number and ``{sum}`` for the sum
of the six recalls (written ``Σ...`` on the page where the table prints no rSum). A page line
is one ``row`` id (``A1``, ``A2``, ... in numeric order): its lines' texts in file order; its
first line gives the page's ``page_table`` and ``ncl`` cells, later lines leave them blank.

Pure functions of the files; errors (:class:`~ncl.numbers.published.PublishedDataError`) name
the file and the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ncl.numbers.published import (DATA_NAMES, DATASETS, NOISE_KINDS, PROTOCOLS, PUBLISHED_DIR, RECALLS, Number,
                                   PublishedDataError, csv_lines, line_checker,
                                   line_ratio)

#: The folder shipped with the package.
ABLATIONS_DIR = PUBLISHED_DIR / "ablations"
DETECTION = ("det_recall", "det_precision", "det_f1")
NUMBERS = (*RECALLS, "rsum", *DETECTION)
#: Every column of a file, in order.
COLUMNS = ("row", "page_table", "ncl", "variant", "paper", "venue", "year", "table", "dataset", "protocol",
           "noise", "ratio", "backbone", *NUMBERS, "shown", "note")
#: ``shown``'s placeholders and the numbers each needs.
PLACEHOLDERS = {"{rsum}": ("rsum",), "{sum}": RECALLS, "{recall}": ("det_recall",),
                "{precision}": ("det_precision",), "{f1}": ("det_f1",)}
ROW_ID = re.compile(r"A(\d+)")


@dataclass(frozen=True)
class AblationLine:
    """One printed row of an ablation or side table at one setting."""

    file: str
    line: int
    row: str
    page_table: str
    ncl: str
    variant: str
    source: str  # ``RCL (TPAMI 2023) Table 6``
    dataset: str
    protocol: str
    noise: str
    ratio: float | None
    backbone: str
    numbers: dict[str, Number | None]
    shown: str
    note: str

    @property
    def recall_sum(self) -> Number | None:
        """The sum of the six printed recalls, at their finest decimals; None when one is blank."""
        found = [self.numbers[c] for c in RECALLS]
        if any(n is None for n in found):
            return None
        decimals = max(n.decimals for n in found if n is not None)
        return Number(round(sum(n.value for n in found if n is not None), decimals), decimals)

    def text(self) -> str:
        """``shown`` with its placeholders filled in."""
        out = self.shown
        for mark, columns in PLACEHOLDERS.items():
            if mark in out:
                value = self.recall_sum if mark == "{sum}" else self.numbers[columns[0]]
                out = out.replace(mark, str(value))
        return out


def _parse(file: str, line: int, raw: dict[str, str]) -> AblationLine:
    """One CSV line -> AblationLine; PublishedDataError naming the file, line and column."""
    bad = line_checker(file, line, raw, ("row", "variant", "paper", "table", "dataset",
                                         "protocol", "noise", "shown"))
    if not ROW_ID.fullmatch(raw["row"]):
        raise bad("row", "expected A and a number")
    if raw["dataset"] not in DATASETS or raw["protocol"] not in PROTOCOLS \
            or (raw["dataset"], raw["protocol"]) not in DATA_NAMES:
        raise bad("protocol", f"not a protocol of {raw['dataset']!r} ({', '.join(f'{d} {p}' for d, p in DATA_NAMES)})")
    if raw["noise"] not in NOISE_KINDS:
        raise bad("noise", f"expected one of {', '.join(NOISE_KINDS)}")
    ratio = line_ratio(raw, bad)
    numbers: dict[str, Number | None] = {}
    for column in NUMBERS:
        try:
            numbers[column] = Number.parse(raw[column]) if raw[column] else None
        except ValueError:
            raise bad(column, "expected a plain decimal number or blank") from None
    for mark, columns in PLACEHOLDERS.items():
        if mark in raw["shown"] and any(numbers[c] is None for c in columns):
            raise bad("shown", f"{mark} needs {', '.join(columns)}")
    if any(numbers.values()) and not any(mark in raw["shown"] for mark in PLACEHOLDERS):
        raise bad("shown", f"shows none of the line's numbers ({', '.join(PLACEHOLDERS)})")
    try:
        year = int(raw["year"])
    except ValueError:
        raise bad("year", "expected a year") from None
    return AblationLine(file=file, line=line, row=raw["row"], page_table=raw["page_table"], ncl=raw["ncl"],
                        variant=raw["variant"], source=f"{raw['paper']} ({raw['venue']} {year}) {raw['table']}",
                        dataset=raw["dataset"], protocol=raw["protocol"], noise=raw["noise"], ratio=ratio,
                        backbone=raw["backbone"], numbers=numbers, shown=raw["shown"], note=raw["note"])


def read_file(path: Path) -> list[AblationLine]:
    """The lines of one ablations CSV; a row's first line gives its page cells, later ones none."""
    lines: list[AblationLine] = []
    for number, raw in csv_lines(path, COLUMNS):
        found = _parse(path.name, number, raw)
        first = not lines or lines[-1].row != found.row
        if first and any(earlier.row == found.row for earlier in lines):
            raise PublishedDataError(f"{path.name}, line {found.line}: row {found.row}'s lines must be "
                                     "consecutive")
        if (first and not (found.page_table and found.ncl)) or (not first and (found.page_table or found.ncl)):
            raise PublishedDataError(f"{path.name}, line {found.line} (row {found.row}): page_table and "
                                     "ncl are given on a row's first line and only there")
        lines.append(found)
    return lines


def load(directory: Path | None = None) -> tuple[AblationLine, ...]:
    """Every line of every ``*.csv`` in ``directory`` (the shipped folder by default), ordered by
    row id (``A2`` before ``A10``), file order within a row; a row id in two files is an error."""
    folder = ABLATIONS_DIR if directory is None else Path(directory)
    lines: list[AblationLine] = []
    owner: dict[str, str] = {}
    for path in sorted(folder.glob("*.csv")):
        for found in read_file(path):
            if owner.setdefault(found.row, path.name) != path.name:
                raise PublishedDataError(f"{path.name}, line {found.line}: row {found.row} is in "
                                         f"{owner[found.row]} too")
            lines.append(found)
    return tuple(sorted(lines, key=lambda a: int(ROW_ID.fullmatch(a.row).group(1))))  # type: ignore[union-attr]


def page_table(lines: tuple[AblationLine, ...] | None = None) -> str:
    """``docs/paper_rows.md``'s "Ablation and side tables" table: one line per row id."""
    lines = load() if lines is None else lines
    out = ["| # | paper table | rows → ncl | paper |", "|---|---|---|---|"]
    for line in lines:
        if out[-1].startswith(f"| {line.row} |"):
            out[-1] += line.text()
        else:
            out.append(f"| {line.row} | {line.page_table} | {line.ncl} | {line.text()}")
    return "\n".join(f"{text} |" if i > 1 else text for i, text in enumerate(out))
