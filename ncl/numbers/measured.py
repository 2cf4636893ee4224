"""ncl's measured rows as data: the reproduction grid's rows of the presets ncl publishes.

Files, under ``ncl/numbers/measured/<preset>/`` (one file per grid run; a new method's row is
a new file, never an edit of a shared one):

* ``<name>.csv`` - per-cell records as the grid writes them in ``cells.csv``
  (:data:`CELL_COLUMNS`; :func:`flat_row` makes one from a cell's ``cells/<id>.json``): one
  line per (method, noise kind, ratio, seed), test recalls and rSum, times, and the noise
  detection after warm-up and at the end (fractions, as logged) where the method divides.
* ``<name>.summary.csv`` - aggregate-only rows, for runs whose per-cell records were lost:
  what the docs printed, one line per (label, noise kind, ratio, stage, metric) with ``n``,
  ``mean``, ``std``, ``min``, ``max`` as printed (:data:`SUMMARY_COLUMNS`; detection in %,
  ``n`` / ``std`` / ``min`` / ``max`` empty where the page did not print them). Never per-seed
  values.
* ``<name>.table.csv`` - one measured table whose columns are not the grid's (single-seed
  measurements, validation rSum per epoch, ...), one line per piece of a cell
  (:data:`TABLE_COLUMNS`): the table ``row`` (a key of the sidecar's ``labels``) and
  ``column`` (one of the sidecar's ``columns``) it stands in, the run it was measured on
  (``seed``, ``epoch``; empty where not one), the ``metric`` (what was measured, with any
  variant of the run's settings), the ``value`` as printed (empty for a piece of text only)
  and ``shown``: the piece's text in its cell, ``{}`` standing for the value (empty: ``{}``
  alone), ``{min}`` / ``{max}`` for the smallest / largest value of the cell's pieces of the
  same metric (a range over seeds). A cell is its pieces' texts in file order. Table files are
  never grid rows (:func:`load_preset` and :func:`rows_for` skip them); they are read by
  :func:`load_table`.
* ``<name>.json`` - the sidecar of any of them (:class:`Provenance`): the command, commit,
  machine and load, dates, a note, the label each CSV label (a table's row key) is shown as,
  and the file's ``order`` in the tables (rows only); a table's sidecar also gives its
  ``columns`` (the header, the rows' header first).

Pure: reads files, returns frozen records; a bad file raises :class:`MeasuredDataError`
naming the file and the line.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ncl.errors import NclUserError
from ncl.numbers.stats import Stat, stat_of

#: Where the package's measured rows live.
MEASURED = Path(__file__).resolve().parent / "measured"
RECALLS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum")
DETECTION = ("precision", "recall", "f1")
#: ReCon's clean-set purity: truly noisy share of ``D_c + D_l`` and of ``D_c``.
PURITY = ("rough_clean_noisy", "clean_noisy")
TEST = "test"
STAGES = ("after_warmup", "end")
CLEAN = "clean"
#: The tables a row can stand in (a sidecar's ``tables``; all by default).
TABLES = ("rsum", "recalls", "detection", "purity")
BASE_COLUMNS = ("id", "label", "method", "backbone", "noise_type", "noise", "seed", *RECALLS,
                "i2t_medr", "t2i_medr", "best_val_rsum", "last_val_rsum", "fit_seconds", "test_seconds",
                "wall_seconds", "cpu_seconds", "resumed", "finished")
DETECTION_COLUMNS = tuple(f"{stage}_{m}" for stage in STAGES for m in ("epoch", *DETECTION, *PURITY))
#: The columns of the grid's ``cells.csv`` and of a per-cell file here.
CELL_COLUMNS = BASE_COLUMNS + DETECTION_COLUMNS
REQUIRED_CELL_COLUMNS = ("id", "label", "noise_type", "noise", "seed", *RECALLS)
SUMMARY_COLUMNS = ("label", "noise_type", "noise", "stage", "metric", "n", "mean", "std", "min", "max")
SIDECAR_REQUIRED = ("order", "labels", "command", "commit", "machine", "load", "dates", "note")
SIDECAR_OPTIONAL = ("group", "tables", "cells")
#: The columns of a ``<name>.table.csv`` file (one line per piece of a cell).
TABLE_COLUMNS = ("row", "column", "seed", "epoch", "metric", "value", "shown")
#: A table file's sidecar: no ``order`` (its place is its marker), its header as ``columns``.
TABLE_SIDECAR_REQUIRED = tuple(k for k in SIDECAR_REQUIRED if k != "order") + ("columns",)
TABLE_SUFFIX = ".table.csv"
PRINTED = re.compile(r"-?\d+(\.\d+)?")

#: ``(noise kind, ratio, stage, metric)``: the key of one aggregated value.
Key = tuple[str, float, str, str]


class MeasuredDataError(NclUserError):
    """A measured-rows file is missing, malformed or inconsistent (the message names it)."""


def flat_row(record: dict[str, Any]) -> dict[str, Any]:
    """One ``cells.csv`` line (:data:`CELL_COLUMNS`) from a cell's record (``cells/<id>.json``):
    the test recalls, the last validation rSum and the detection per stage flattened to
    ``<stage>_<metric>``; keys the record lacks stay empty."""
    row: dict[str, Any] = {**record, **record.get("test", {}),
                           "last_val_rsum": (record.get("val_rsums") or [None])[-1]}
    for stage, found in (record.get("detection") or {}).items():
        row.update({f"{stage}_{m}": v for m, v in found.items() if f"{stage}_{m}" in DETECTION_COLUMNS})
    return {k: ("" if row.get(k) is None else row[k]) for k in CELL_COLUMNS}


@dataclass(frozen=True)
class Provenance:
    """A measured file's sidecar: where its numbers come from and how it is shown."""

    path: Path
    order: float
    labels: dict[str, str]  # CSV label -> the label shown in the tables (their order in the file)
    command: str
    commit: str
    machine: str
    load: str
    dates: str
    note: str
    group: str | None = None  # files of one group show their detection rows stage by stage
    tables: tuple[str, ...] = TABLES
    cells: str | None = None
    columns: tuple[str, ...] = ()  # a table file's header (the rows' header first)


@dataclass(frozen=True)
class MeasuredRow:
    """One row of the tables: a label of a file, its values aggregated over seeds.

    ``stats`` maps ``(noise kind, ratio, stage, metric)`` to a :class:`Stat`; stage ``test``
    holds :data:`RECALLS`, ``after_warmup`` / ``end`` the detection in % (:data:`DETECTION`,
    :data:`PURITY`). Ratio 0 is the kind ``clean``. ``source`` is ``cells`` (computed from
    per-cell records) or ``summary`` (aggregate only)."""

    label: str
    source: str
    provenance: Provenance
    stats: dict[Key, Stat] = field(repr=False)

    def stat(self, kind: str, ratio: float, stage: str, metric: str) -> Stat | None:
        """The value at a setting (ratio 0: the clean cells, whatever ``kind``)."""
        return self.stats.get(_key(CLEAN if ratio == 0 else kind, ratio, stage, metric))


@dataclass(frozen=True)
class RowAtSetting:
    """One measured row at one setting (:func:`rows_for`): test recalls and rSum over seeds."""

    label: str
    source: str
    n: int | None
    recalls: dict[str, Stat]
    provenance: Provenance


def _key(kind: str, ratio: float, stage: str, metric: str) -> Key:
    return (kind, round(float(ratio), 6), stage, metric)


def _fail(path: Path, line: int | None, what: str) -> MeasuredDataError:
    where = f"{path}, line {line}" if line else str(path)
    return MeasuredDataError(f"{where}: {what}")


def _number(path: Path, line: int, column: str, text: str | None, kind: type = float) -> Any:
    try:
        return kind(text)
    except (TypeError, ValueError):
        raise _fail(path, line, f"column {column!r} is {text!r}, not a number") from None


def _optional(path: Path, line: int, column: str, text: str | None, kind: type = float) -> Any:
    return None if text in (None, "") else _number(path, line, column, text, kind)


def read_sidecar(path: Path, table: bool = False) -> Provenance:
    """The sidecar ``<name>.json`` (keys :data:`SIDECAR_REQUIRED`, optional
    :data:`SIDECAR_OPTIONAL`; a table file's: :data:`TABLE_SIDECAR_REQUIRED`)."""
    if not path.exists():
        raise _fail(path, None, "missing: every measured CSV needs its sidecar <name>.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise _fail(path, error.lineno, f"not valid JSON ({error.msg})") from None
    if not isinstance(data, dict):
        raise _fail(path, 1, "must hold one JSON object")
    required, optional = (TABLE_SIDECAR_REQUIRED, ()) if table else (SIDECAR_REQUIRED, SIDECAR_OPTIONAL)
    missing = [k for k in required if k not in data]
    unknown = sorted(set(data) - set(required) - set(optional))
    if missing or unknown:
        raise _fail(path, None, f"missing keys {missing}, unknown keys {unknown} "
                                f"(keys: {list(required)}, optional {list(optional)})")
    labels = data["labels"]
    if not isinstance(labels, dict) or not labels or not all(isinstance(v, str) and v for v in labels.values()):
        raise _fail(path, None, "'labels' must map each CSV label to the label shown in the tables")
    tables = tuple(data.get("tables", TABLES))
    if not set(tables) <= set(TABLES):
        raise _fail(path, None, f"'tables' holds {sorted(set(tables) - set(TABLES))}; known: {list(TABLES)}")
    if not isinstance(data.get("order", 0), (int, float)):
        raise _fail(path, None, f"'order' is {data['order']!r}, not a number")
    columns = data.get("columns", [])
    if table and (not isinstance(columns, list) or len(columns) < 2
                  or not all(isinstance(c, str) and c for c in columns)):
        raise _fail(path, None, "'columns' must list the table's header, the rows' header first")
    text = {k: data[k] for k in ("command", "commit", "machine", "load", "dates", "note")}
    if not all(isinstance(v, str) and v.strip() for v in text.values()):
        raise _fail(path, None, "'command', 'commit', 'machine', 'load', 'dates' and 'note' must be non-empty text")
    return Provenance(path=path, order=float(data.get("order", 0)), labels=dict(labels), group=data.get("group"),
                      tables=tables, cells=data.get("cells"), columns=tuple(columns), **text)


def _rows(path: Path, required: Iterable[str]) -> list[tuple[int, dict[str, str]]]:
    """``(line, row)`` of a CSV file whose header holds ``required``."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise _fail(path, 1, f"the header lacks {missing}")
        out = []
        for row in reader:
            if None in row or any(v is None for v in row.values()):
                raise _fail(path, reader.line_num, "the line has a different number of fields than the header")
            out.append((reader.line_num, row))
    return out


def _setting(path: Path, line: int, row: dict[str, str]) -> tuple[str, float]:
    kind = row["noise_type"].strip()
    ratio = _number(path, line, "noise", row["noise"])
    if not kind or not 0 <= ratio < 1:
        raise _fail(path, line, f"noise kind {kind!r} at ratio {ratio}: expected a kind and a ratio in [0, 1)")
    if (kind == CLEAN) != (ratio == 0):
        raise _fail(path, line, f"noise kind {kind!r} at ratio {ratio}: ratio 0 is the kind 'clean' and only it")
    return kind, ratio


def read_cells(path: Path, labels: dict[str, str]) -> dict[str, dict[Key, list[float]]]:
    """Per-cell records: ``{CSV label: {key: per-seed values}}`` (detection in %)."""
    found: dict[str, dict[Key, list[float]]] = {}
    seen: set[tuple[str, str, float, int]] = set()
    for line, row in _rows(path, REQUIRED_CELL_COLUMNS):
        label = row["label"]
        if label not in labels:
            raise _fail(path, line, f"label {label!r} is not in the sidecar's 'labels' {list(labels)}")
        kind, ratio = _setting(path, line, row)
        seed = _number(path, line, "seed", row["seed"], int)
        if (label, kind, ratio, seed) in seen:
            raise _fail(path, line, f"a second cell for {label!r}, {kind} {ratio}, seed {seed}")
        seen.add((label, kind, ratio, seed))
        values = found.setdefault(label, {})
        for metric in RECALLS:
            values.setdefault(_key(kind, ratio, TEST, metric), []).append(
                _number(path, line, metric, row[metric]))
        for stage in STAGES:
            for metric in (*DETECTION, *PURITY):
                value = _optional(path, line, f"{stage}_{metric}", row.get(f"{stage}_{metric}"))
                if value is not None:
                    values.setdefault(_key(kind, ratio, stage, metric), []).append(100 * value)
    return found


def read_summary(path: Path, labels: dict[str, str]) -> dict[str, dict[Key, Stat]]:
    """Aggregate-only rows: ``{CSV label: {key: Stat}}`` as printed."""
    found: dict[str, dict[Key, Stat]] = {}
    for line, row in _rows(path, SUMMARY_COLUMNS):
        label = row["label"]
        if label not in labels:
            raise _fail(path, line, f"label {label!r} is not in the sidecar's 'labels' {list(labels)}")
        kind, ratio = _setting(path, line, row)
        stage, metric = row["stage"], row["metric"]
        allowed = RECALLS if stage == TEST else (*DETECTION, *PURITY) if stage in STAGES else ()
        if metric not in allowed:
            raise _fail(path, line, f"stage {stage!r}, metric {metric!r}: stages {[TEST, *STAGES]}, "
                                    f"metrics {list(RECALLS)} (test) or {[*DETECTION, *PURITY]}")
        stat = Stat(_optional(path, line, "n", row["n"], int), _number(path, line, "mean", row["mean"]),
                    _optional(path, line, "std", row["std"]), _optional(path, line, "min", row["min"]),
                    _optional(path, line, "max", row["max"]))
        if (stat.n is not None and stat.n < 1) or (stat.std is not None and stat.std < 0) or not (
                (stat.low is None or stat.low <= stat.mean) and (stat.high is None or stat.mean <= stat.high)):
            raise _fail(path, line, f"n {stat.n}, mean {stat.mean}, std {stat.std}, range [{stat.low}, {stat.high}]: "
                                    "expected n >= 1, std >= 0 and min <= mean <= max")
        key = _key(kind, ratio, stage, metric)
        if key in found.setdefault(label, {}):
            raise _fail(path, line, f"a second value for {label!r} at {key}")
        found[label][key] = stat
    return found


def sidecar_of(path: Path) -> Path:
    """``<name>.json`` of ``<name>.csv``, ``<name>.summary.csv`` or ``<name>.table.csv``."""
    name = path.name.removesuffix(".csv").removesuffix(".summary").removesuffix(".table")
    return path.with_name(f"{name}.json")


def load_file(path: Path) -> list[MeasuredRow]:
    """The rows of one measured file, in its sidecar's ``labels`` order."""
    provenance = read_sidecar(sidecar_of(path))
    if path.name.endswith(".summary.csv"):
        source, stats = "summary", read_summary(path, provenance.labels)
    else:
        source = "cells"
        stats = {label: {k: s for k, v in values.items() if (s := stat_of(v)) is not None}
                 for label, values in read_cells(path, provenance.labels).items()}
    absent = [label for label in provenance.labels if label not in stats]
    if absent:
        raise _fail(provenance.path, None, f"'labels' names {absent}, which {path.name} does not hold")
    return [MeasuredRow(shown, source, provenance, stats[label]) for label, shown in provenance.labels.items()]


def _row_files(folder: Path) -> list[Path]:
    """The grid rows' files of a preset's folder (its table files aside)."""
    return sorted(p for p in folder.glob("*.csv") if not p.name.endswith(TABLE_SUFFIX))


def presets(root: Path = MEASURED) -> list[str]:
    """The presets that have measured rows (a folder of table files only has none)."""
    return sorted(p.name for p in root.iterdir() if p.is_dir() and _row_files(p)) if root.is_dir() else []


def load_preset(preset: str, root: Path = MEASURED) -> list[MeasuredRow]:
    """Every row of a preset, ordered by the files' ``order`` and then their ``labels``."""
    if preset not in presets(root):
        raise MeasuredDataError(f"no measured rows for preset {preset!r}; measured presets: {presets(root)}")
    files = _row_files(root / preset)
    loaded = sorted(((load_file(p), p) for p in files), key=lambda item: (item[0][0].provenance.order, item[1].name))
    rows = [row for found, _ in loaded for row in found]
    shown: dict[str, Path] = {}
    for row in rows:
        if row.label in shown:
            raise _fail(row.provenance.path, None, f"the label {row.label!r} is shown by {shown[row.label].name} too")
        shown[row.label] = row.provenance.path
    return rows


def noise_kinds(preset: str, root: Path = MEASURED) -> list[str]:
    """The synthetic noise kinds ``preset``'s rows measure (the clean cells aside)."""
    return sorted({k[0] for row in load_preset(preset, root) for k in row.stats} - {CLEAN})


def ratios(preset: str, noise_kind: str, root: Path = MEASURED) -> list[float]:
    """The ratios of ``noise_kind`` measured in ``preset`` (0: the clean cells)."""
    found = {k[1] for row in load_preset(preset, root) for k in row.stats
             if k[0] in (noise_kind, CLEAN) and k[2] == TEST}
    return sorted(found)


def rows_for(preset: str, noise_kind: str, ratio: float, root: Path = MEASURED) -> list[RowAtSetting]:
    """Every measured row of ``preset`` at one setting: test recalls and rSum over seeds
    (mean, std, min, max; for aggregate-only rows whatever was recorded). Ratio 0 is the
    clean cells whatever ``noise_kind``; rows without that setting are left out."""
    rows = load_preset(preset, root)
    kinds = sorted({k[0] for row in rows for k in row.stats} - {CLEAN})
    if noise_kind not in kinds and noise_kind != CLEAN:
        raise NclUserError(f"noise kind {noise_kind!r}: the {preset} rows measure {kinds}")
    if noise_kind == CLEAN and ratio != 0:
        raise NclUserError(f"noise kind 'clean' has ratio 0 only, not {ratio}")
    out = []
    for row in rows:
        found = {m: s for m in RECALLS if (s := row.stat(noise_kind, ratio, TEST, m)) is not None}
        if "rsum" in found:
            out.append(RowAtSetting(row.label, row.source, found["rsum"].n, found, row.provenance))
    return out


@dataclass(frozen=True)
class Piece:
    """One line of a table file: a piece of one cell (see the module docstring)."""

    line: int
    row: str
    column: str
    seed: int | None
    epoch: int | None
    metric: str
    value: str | None  # as printed (its decimals kept)
    shown: str


@dataclass(frozen=True)
class MeasuredTable:
    """A ``<name>.table.csv`` file: its pieces and its sidecar (``labels``: row key -> shown
    label, in the table's order; ``columns``: the header)."""

    name: str
    provenance: Provenance
    pieces: tuple[Piece, ...]

    def cell(self, row: str, column: str) -> str:
        """The text of one cell: its pieces' texts in file order (empty when it has none)."""
        pieces = [p for p in self.pieces if p.row == row and p.column == column]
        out = []
        for piece in pieces:
            text = piece.shown
            if piece.value is not None:
                same = [p.value for p in pieces if p.metric == piece.metric and p.value is not None]
                text = (text.replace("{min}", min(same, key=float)).replace("{max}", max(same, key=float))
                        .replace("{}", piece.value))
            out.append(text)
        return "".join(out)


def _piece(path: Path, line: int, row: dict[str, str], provenance: Provenance) -> Piece:
    if row["row"] not in provenance.labels:
        raise _fail(path, line, f"row {row['row']!r} is not in the sidecar's 'labels' {list(provenance.labels)}")
    if row["column"] not in provenance.columns[1:]:
        raise _fail(path, line, f"column {row['column']!r} is not one of the sidecar's 'columns' "
                                f"{list(provenance.columns[1:])}")
    value, shown = row["value"] or None, row["shown"]
    if "|" in shown or "\n" in shown:
        raise _fail(path, line, f"'shown' {shown!r} holds '|' or a line break, which would split the table")
    if value is not None:
        if not PRINTED.fullmatch(value):
            raise _fail(path, line, f"column 'value' is {value!r}, not a number as printed")
        if not row["metric"].strip():
            raise _fail(path, line, "a value needs its 'metric'")
        shown = shown or "{}"
        if shown.count("{}") != 1:
            raise _fail(path, line, f"'shown' {shown!r} must hold '{{}}' (the value) once")
    elif not shown or "{" in shown:
        raise _fail(path, line, f"a piece without a value must be text without placeholders, not {shown!r}")
    return Piece(line, row["row"], row["column"], _optional(path, line, "seed", row["seed"], int),
                 _optional(path, line, "epoch", row["epoch"], int), row["metric"], value, shown)


def read_table(path: Path) -> MeasuredTable:
    """A ``<name>.table.csv`` file and its sidecar; errors name the file and line."""
    if not path.is_file():
        raise _fail(path, None, "missing: no such table file")
    provenance = read_sidecar(sidecar_of(path), table=True)
    pieces = tuple(_piece(path, line, row, provenance) for line, row in _rows(path, TABLE_COLUMNS))
    return MeasuredTable(path.name.removesuffix(TABLE_SUFFIX), provenance, pieces)


def load_table(preset: str, name: str, root: Path = MEASURED) -> MeasuredTable:
    """The table ``name`` of ``preset``: ``<root>/<preset>/<name>.table.csv``."""
    return read_table(root / preset / f"{name}{TABLE_SUFFIX}")
