"""The papers' published result rows, read from ``ncl/numbers/published/*.csv``.

One CSV per source paper (a new paper is a new file; no list names them). Each line is one
printed row of one result table at one noise ratio: the six recalls (image->text R@1/5/10,
text->image R@1/5/10, blank where the paper prints '-'), the printed rSum (blank when the table
prints none), the protocol (dataset, test protocol, noise kind, ratio, noise file), the model
(backbone, single or ensemble) and the ncl config that trains it, and the source (paper, venue,
year, table). ``row`` is the row's id on ``docs/paper_rows.md`` and ``section`` the page table
it is shown in.

A printed rSum that is not the sum of its six printed recalls (beyond the paper's rounding) is
kept as printed, and its line says why in ``rsum_note``; :func:`rsum_check` finds them and
``tests/numbers/test_published.py`` fails on one that is not listed, or listed but agreeing.

Pure functions of the files: no torch, no ncl sub-package.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

#: The folder shipped with the package.
PUBLISHED_DIR = Path(__file__).with_name("published")

#: The six recall columns, in the papers' order.
RECALLS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10")
#: Every column of a file, in order.
COLUMNS = ("row", "section", "label", "method", "paper", "venue", "year", "table", "dataset",
           "protocol", "noise", "ratio", "noise_file", "backbone", "ensemble", "selection",
           "train", "evaluate", *RECALLS, "rsum", "rsum_note", "note")
#: The allowed values of the closed columns.
DATASETS = ("f30k", "coco", "cc152k")
PROTOCOLS = ("1k", "5fold1k", "5k")
NOISE_KINDS = ("caption", "image", "real")
#: How a dataset and protocol are named in tables.
DATA_NAMES = {("f30k", "1k"): "F30K", ("coco", "5fold1k"): "COCO 1K", ("coco", "5k"): "COCO 5K",
              ("cc152k", "1k"): "CC152K"}


class PublishedDataError(ValueError):
    """A published-numbers file is malformed; the message names the file and the line."""


@dataclass(frozen=True)
class Number:
    """A printed number and how many decimals it was printed with (its rounding)."""

    value: float
    decimals: int

    @classmethod
    def parse(cls, text: str) -> Number:
        """``"78.1"`` -> Number(78.1, 1); raises ValueError on anything but a plain decimal."""
        if not text or text.strip() != text or text.startswith(("+", "-")):
            raise ValueError(text)
        value = float(text)  # ValueError on garbage
        whole, _, frac = text.partition(".")
        if not whole.isdigit() or (frac and not frac.isdigit()):
            raise ValueError(text)
        return cls(value, len(frac))

    def __str__(self) -> str:
        return f"{self.value:.{self.decimals}f}"


@dataclass(frozen=True)
class PublishedRow:
    """One printed row of a paper's result table at one noise ratio."""

    file: str
    line: int
    row: str
    section: str
    label: str
    method: str
    paper: str
    venue: str
    year: int
    table: str
    dataset: str
    protocol: str
    noise: str
    ratio: float | None
    noise_file: str
    backbone: str
    ensemble: bool
    selection: str
    train: str
    evaluate: str
    recalls: tuple[Number | None, ...]
    rsum: Number | None
    rsum_note: str
    note: str

    @property
    def where(self) -> str:
        """``file.csv, line N (row ID)``: what an error message names."""
        return f"{self.file}, line {self.line} (row {self.row})"

    @property
    def source(self) -> str:
        """``CRCL (NeurIPS 2023) Table 1``."""
        return f"{self.paper} ({self.venue} {self.year}) {self.table}".strip()

    @property
    def data_name(self) -> str:
        """``F30K``, ``COCO 1K``, ``COCO 5K`` or ``CC152K``."""
        return DATA_NAMES.get((self.dataset, self.protocol), f"{self.dataset} {self.protocol}")

    @property
    def recall_sum(self) -> float | None:
        """The sum of the six printed recalls; None when one is blank."""
        if any(r is None for r in self.recalls):
            return None
        return sum(r.value for r in self.recalls if r is not None)


def _ratio_text(ratio: float | None) -> str:
    return "" if ratio is None else f"{ratio:g}"


def line_ratio(raw: dict[str, str], bad: Callable[[str, str], Exception]) -> float | None:
    """A line's noise ratio: ``None`` for real noise, else its ``ratio`` column as a number in
    [0, 1); ``bad(column, why)`` makes the error that names the file and line."""
    if raw["noise"] == "real":
        return None
    try:
        ratio = float(raw["ratio"])
    except ValueError:
        raise bad("ratio", "expected a number in [0, 1)") from None
    if not 0 <= ratio < 1:
        raise bad("ratio", "expected a number in [0, 1)")
    return ratio


def line_checker(file: str, line: int, raw: dict[str, str],
                 required: Iterable[str]) -> Callable[[str, str], PublishedDataError]:
    """``bad(column, why)``, the error naming the file, line, row and column of one CSV line,
    after checking that every ``required`` column is filled (else that error is raised)."""
    where = f"{file}, line {line}" + (f" (row {raw.get('row')})" if raw.get("row") else "")

    def bad(column: str, why: str) -> PublishedDataError:
        return PublishedDataError(f"{where}: {column} {raw.get(column)!r}: {why}")

    for column in required:
        if not raw.get(column):
            raise bad(column, "required")
    return bad


def _parse_line(file: str, line: int, raw: dict[str, str]) -> PublishedRow:
    """One CSV line -> PublishedRow; PublishedDataError naming the file, line and column."""
    bad = line_checker(file, line, raw, ("row", "section", "label", "method", "paper",
                                         "dataset", "protocol", "noise"))
    if raw["dataset"] not in DATASETS:
        raise bad("dataset", f"expected one of {', '.join(DATASETS)}")
    if raw["protocol"] not in PROTOCOLS:
        raise bad("protocol", f"expected one of {', '.join(PROTOCOLS)}")
    if (raw["dataset"], raw["protocol"]) not in DATA_NAMES:
        raise bad("protocol", f"not a protocol of {raw['dataset']}")
    if raw["noise"] not in NOISE_KINDS:
        raise bad("noise", f"expected one of {', '.join(NOISE_KINDS)}")
    if raw["noise"] == "real" and raw["ratio"]:
        raise bad("ratio", "real noise has no ratio (leave it blank)")
    if raw["noise"] != "real" and raw["dataset"] == "cc152k":
        raise bad("noise", "CC152K's noise is real")
    ratio = line_ratio(raw, bad)
    try:
        year = int(raw["year"])
    except ValueError:
        raise bad("year", "expected a year") from None
    if raw["ensemble"] not in ("yes", "no"):
        raise bad("ensemble", "expected yes or no")
    numbers: dict[str, Number | None] = {}
    for column in (*RECALLS, "rsum"):
        text = raw[column]
        if not text:
            numbers[column] = None
            continue
        try:
            numbers[column] = Number.parse(text)
        except ValueError:
            raise bad(column, "expected a plain decimal number or blank") from None
        limit = 600 if column == "rsum" else 100
        if numbers[column].value > limit:  # type: ignore[union-attr]
            raise bad(column, f"above {limit}")
    return PublishedRow(
        file=file, line=line, row=raw["row"], section=raw["section"], label=raw["label"],
        method=raw["method"], paper=raw["paper"], venue=raw["venue"], year=year, table=raw["table"],
        dataset=raw["dataset"], protocol=raw["protocol"], noise=raw["noise"], ratio=ratio,
        noise_file=raw["noise_file"], backbone=raw["backbone"], ensemble=raw["ensemble"] == "yes",
        selection=raw["selection"], train=raw["train"], evaluate=raw["evaluate"],
        recalls=tuple(numbers[c] for c in RECALLS), rsum=numbers["rsum"],
        rsum_note=raw["rsum_note"], note=raw["note"])


def csv_lines(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line number, fields)`` of each line of a CSV whose header must be ``columns``;
    PublishedDataError on another header or a line with another number of fields."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != tuple(columns):
            raise PublishedDataError(f"{path.name}: header must be {','.join(columns)}; "
                                     f"found {','.join(reader.fieldnames or ())}")
        for raw in reader:
            if None in raw or any(v is None for v in raw.values()):
                raise PublishedDataError(f"{path.name}, line {reader.line_num}: expected "
                                         f"{len(columns)} fields")
            yield reader.line_num, raw


def read_file(path: Path) -> list[PublishedRow]:
    """The rows of one published-numbers CSV; PublishedDataError on a wrong header or line."""
    return [_parse_line(path.name, line, raw) for line, raw in csv_lines(path, COLUMNS)]


def load(directory: Path | None = None) -> tuple[PublishedRow, ...]:
    """Every row of every ``*.csv`` in ``directory`` (the shipped folder by default), files in
    name order; PublishedDataError when a (row, dataset, protocol, ratio) appears twice."""
    folder = PUBLISHED_DIR if directory is None else Path(directory)
    rows: list[PublishedRow] = []
    for path in sorted(folder.glob("*.csv")):
        rows.extend(read_file(path))
    seen: dict[tuple[str, str, str, str], PublishedRow] = {}
    for row in rows:
        key = (row.row, row.dataset, row.protocol, _ratio_text(row.ratio))
        if key in seen:
            raise PublishedDataError(f"{row.where}: row {row.row} at ratio "
                                     f"{_ratio_text(row.ratio) or 'real'} is already in "
                                     f"{seen[key].where}")
        seen[key] = row
    return tuple(rows)


def rows_for(rows: Iterable[PublishedRow], dataset: str, noise: str, ratio: float | None,
             protocol: str | None = None) -> list[PublishedRow]:
    """The rows of one setting. At ratio 0 there is no noise, so a caption or image 0 % row
    matches either synthetic kind; ``protocol`` None keeps every protocol."""
    def matches(row: PublishedRow) -> bool:
        if row.dataset != dataset or (protocol is not None and row.protocol != protocol):
            return False
        if noise == "real" or row.noise == "real":
            return row.noise == noise
        if ratio is None or row.ratio is None or abs(row.ratio - ratio) > 1e-9:
            return False
        return row.noise == noise or ratio == 0
    return [row for row in rows if matches(row)]


@dataclass(frozen=True)
class RsumCheck:
    """A printed rSum against the sum of its six printed recalls."""

    row: PublishedRow
    printed: float
    computed: float
    tolerance: float

    @property
    def agrees(self) -> bool:
        """Within the paper's rounding: each of the six recalls and the rSum itself may be off
        by half a unit of its last printed decimal."""
        return abs(self.printed - self.computed) <= self.tolerance + 1e-9


def rsum_check(row: PublishedRow) -> RsumCheck | None:
    """The check of one row; None when the row prints no rSum or lacks a recall."""
    total = row.recall_sum
    if row.rsum is None or total is None:
        return None
    half = [0.5 * 10.0 ** -r.decimals for r in row.recalls if r is not None]
    tolerance = sum(half) + 0.5 * 10.0 ** -row.rsum.decimals
    decimals = max(r.decimals for r in row.recalls if r is not None)
    return RsumCheck(row, row.rsum.value, round(total, decimals), tolerance)


def inconsistent(rows: Iterable[PublishedRow]) -> list[RsumCheck]:
    """The rows whose printed rSum is not the sum of their recalls to the paper's rounding."""
    checks = (rsum_check(row) for row in rows)
    return [check for check in checks if check is not None and not check.agrees]


def rsum_value(row: PublishedRow) -> tuple[float | None, bool]:
    """The row's rSum and whether it is printed (True) or the sum of its recalls (False)."""
    if row.rsum is not None:
        return row.rsum.value, True
    total = row.recall_sum
    if total is None:
        return None, False
    decimals = max(r.decimals for r in row.recalls if r is not None)
    return round(total, decimals), False


def quoted_by_several(rows: Sequence[PublishedRow]) -> list[list[PublishedRow]]:
    """The same method, model and setting printed by two or more papers, side by side: groups
    of rows with equal (method, backbone, dataset, protocol, noise, ratio) from different
    papers, in the order the groups first appear."""
    groups: dict[tuple[str, ...], list[PublishedRow]] = defaultdict(list)
    for row in rows:
        key = (row.method, row.backbone.split(" (")[0], row.dataset, row.protocol, row.noise,
               _ratio_text(row.ratio))
        groups[key].append(row)
    return [group for group in groups.values() if len({row.paper for row in group}) > 1]
