"""The papers' ablation and side tables (``ncl/numbers/published/ablations/*.csv``): values read by
hand from the papers, printed rSums against their recalls, the page cells, and the loader's
errors naming the file and the line."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from ncl.numbers import ablations, pages, published
from ncl.numbers.published import PublishedDataError

LINES = ablations.load()


def of(row: str) -> list[ablations.AblationLine]:
    return [line for line in LINES if line.row == row]


def test_rows_come_in_id_order_with_their_page_cells_on_the_first_line() -> None:
    ids = list(dict.fromkeys(line.row for line in LINES))
    assert ids == [f"A{i}" for i in range(1, 17)]
    assert all(of(row)[0].page_table and all(not line.page_table for line in of(row)[1:]) for row in ids)


def test_values_match_the_papers_read_by_hand() -> None:
    lmae = of("A1")[0]  # RCL Table 6, L_mae*: 0.1 0.5 1.0 0.1 0.5 1.0, rSum 3.2
    assert (lmae.variant, str(lmae.numbers["rsum"]), lmae.source) == ("L_mae*", "3.2", "RCL (TPAMI 2023) Table 6")
    psi1 = [line for line in of("A13") if line.variant.startswith("Ψ1")]
    # LNC Table 9, Ψ1 at 20 %: 75.4 + 93.1 + 97.1 + 57.7 + 83.1 + 88.8 = 495.2; at 50 %: 480.3
    assert [str(line.recall_sum) for line in psi1] == ["495.2", "480.3"] and [line.ratio for line in psi1] == [0.2, 0.5]
    no_warmup = of("A7")[0]  # LNC Table 8 row 1: 0.1 0.4 1.0 0.1 0.4 0.9
    assert no_warmup.text() == "Σ2.9" and no_warmup.numbers["rsum"] is None
    f30k20 = of("A6")[0]  # LNC Table 7: recall 83.04, precision 94.22, F1 88.28
    assert f30k20.text() == "F30K 20%: 83.04/94.22/88.28" and f30k20.dataset == "f30k"
    assert [line.numbers["rsum"] and str(line.numbers["rsum"]) for line in of("A15")[3:]] == ["267.2", "451.7", "451.3"]


def test_printed_rsums_agree_with_their_recalls() -> None:
    checked = 0
    for line in LINES:
        total, rsum = line.recall_sum, line.numbers["rsum"]
        if total is None or rsum is None:
            continue
        checked += 1
        half = 6 * 0.05 + 0.05  # six recalls and the rSum, one decimal each
        assert abs(total.value - rsum.value) <= half + 1e-9, f"{line.file}, line {line.line}"
    assert checked == 50  # A1 6, A2/A3 20, A4/A5 16, A15 3, A16 5


def test_the_page_line_joins_the_pieces() -> None:
    table = ablations.page_table(LINES).splitlines()
    assert table[:2] == ["| # | paper table | rows → ncl | paper |", "|---|---|---|---|"]
    a8 = next(line for line in table if line.startswith("| A8 |"))
    assert a8.endswith("| Σ474.1 / Σ473.2 |")  # LNC Table 8 rows 2 and 3, summed
    assert "ablations" in pages.paper_rows_blocks()
    assert not [r for r in published.load() if r.paper == "RCL" and r.table == "Table 6"]  # never a setting's row


def write(folder: Path, lines: list[dict[str, str]]) -> None:
    with open(folder / "x.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, ablations.COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(lines)


GOOD = {"row": "A1", "page_table": "T", "ncl": "n", "variant": "v", "paper": "P", "venue": "V", "year": "2024",
        "table": "Table 1", "dataset": "f30k", "protocol": "1k", "noise": "caption", "ratio": "0.2", "backbone": "SGR",
        **{c: "" for c in ablations.NUMBERS}, "rsum": "500.0", "shown": "{rsum}", "note": ""}


@pytest.mark.parametrize(("second", "message"), [
    ({"page_table": "again"}, r"x\.csv, line 3 \(row A1\): page_table and ncl are given on a row's first line"),
    ({"shown": "Σ{sum}"}, r"x\.csv, line 3 \(row A1\): shown 'Σ\{sum\}': \{sum\} needs i2t_r1"),
    ({"shown": "text only"}, r"x\.csv, line 3 \(row A1\): shown 'text only': shows none of the line's numbers"),
    ({"protocol": "5k"}, r"x\.csv, line 3 \(row A1\): protocol '5k': not a protocol of 'f30k'"),
    ({"rsum": "5OO"}, r"x\.csv, line 3 \(row A1\): rsum '5OO': expected a plain decimal number"),
    ({"row": "B2", "page_table": "T", "ncl": "n"}, r"x\.csv, line 3 \(row B2\): row 'B2': expected A and a number"),
])
def test_a_bad_line_gives_one_error_naming_file_and_line(tmp_path: Path, second: dict[str, str],
                                                         message: str) -> None:
    write(tmp_path, [GOOD, {**GOOD, "page_table": "", "ncl": "", **second}])
    with pytest.raises(PublishedDataError, match=message):
        ablations.load(tmp_path)


def test_a_good_file_loads_and_a_row_in_two_files_is_named(tmp_path: Path) -> None:
    write(tmp_path, [GOOD, {**GOOD, "page_table": "", "ncl": "", "rsum": "400.0", "shown": " · {rsum}"}])
    assert ablations.page_table(ablations.load(tmp_path)).splitlines()[2] == "| A1 | T | n | 500.0 · 400.0 |"
    (tmp_path / "y.csv").write_text((tmp_path / "x.csv").read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(PublishedDataError, match=r"y\.csv, line 2: row A1 is in x\.csv too"):
        ablations.load(tmp_path)
