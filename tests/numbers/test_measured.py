"""ncl's measured rows as data (ncl.numbers.measured, measured_pages): the loader's errors name
the file and line, aggregation over seeds checked against values worked out by hand, the
tables' order and grouping from the sidecars, and docs/results.md equal to what the command
prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ncl.errors import NclUserError
from ncl.numbers.measured import (CELL_COLUMNS, MEASURED, SUMMARY_COLUMNS, TABLE_COLUMNS, MeasuredDataError,
                                  flat_row, load_preset, load_table, presets, rows_for)
from ncl.numbers.measured_pages import (MARKER, detection_table, file_table, main, recall_table, render_page,
                                        rsum_table)
from ncl.numbers.stats import Stat, format_stat
from ncl.reproduce.records import MEDIAN_RANKS, RECALLS

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "results.md"


def sidecar(folder: Path, name: str, labels: dict[str, str], **more: object) -> None:
    data = {"order": 1, "labels": labels, "command": "python -m ncl.reproduce ...", "commit": "abc1234",
            "machine": "a test", "load": "none", "dates": "2026-11-28", "note": "hand-made", **more}
    (folder / f"{name}.json").write_text(json.dumps(data))


def cells_csv(folder: Path, name: str, lines: list[dict[str, object]]) -> Path:
    """A per-cell file with the grid's columns; unspecified columns empty."""
    text = ",".join(CELL_COLUMNS) + "\n"
    for line in lines:
        text += ",".join(str(line.get(c, "")) for c in CELL_COLUMNS) + "\n"
    path = folder / f"{name}.csv"
    path.write_text(text)
    return path


def cell(label: str, kind: str, ratio: float, seed: int, rsum: float, **more: object) -> dict[str, object]:
    """One cell whose six recalls are rsum / 6 each (what they are does not matter here)."""
    return {"id": f"{label}-{kind}-{ratio}-s{seed}", "label": label, "noise_type": kind, "noise": ratio,
            "seed": seed, **{m: rsum / 6 for m in RECALLS[:-1]}, "rsum": rsum, **more}


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    """A preset ``toy`` with one per-cell file (A: 3 seeds at caption 20 %, one clean seed) and
    one aggregate-only file (B), B ordered first."""
    folder = tmp_path / "toy"
    folder.mkdir()
    cells_csv(folder, "a", [cell("A", "caption", 0.2, 0, 500.0, end_precision=0.5, end_recall=1.0, end_f1=0.6),
                            cell("A", "caption", 0.2, 1, 510.0, end_precision=0.7, end_recall=1.0, end_f1=0.8),
                            cell("A", "caption", 0.2, 2, 530.0),
                            cell("A", "clean", 0.0, 0, 540.0)])
    sidecar(folder, "a", {"A": "A shown"}, order=2)
    (folder / "b.summary.csv").write_text(",".join(SUMMARY_COLUMNS) + "\n"
                                          "B,caption,0.2,test,rsum,3,400.0,10.0,390.0,410.0\n"
                                          "B,caption,0.2,end,precision,,80.0,2.0,,\n")
    sidecar(folder, "b", {"B": "B shown"}, order=1)
    return tmp_path


def test_rows_for_aggregates_over_seeds_as_worked_out_by_hand(data: Path) -> None:
    found = {r.label: r for r in rows_for("toy", "caption", 0.2, root=data)}
    a = found["A shown"].recalls["rsum"]
    # 500, 510, 530: mean 1540 / 3; deviations -40/3, -10/3, 50/3; sample variance
    # (1600 + 100 + 2500) / 9 / 2 = 233.33..., std 15.2753
    assert (a.n, a.low, a.high) == (3, 500.0, 530.0)
    assert a.mean == pytest.approx(513.3333333, abs=1e-6) and a.std == pytest.approx(15.2752523, abs=1e-6)
    assert found["A shown"].source == "cells" and found["A shown"].provenance.commit == "abc1234"
    b = found["B shown"]
    assert b.source == "summary" and b.recalls == {"rsum": Stat(3, 400.0, 10.0, 390.0, 410.0)}
    assert list(found) == ["B shown", "A shown"]  # the sidecars' order, not the files' names
    clean = rows_for("toy", "caption", 0.0, root=data)  # ratio 0: the clean cells, as kind "clean"
    found_clean = [(r.label, r.n, r.recalls["rsum"].mean, r.recalls["rsum"].std) for r in clean]
    assert found_clean == [("A shown", 1, 540.0, None)]
    assert rows_for("toy", "clean", 0, root=data) == clean and rows_for("toy", "caption", 0.5, root=data) == []


def test_tables_print_mean_std_range_and_detection_in_percent(data: Path) -> None:
    rows = load_preset("toy", root=data)
    assert rsum_table(rows).splitlines() == [
        "| method | clean | caption 20 % |", "|---|---|---|",
        "| B shown | - | 400.0 ± 10.0 [390.0, 410.0] |",
        "| A shown | 540.0 | 513.3 ± 15.3 [500.0, 530.0] |"]
    # precision 50 and 70 %: mean 60, sample std sqrt(200) = 14.1; seed 2 has no detection
    assert detection_table(rows, "caption").splitlines()[2:] == [
        "| B shown | after warm-up | - | - | - |", "| B shown | end | 80.0 ± 2.0 | - | - |",
        "| A shown | after warm-up | - | - | - |", "| A shown | end | 60.0 ± 14.1 | 100.0 ± 0.0 | 70.0 ± 14.1 |"]
    # A's recalls are rsum / 6 each: at 20 % 83.33, 85, 88.33 (mean 85.56, std 15.275 / 6 = 2.55)
    assert recall_table(rows, "caption").splitlines()[2:] == [  # B has no recalls: left out
        "| A shown | " + "90.0 | " * 6 + "540.0 | 1 | " + "85.6 ± 2.5 | " * 6 + "513.3 ± 15.3 | 3 |"]


def test_detection_rows_of_one_group_come_stage_by_stage(data: Path) -> None:
    folder = data / "toy"
    for name in ("a", "b"):
        saved = json.loads((folder / f"{name}.json").read_text())
        (folder / f"{name}.json").write_text(json.dumps({**saved, "group": "AB"}))
    lines = detection_table(load_preset("toy", root=data), "caption").splitlines()[2:]
    assert [line.split(" | ")[:2] for line in lines] == [["| B shown", "after warm-up"], ["| A shown", "after warm-up"],
                                                          ["| B shown", "end"], ["| A shown", "end"]]


@pytest.mark.parametrize(("name", "content", "message"), [
    ("a.csv", "id,label,noise_type,noise,seed\n", r"a\.csv, line 1: the header lacks \['i2t_r1'"),
    ("a.csv", None, r"a\.csv, line 3: column 'rsum' is 'oops', not a number"),
    ("a.csv", "label:C", r"a\.csv, line 2: label 'C' is not in the sidecar's 'labels'"),
    ("b.summary.csv", ",".join(SUMMARY_COLUMNS) + "\nB,caption,0.2,test,f1,3,1.0,,,\n",
     r"b\.summary\.csv, line 2: stage 'test', metric 'f1'"),
    ("b.summary.csv", ",".join(SUMMARY_COLUMNS) + "\nB,clean,0.2,test,rsum,3,1.0,,,\n",
     r"b\.summary\.csv, line 2: .*ratio 0 is the kind 'clean'"),
    ("b.summary.csv", ",".join(SUMMARY_COLUMNS) + "\nB,caption,0.2,test,rsum,3,420.0,10.0,390.0,410.0\n",
     r"b\.summary\.csv, line 2: n 3, mean 420\.0, .*min <= mean <= max"),
    ("b.json", "{\"order\": 1}", r"b\.json: missing keys \['labels'"),
    ("b.json", "{oops", r"b\.json, line 1: not valid JSON"),
])
def test_a_bad_file_gives_one_error_naming_it(data: Path, name: str, content: str | None, message: str) -> None:
    path = data / "toy" / name
    if content is None:  # the second data line's rSum is not a number
        lines = path.read_text().splitlines()
        lines[2] = lines[2].replace(",510.0,", ",oops,")
        content = "\n".join(lines) + "\n"
    elif content.startswith("label:"):
        content = path.read_text().replace(",A,", f",{content[6:]},", 1)
    path.write_text(content)
    with pytest.raises(MeasuredDataError, match=message):
        load_preset("toy", root=data)


def test_missing_sidecar_unknown_preset_and_kind_are_named(data: Path) -> None:
    (data / "toy" / "a.json").unlink()
    with pytest.raises(MeasuredDataError, match=r"a\.json: missing"):
        load_preset("toy", root=data)
    with pytest.raises(MeasuredDataError, match=r"no measured rows for preset 'nope'; measured presets: \['toy'\]"):
        load_preset("nope", root=data)
    (data / "toy" / "a.csv").unlink()
    with pytest.raises(NclUserError, match=r"noise kind 'video': the toy rows measure \['caption'\]"):
        rows_for("toy", "video", 0.2, root=data)


def test_flat_row_is_a_cells_csv_line_with_the_detection_per_stage() -> None:
    record = {"id": "x", "label": "X", "noise_type": "caption", "noise": 0.2, "seed": 0, "resumed": False,
              "test": {m: 1.0 for m in (*RECALLS, *MEDIAN_RANKS)}, "val_rsums": [3.0, 4.0],
              "detection": {"after_warmup": {"epoch": 3, "precision": 0.25, "recall": 0.5, "f1": 1 / 3},
                            "end": {"epoch": 7, "precision": 0.5, "recall": 1.0, "f1": 2 / 3, "clean_noisy": 0.1}}}
    row = flat_row(record)
    assert list(row) == list(CELL_COLUMNS) and set(RECALLS) | set(MEDIAN_RANKS) <= set(CELL_COLUMNS)
    assert (row["last_val_rsum"], row["after_warmup_epoch"], row["end_clean_noisy"], row["after_warmup_clean_noisy"]) \
        == (4.0, 3, 0.1, "")


def test_the_command_writes_and_checks_a_page(data: Path, tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("prose\n<!-- generated: measured toy rsum begin -->\nstale\n"
                    "<!-- generated: measured toy rsum end -->\nmore prose\n")
    args = ["--page", str(page), "--data", str(data)]
    assert main([*args, "--check"]) == 1
    assert main([*args, "--write"]) == 0 and main([*args, "--check"]) == 0
    text = page.read_text()
    assert text.startswith("prose\n<!-- generated") and "| A shown | 540.0 |" in text and "stale" not in text
    assert text.endswith("end -->\nmore prose\n")


def test_results_page_equals_what_the_command_prints() -> None:
    """docs/results.md's grid tables are generated: fix a difference with
    ``python -m ncl.numbers.measured_pages --write`` (never by hand)."""
    text = PAGE.read_text(encoding="utf-8")
    tables = {(m["preset"], m["table"]) for m in MARKER.finditer(text)}
    grid = {"rsum", "recalls caption", "recalls image", "detection caption", "detection image", "purity"}
    files = {("synthetic-small", "table first_attempt")} | {("benchmark", f"table {name}") for name in (
        "image_mismatch", "caption_saf", "crcl_saf", "negatives_saf", "warmup_probe", "recon_saf", "recon_purity")}
    assert tables == {("synthetic-small", t) for t in grid} | files
    assert render_page(text) == text
    assert main(["--page", str(PAGE), "--check"]) == 0


def test_the_shipped_table_files_hold_the_values_the_page_shows() -> None:
    """Spot checks against the page's text read by hand: a range over two seeds, a validation
    curve, and that a table file is never a grid row."""
    recon = load_table("benchmark", "recon_saf")
    assert recon.cell("recon-no-im", "60 %") == "**527.8-529.5** (527.8 / 529.5)"
    seeds = [(p.seed, p.value) for p in recon.pieces if p.row == "recon" and p.column == "40 %"]
    assert seeds == [(0, "550.9"), (1, "541.0")]
    curve = [p for p in load_table("benchmark", "negatives_saf").pieces
             if p.row == "saf-star" and p.metric == "val_rsum"]
    assert [(p.epoch, p.value) for p in curve][4:6] == [(4, "221"), (5, "47")] and len(curve) == 14
    assert presets() == ["synthetic-small"] and (MEASURED / "synthetic-small" / "first_attempt.table.csv").is_file()
    assert "LNC-SGR with NCR's hinge prediction `P` (the older benchmark's `lnc` entry)" not in {
        row.label for row in load_preset("synthetic-small")}


def table_file(folder: Path, lines: list[str], **sidecar_more: object) -> None:
    """A table file ``t.table.csv`` (header :data:`TABLE_COLUMNS`) and its sidecar."""
    (folder / "t.table.csv").write_text(",".join(TABLE_COLUMNS) + "\n" + "".join(f"{line}\n" for line in lines))
    data = {"labels": {"a": "run A", "b": "run B"}, "columns": ["run", "x", "y"], "command": "c",
            "commit": "abc1234", "machine": "m", "load": "l", "dates": "d", "note": "n", **sidecar_more}
    (folder / "t.json").write_text(json.dumps(data))


GOOD_TABLE = ["a,x,0,,rsum,550.9,{min}-{max} ({} / ", "a,x,1,,rsum,541.0,{})", "a,y,0,3,val,18,",
              "a,y,0,4,val,37,\", **{}**\"", "b,y,,,,,not run"]


def test_a_table_file_renders_its_pieces_in_file_order(data: Path) -> None:
    folder = data / "toy"
    table_file(folder, GOOD_TABLE)
    # the min of 550.9 and 541.0 is 541.0; b's x cell has no piece, so it is empty
    assert file_table(load_table("toy", "t", root=data)).splitlines() == [
        "| run | x | y |", "|---|---|---|",
        "| run A | 541.0-550.9 (550.9 / 541.0) | 18, **37** |",
        "| run B | | not run |"]
    assert [r.label for r in load_preset("toy", root=data)] == ["B shown", "A shown"]  # not a row
    (data / "only_tables").mkdir()
    table_file(data / "only_tables", GOOD_TABLE)
    assert presets(data) == ["toy"]


@pytest.mark.parametrize(("line", "message"), [
    ("c,x,0,,rsum,1.0,", r"t\.table\.csv, line 3: row 'c' is not in the sidecar's 'labels'"),
    ("a,z,0,,rsum,1.0,", r"t\.table\.csv, line 3: column 'z' is not one of the sidecar's 'columns'"),
    ("a,x,0,,rsum,1.0.2,", r"t\.table\.csv, line 3: column 'value' is '1\.0\.2', not a number as printed"),
    ("a,x,0,,rsum,1.0,value {} and {}", r"t\.table\.csv, line 3: 'shown' .* must hold '\{\}' \(the value\) once"),
    ("a,x,0,,,1.0,", r"t\.table\.csv, line 3: a value needs its 'metric'"),
    ("a,x,,,,,{} alone", r"t\.table\.csv, line 3: a piece without a value must be text"),
    ("a,x,zero,,rsum,1.0,", r"t\.table\.csv, line 3: column 'seed' is 'zero', not a number"),
    ("a,x,0,,rsum,1.0,{} | 2", r"t\.table\.csv, line 3: 'shown' '\{\} \| 2' holds '\|'"),
])
def test_a_bad_table_file_gives_one_error_naming_file_and_line(data: Path, line: str, message: str) -> None:
    table_file(data / "toy", [GOOD_TABLE[0], line])
    with pytest.raises(MeasuredDataError, match=message):
        load_table("toy", "t", root=data)


def test_a_table_sidecar_needs_its_header(data: Path) -> None:
    table_file(data / "toy", GOOD_TABLE, columns=["run"])
    with pytest.raises(MeasuredDataError, match=r"t\.json: 'columns' must list the table's header"):
        load_table("toy", "t", root=data)
    table_file(data / "toy", GOOD_TABLE, order=3)
    with pytest.raises(MeasuredDataError, match=r"t\.json: missing keys \[\], unknown keys \['order'\]"):
        load_table("toy", "t", root=data)
    with pytest.raises(MeasuredDataError, match=r"nope\.table\.csv: missing"):
        load_table("toy", "nope", root=data)


def test_format_stat_shows_what_was_recorded() -> None:
    assert format_stat(Stat(None, 61.0, 2.0, None, None), with_range=True) == "61.0 ± 2.0"
    assert format_stat(Stat(1, 5.0, None, 5.0, 5.0), with_range=True) == "5.0"
    assert format_stat(None) == "-"
