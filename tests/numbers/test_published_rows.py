"""The published rows (``ncl/numbers/published/*.csv``): they load, their printed rSums agree
with their recalls except the rows listed with a reason, and the loader's errors name the file
and line."""

from __future__ import annotations

import csv
import itertools
import re
from pathlib import Path

import pytest

from ncl.numbers import published as pub

ROWS = pub.load()


def by(row_id: str, ratio: float | None = None) -> pub.PublishedRow:
    """The one row with this id (and ratio)."""
    found = [r for r in ROWS if r.row == row_id and (ratio is None or r.ratio == ratio)]
    assert len(found) == 1, (row_id, ratio, found)
    return found[0]


def test_every_source_paper_and_page_section_is_there() -> None:
    assert {r.paper for r in ROWS} >= {"NCR", "LNC", "RCL", "CRCL", "ReCon", "IN2R", "CREAM", "SPS"}
    assert {r.method for r in ROWS} >= {"BiCro", "MSCN", "PC²", "CREAM", "SPS", "GSC", "L2RM",
                                        "DECL", "IN2R"}
    assert len(ROWS) > 300


def test_printed_rsums_agree_with_their_recalls_unless_listed_with_a_reason() -> None:
    """A disagreement not listed in ``rsum_note`` fails, and so does a listed row that agrees."""
    unlisted, wrongly_listed, checked = [], [], 0
    for row in ROWS:
        check = pub.rsum_check(row)
        if check is None:
            assert not row.rsum_note, f"{row.where}: rsum_note without an rSum to check"
            continue
        checked += 1
        if not check.agrees and not row.rsum_note:
            unlisted.append(f"{row.where}: printed {check.printed}, recalls sum {check.computed}")
        if check.agrees and row.rsum_note:
            wrongly_listed.append(f"{row.where}: listed, but {check.printed} ~ {check.computed}")
    assert unlisted == [] and wrongly_listed == []
    assert checked > 150


def test_values_match_the_paper_tables_read_by_hand() -> None:
    bicro_cc = by("B3")  # CRCL Table 2, BiCro*, CC152K
    assert [str(r) for r in bicro_cc.recalls] == ["40.8", "67.2", "76.1", "42.1", "67.6", "76.4"]
    assert str(bicro_cc.rsum) == "370.2" and bicro_cc.ensemble and bicro_cc.backbone == "SGRAF"
    rcl = by("R27", 0.4)  # RCL Table 5, RCL-SGRAF, F30K 0.4 (block order)
    assert rcl.recall_sum == pytest.approx(72.7 + 92.7 + 96.1 + 54.8 + 80.0 + 87.1)
    assert (rcl.noise, rcl.dataset, rcl.protocol) == ("image", "f30k", "1k")
    saf = by("N1", 0.0)  # NCR supp. Table 2: '-' at R@5
    assert saf.recalls[1] is None and saf.recalls[4] is None and pub.rsum_value(saf) == (None, False)
    assert pub.rsum_value(by("L6", 0.2)) == (pytest.approx(496.7), False)  # LNC prints no rSum
    in2r = by("I3")
    assert str(in2r.rsum) == "380.8" and all(r is None for r in in2r.recalls)


def test_the_rsum_tolerance_is_the_papers_rounding() -> None:
    row = by("E15", 0.2)  # ReCon COCO 1K 20 %: printed 528.6, recalls sum 528.5
    check = pub.rsum_check(row)
    assert check is not None and check.computed == pytest.approx(528.5)
    assert check.tolerance == pytest.approx(6 * 0.05 + 0.05) and check.agrees
    off = pub.RsumCheck(row, 528.6, 528.2, check.tolerance)
    assert not off.agrees


def test_rows_for_one_setting() -> None:
    rows = pub.rows_for(ROWS, "f30k", "caption", 0.2)
    assert {(r.paper, r.row) for r in rows} >= {("CRCL", "C6"), ("ReCon", "E10"), ("LNC", "L7"),
                                                ("CRCL", "B1"), ("ReCon", "E20")}
    assert all(r.noise == "caption" and r.ratio == 0.2 and r.dataset == "f30k" for r in rows)
    zero = pub.rows_for(ROWS, "f30k", "caption", 0.0)  # no noise: image-kind 0 % rows too
    assert {"R5", "L7"} <= {r.row for r in zero}
    assert {r.row for r in pub.rows_for(ROWS, "cc152k", "real", None)} >= {"C17", "E5", "I3"}
    five_k = pub.rows_for(ROWS, "coco", "caption", 0.2, protocol="5k")
    assert {r.row for r in five_k} == {"N1", "N3", "N5", "N6", "L20", "L22", "L24", "L25", "L26", "C23", "E22"}


def test_the_same_baseline_from_several_papers_is_grouped() -> None:
    groups = pub.quoted_by_several(ROWS)
    ncr = next(g for g in groups if g[0].method == "NCR" and g[0].dataset == "f30k"
               and g[0].ratio == 0.2 and g[0].noise == "caption")
    assert sorted((r.paper, round(pub.rsum_value(r)[0] or 0, 1)) for r in ncr) == [
        ("CRCL", 497.0), ("LNC", 496.7), ("ReCon", 491.1)]


def _write(path: Path, rows: list[dict[str, str]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, pub.COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def _good() -> dict[str, str]:
    row = dict.fromkeys(pub.COLUMNS, "")
    row.update(row="X1", section="s", label="M", method="M", paper="P", venue="V", year="2024",
               table="Table 1", dataset="f30k", protocol="1k", noise="caption", ratio="0.2",
               backbone="SGR", ensemble="no", i2t_r1="1.0", rsum="")
    return row


@pytest.mark.parametrize(("change", "message"), [
    ({"ratio": "20%"}, r"bad\.csv, line 2 \(row X1\): ratio '20%': expected a number in \[0, 1\)"),
    ({"dataset": "flickr"}, r"bad\.csv, line 2 \(row X1\): dataset 'flickr': expected one of"),
    ({"t2i_r5": "8o.1"}, r"line 2 \(row X1\): t2i_r5 '8o.1': expected a plain decimal"),
    ({"noise": "real"}, r"ratio '0.2': real noise has no ratio"),
    ({"ensemble": "maybe"}, r"ensemble 'maybe': expected yes or no"),
])
def test_a_malformed_line_is_one_error_naming_file_line_and_column(
        tmp_path: Path, change: dict[str, str], message: str) -> None:
    _write(tmp_path / "bad.csv", [{**_good(), **change}])
    with pytest.raises(pub.PublishedDataError, match=message):
        pub.load(tmp_path)


def test_a_row_recorded_twice_is_an_error(tmp_path: Path) -> None:
    _write(tmp_path / "a.csv", [_good()])
    _write(tmp_path / "b.csv", [_good()])
    with pytest.raises(pub.PublishedDataError, match=r"b\.csv, line 2 \(row X1\).*already in a\.csv"):
        pub.load(tmp_path)
    assert len(pub.load(tmp_path / "nothing")) == 0


def test_every_config_a_row_names_exists() -> None:
    """The ``train`` column's config names (braces expanded) are files in ``configs/``."""
    configs = Path(__file__).resolve().parents[2] / "configs"
    missing = set()
    for row in ROWS:
        for name in re.findall(r"`([a-z0-9_{},]+)`", row.train):
            if name.startswith("_") or "_" not in name:
                continue
            parts = re.split(r"\{([^{}]*)\}", name)
            choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
            for stem in ("".join(c) for c in itertools.product(*choices)):
                if not (configs / f"{stem}.yaml").is_file():
                    missing.add(f"{row.where}: {stem}")
    assert sorted(missing) == []
