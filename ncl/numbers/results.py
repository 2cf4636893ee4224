"""One setting's numbers side by side, for the person building a results table (``ncl results``).

:func:`resolve_setting` turns the command's options into a :class:`Setting` (one clear
:class:`~ncl.errors.NclUserError` per mistake, naming the option and what is recorded);
:func:`result_lines` gives every published row of the setting as a :class:`ResultLine`, with the
protocol differences that matter marked, followed by ncl's measured rows from
:func:`measured_lines` (the hook the measured-rows module plugs into); :func:`markdown` and
:func:`csv_text` print them.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass

from ncl.errors import NclUserError
from ncl.numbers import measured
from ncl.numbers.stats import format_stat
from ncl.numbers.published import (
    DATA_NAMES,
    DATASETS,
    NOISE_KINDS,
    PROTOCOLS,
    PublishedRow,
    quoted_by_several,
    rows_for,
    rsum_value,
)

#: The formats ``--format`` accepts.
FORMATS = ("markdown", "csv")
#: The test protocols of each dataset.
DATASET_PROTOCOLS = {d: tuple(p for (ds, p) in DATA_NAMES if ds == d) for d in DATASETS}


@dataclass(frozen=True)
class Setting:
    """A dataset, noise kind and ratio (None for real noise), and a protocol (None: all)."""

    dataset: str
    noise: str
    ratio: float | None
    protocol: str | None

    def describe(self) -> str:
        """``f30k, caption noise 20 %, protocol 1k``."""
        noise = "real noise" if self.ratio is None else f"{self.noise} noise {self.ratio * 100:g} %"
        protocols = self.protocol or "/".join(DATASET_PROTOCOLS[self.dataset])
        return f"{self.dataset}, {noise}, protocol {protocols}"


@dataclass(frozen=True)
class ResultLine:
    """One line of the side-by-side table: a published row or one of ncl's measured rows.

    ``recalls`` and ``rsum`` are the numbers as printed ("" where none); ``rsum_printed`` is
    False when ``rsum`` is the sum of the six recalls; ``marks`` name what differs from the
    plain setting (a 0 % row of the other noise kind, a note of the source, a disagreement)."""

    origin: str
    method: str
    row: str
    source: str
    backbone: str
    model: str
    noise_file: str
    protocol: str
    selection: str
    recalls: tuple[str, ...]
    rsum: str
    rsum_printed: bool
    marks: tuple[str, ...]


def _ratios(rows: Sequence[PublishedRow], dataset: str, noise: str) -> list[float]:
    """The ratios recorded for a dataset and synthetic noise kind (0 % rows count for both)."""
    found = {r.ratio for r in rows if r.dataset == dataset and r.ratio is not None
             and (r.noise == noise or r.ratio == 0)}
    return sorted(found)  # type: ignore[arg-type]


def _ratio_list(ratios: Sequence[float]) -> str:
    return ", ".join(f"{r:g}" for r in ratios) or "none"


def resolve_setting(rows: Sequence[PublishedRow], dataset: str, noise: str, ratio: str | None,
                    protocol: str | None) -> Setting:
    """The options of ``ncl results`` checked against the recorded rows.

    Raises:
        NclUserError: an unknown dataset, noise kind or protocol, a protocol the dataset is
            not tested with, a ratio with real noise or none with synthetic noise, a ratio
            that is no number or has no recorded row (the message lists the recorded ones).
    """
    if dataset in measured.presets():
        return _measured_setting(dataset, noise, ratio, protocol)
    if dataset not in DATASETS:
        raise NclUserError(f"--dataset {dataset!r}: unknown dataset; one of "
                           f"{', '.join((*DATASETS, *measured.presets()))}")
    if noise not in NOISE_KINDS:
        raise NclUserError(f"--noise {noise!r}: unknown noise kind; one of {', '.join(NOISE_KINDS)}")
    if protocol is not None:
        if protocol not in PROTOCOLS:
            raise NclUserError(f"--protocol {protocol!r}: unknown protocol; one of "
                               f"{', '.join(PROTOCOLS)}")
        if protocol not in DATASET_PROTOCOLS[dataset]:
            raise NclUserError(f"--protocol {protocol}: {dataset} is tested with "
                               f"{' or '.join(DATASET_PROTOCOLS[dataset])} only")
    if (noise == "real") != (dataset == "cc152k"):
        raise NclUserError(f"--noise {noise}: cc152k has real noise only, and only cc152k has it"
                           f" (got --dataset {dataset})")
    if noise == "real":
        if ratio is not None:
            raise NclUserError(f"--ratio {ratio}: real noise has no ratio; drop --ratio")
        return Setting(dataset, noise, None, protocol)
    value = _chosen_ratio(ratio, _ratios(rows, dataset, noise), dataset, noise, "published")
    return Setting(dataset, noise, value, protocol)


def _chosen_ratio(ratio: str | None, recorded: Sequence[float], dataset: str, noise: str,
                  origin: str) -> float:
    """``--ratio`` as a number that has a row (``origin``: "published" or "measured"), or one
    error naming the option and the ratios there are."""
    listed = "recorded" if origin == "published" else "measured"
    if ratio is None:
        raise NclUserError(f"--noise {noise} needs --ratio; {listed} for {dataset}: "
                           f"{_ratio_list(recorded)}")
    try:
        value = float(ratio)
    except ValueError:
        raise NclUserError(f"--ratio {ratio!r}: expected a fraction such as 0.2") from None
    if not any(abs(value - r) < 1e-9 for r in recorded):
        raise NclUserError(f"--ratio {ratio}: no {origin} {dataset} {noise}-noise row at this "
                           f"ratio; {listed}: {_ratio_list(recorded)}")
    return value


def _marks(row: PublishedRow, setting: Setting, others: dict[int, list[PublishedRow]]) -> tuple[str, ...]:
    marks = []
    if row.noise != setting.noise:
        marks.append(f"{row.noise}-level table (no noise at 0 %)")
    if row.rsum_note:
        marks.append(f"printed rSum is not the recalls' sum: {row.rsum_note}")
    for other in others.get(id(row), []):
        value, printed = rsum_value(other)
        if value is not None and value != rsum_value(row)[0]:
            marks.append(f"{other.paper} {other.table} prints {'' if printed else 'Σ'}{value:.1f}")
    if row.note:
        marks.append(row.note)
    return tuple(marks)


def _line(row: PublishedRow, setting: Setting, others: dict[int, list[PublishedRow]]) -> ResultLine:
    value, printed = rsum_value(row)
    return ResultLine(
        origin="published", method=row.method, row=row.row, source=row.source,
        backbone=row.backbone, model="ensemble" if row.ensemble else "single",
        noise_file=row.noise_file or ("-" if row.ratio in (None, 0) else "not stated"),
        protocol=row.protocol, selection=row.selection or "not stated",
        recalls=tuple("" if r is None else str(r) for r in row.recalls),
        rsum="" if value is None else f"{value:.1f}", rsum_printed=printed,
        marks=_marks(row, setting, others))


def _measured_setting(preset: str, noise: str, ratio: str | None, protocol: str | None) -> Setting:
    """A setting of one of ncl's measured presets (``--dataset synthetic-small``): its grid
    tests the 1k protocol on its own test images; ratio 0 is the clean cells of either kind."""
    kinds = measured.noise_kinds(preset)
    if noise not in kinds:
        raise NclUserError(f"--noise {noise!r}: the {preset} rows measure {', '.join(kinds)} noise")
    if protocol not in (None, "1k"):
        raise NclUserError(f"--protocol {protocol}: {preset} is tested with 1k only")
    value = _chosen_ratio(ratio, measured.ratios(preset, noise), preset, noise, "measured")
    return Setting(preset, noise, value, "1k")


def measured_lines(setting: Setting) -> list[ResultLine]:
    """ncl's measured rows for ``setting`` (:func:`ncl.numbers.measured.rows_for`): one line
    per grid row of a measured preset (``--dataset synthetic-small``), recalls and rSum as
    means over the seeds, the spread and the count in ``marks``. A paper dataset has none:
    no preset that runs on the real features has records yet."""
    if setting.dataset not in measured.presets() or setting.ratio is None:
        return []
    lines = []
    for row in measured.rows_for(setting.dataset, setting.noise, setting.ratio):
        prov = row.provenance
        rsum = row.recalls["rsum"]
        seeds = f"{rsum.n} seeds" if rsum.n else "seeds not recorded"
        marks = [f"rSum {format_stat(rsum, with_range=True)} over {seeds}"]
        if row.source == "summary":
            marks.append("aggregate only: the per-cell records were lost")
        lines.append(ResultLine(
            origin="ncl measured", method=row.label, row=prov.path.stem,
            source=f"ncl grid at {prov.commit.split()[0]}", backbone="-", model="-",
            noise_file=f"drawn per seed ({setting.noise})" if setting.ratio else "-",
            protocol="1k", selection="validation rSum",
            recalls=tuple(f"{row.recalls[m].mean:.1f}" if m in row.recalls else ""
                          for m in measured.RECALLS[:-1]),
            rsum=f"{rsum.mean:.1f}", rsum_printed=True, marks=tuple(marks)))
    return lines


def result_lines(rows: Sequence[PublishedRow], setting: Setting) -> list[ResultLine]:
    """Every published row of the setting, the same method and model together (papers side by
    side, by protocol, method, backbone, year), then ncl's measured rows."""
    if setting.dataset in measured.presets():
        return measured_lines(setting)
    chosen = rows_for(rows, setting.dataset, setting.noise, setting.ratio, setting.protocol)
    others: dict[int, list[PublishedRow]] = {}
    for group in quoted_by_several(chosen):
        for row in group:
            others[id(row)] = [other for other in group if other is not row]
    chosen = sorted(chosen, key=lambda r: (r.protocol, r.method.lower(), r.backbone, r.year, r.paper))
    return [_line(row, setting, others) for row in chosen if _has_numbers(row)] + measured_lines(setting)


def _has_numbers(row: PublishedRow) -> bool:
    return row.rsum is not None or any(r is not None for r in row.recalls)


def without_numbers(rows: Sequence[PublishedRow], setting: Setting) -> list[PublishedRow]:
    """The setting's rows recorded without any number (their paper was not available)."""
    if setting.dataset in measured.presets():
        return []
    chosen = rows_for(rows, setting.dataset, setting.noise, setting.ratio, setting.protocol)
    return [row for row in chosen if not _has_numbers(row)]


COLUMNS = ("origin", "method", "row", "printed by", "backbone", "model", "noise file",
           "protocol", "selection", "i2t R@1", "i2t R@5", "i2t R@10", "t2i R@1", "t2i R@5",
           "t2i R@10", "rSum", "marks")


def _cells(line: ResultLine) -> list[str]:
    rsum = line.rsum if line.rsum_printed or not line.rsum else f"Σ{line.rsum}"
    return [line.origin, line.method, line.row, line.source, line.backbone, line.model,
            line.noise_file, line.protocol, line.selection, *line.recalls, rsum,
            "; ".join(line.marks)]


def markdown(lines: Sequence[ResultLine], setting: Setting,
             missing: Sequence[PublishedRow] = ()) -> str:
    """A heading line, the table, what the columns mean, and the rows recorded without
    numbers."""
    papers = len({line.source.split(" ")[0] for line in lines if line.origin == "published"})
    head = (f"Published rows for {setting.describe()}: {len(lines)} rows from {papers} papers "
            "(docs/paper_rows.md says which ncl config trains each)")
    if setting.dataset in measured.presets():
        head = (f"ncl's measured rows for {setting.describe()}: {len(lines)} rows, means over "
                "seeds (docs/results.md tells how each was run)")
    first = 0 if any(line.origin != "published" for line in lines) else 1  # origin when mixed
    table = ["| " + " | ".join(COLUMNS[first:]) + " |", "|" + "---|" * (len(COLUMNS) - first)]
    table += ["| " + " | ".join(c.replace("|", "/") for c in _cells(line)[first:]) + " |"
              for line in lines]
    legend = ("model: ensemble = two networks' similarities averaged (SGRAF = SGR + SAF; "
              "2×SGR = A+B), single = one network. noise file: the index the row was trained on "
              "where the paper says. selection: how the checkpoint was chosen (not stated = the "
              "paper does not say). Σ: the sum of the six recalls (the table prints no rSum). "
              "Blank recalls: '-' in the paper.")
    tail = []
    if setting.dataset not in measured.presets():
        tail = ["", "ncl's own rows: none measured on the real features yet (`python -m "
                "ncl.reproduce --preset paper`); the synthetic benchmark's: `ncl results "
                f"--dataset {' / '.join(measured.presets())} --noise caption|image --ratio R`."]
    if missing:
        names = ", ".join(f"{row.label} ({row.row})" for row in missing)
        tail += ["", f"Recorded without numbers (paper not available here): {names}."]
    return "\n".join([head, "", *table, "", legend, *tail])


def csv_text(lines: Sequence[ResultLine]) -> str:
    """The lines as CSV, one column per field (``rSum`` with ``Σ`` where summed here)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(_cells(line) for line in lines)
    return out.getvalue()
