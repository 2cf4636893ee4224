"""Text table, and JSON/CSV files read back."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from ncl.evaluation import format_table, write_results
from ncl.evaluation import report as report_module
from ncl.metrics import RETRIEVAL_KEYS


def fake_results() -> dict[str, dict[str, dict[str, float]]]:
    def metrics(base: float) -> dict[str, float]:
        return {key: base + 0.01 * j for j, key in enumerate(RETRIEVAL_KEYS)}

    return {
        "SGR": {"5fold1k": metrics(70.04), "5k": metrics(50.26)},
        "SGRAF": {"5fold1k": metrics(80.0)},
    }


def test_table_rows_and_one_decimal() -> None:
    results = fake_results()
    lines = format_table(results).splitlines()
    assert "Image -> Text" in lines[0] and "Text -> Image" in lines[0]
    assert lines[1].split() == ["System", "Protocol", "R@1", "R@5", "R@10", "R@1", "R@5", "R@10", "rSum"]
    assert len(lines) == 2 + 3
    cells = lines[3].split()
    m = results["SGR"]["5k"]
    keys = ["i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum"]
    assert cells == ["SGR", "5k", *(f"{m[k]:.1f}" for k in keys)]
    assert cells[2] == "50.3"


def test_table_with_ranks() -> None:
    lines = format_table(fake_results(), show_ranks=True).splitlines()
    assert lines[1].split().count("medr") == 2 and lines[1].split().count("meanr") == 2
    m = fake_results()["SGRAF"]["5fold1k"]
    assert lines[4].split()[5:7] == [f"{m['i2t_medr']:.1f}", f"{m['i2t_meanr']:.1f}"]


def test_table_bad_input_raises() -> None:
    with pytest.raises(ValueError, match="at least one"):
        format_table({})
    with pytest.raises(ValueError, match="rsum"):
        format_table({"SGR": {"5k": {k: 1.0 for k in RETRIEVAL_KEYS if k != "rsum"}}})


def test_write_results_round_trip(tmp_path: Path) -> None:
    results = fake_results()
    json_path, csv_path = write_results(results, tmp_path / "out", stem="run1")
    assert json_path == tmp_path / "out" / "run1.json" and csv_path == tmp_path / "out" / "run1.csv"
    assert json.loads(json_path.read_text()) == {  # rounded to 4 decimals
        system: {p: {k: round(v, 4) for k, v in m.items()} for p, m in by_protocol.items()}
        for system, by_protocol in results.items()}
    with csv_path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["system"], r["protocol"]) for r in rows] == [
        ("SGR", "5fold1k"),
        ("SGR", "5k"),
        ("SGRAF", "5fold1k"),
    ]
    assert list(rows[0]) == ["system", "protocol", *RETRIEVAL_KEYS]
    for row in rows:
        want = results[row["system"]][row["protocol"]]
        assert {k: float(row[k]) for k in RETRIEVAL_KEYS} == {k: round(v, 4) for k, v in want.items()}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["run1.csv", "run1.json"]


def test_failed_write_keeps_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    json_path, _ = write_results(fake_results(), tmp_path)
    before = json_path.read_text()

    def crash(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(report_module.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        write_results({"X": {"5k": {"rsum": 1.0}}}, tmp_path)
    monkeypatch.setattr(report_module.os, "replace", os.replace)
    assert json_path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test_results.csv", "test_results.json"]


def test_write_results_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="stem"):
        write_results(fake_results(), tmp_path, stem="a/b")
    with pytest.raises(ValueError, match="at least one system"):
        write_results({}, tmp_path)


def test_result_files_are_rounded(tmp_path: Path) -> None:
    results = {"net": {"1k": {"i2t_r1": 14.600000000000001, "t2i_r1": 1 / 3, "rsum": 415.6}}}
    json_path, csv_path = write_results(results, tmp_path)
    assert "14.600000000000001" not in csv_path.read_text() + json_path.read_text()
    assert csv_path.read_text().splitlines()[1] == "net,1k,14.6,0.3333,415.6"
    assert json.loads(json_path.read_text()) == {"net": {"1k": {"i2t_r1": 14.6, "t2i_r1": 0.3333,
                                                              "rsum": 415.6}}}


def test_result_files_honour_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        json_path, csv_path = write_results(fake_results(), tmp_path)
    finally:
        os.umask(old)
    assert {oct(p.stat().st_mode & 0o777) for p in (json_path, csv_path)} == {oct(0o644)}
