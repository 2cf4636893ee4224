"""``docs/paper_rows.md``'s tables are what ``python -m ncl.numbers.pages paper-rows`` prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncl.numbers import pages
from ncl.numbers.published import load

ROWS = load()
#: The page in this checkout (the module's default path points at the same file).
PAGE = Path(__file__).resolve().parents[2] / "docs" / "paper_rows.md"


def test_the_page_equals_what_the_command_prints() -> None:
    assert pages.PAPER_ROWS_PAGE == PAGE
    page = PAGE.read_text(encoding="utf-8")
    assert pages.replace_blocks(page, pages.paper_rows_blocks(ROWS)) == page, (
        "docs/paper_rows.md differs from the data: python -m ncl.numbers.pages paper-rows --write")


def test_cells_by_value() -> None:
    lines = pages.paper_rows_blocks(ROWS)["lnc-t1"].splitlines()
    assert ("| L6 | NCR | F30K | cap 0/.2/.5 | 2×SGR | `ncr_sgr_f30k` | self `A+B` "
            "| Σ502.7 · Σ496.7 · Σ482.8 |") in lines
    n1 = pages.paper_rows_blocks(ROWS)["ncr-supp-t2"].splitlines()[2]
    assert n1.endswith("| R@1 53.3/39.8 · Σ365.5 · Σ196.8 |")
    quoted = pages.paper_rows_blocks(ROWS)["quoted"]
    assert "| NCR | 2×SGR | F30K | cap .2 | CRCL Table 1 (C4) 497.0 · LNC Table 1 (L6) Σ496.7 · " \
           "ReCon Table 2 (E6) 491.1 |" in quoted
    assert "BiCro" not in quoted  # CRCL and ReCon print the same BiCro numbers


def test_write_and_check(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    page = tmp_path / "p.md"
    names = list(pages.paper_rows_blocks(ROWS))
    page.write_text("intro\n" + "".join(f"<!-- generated: paper-rows {n} begin -->\nSTALE\n"
                                        f"<!-- generated: paper-rows {n} end -->\ntext\n"
                                        for n in names))
    assert pages.main(["paper-rows", "--check", "--path", str(page)]) == 1
    assert pages.main(["paper-rows", "--write", "--path", str(page)]) == 0
    assert pages.main(["paper-rows", "--check", "--path", str(page)]) == 0
    assert "STALE" not in page.read_text() and page.read_text().startswith("intro\n")
    assert pages.main(["paper-rows"]) == 0
    assert "<!-- generated: paper-rows crcl-t1 begin -->" in capsys.readouterr().out


@pytest.mark.parametrize(("text", "message"), [
    ("<!-- generated: paper-rows crcl-t1 begin -->\n", "'crcl-t1' has no end marker"),
    ("<!-- generated: paper-rows nope begin -->\n<!-- generated: paper-rows nope end -->",
     "marks a table 'nope'"),
    ("", "no markers for: "),
])
def test_marker_mistakes_are_named(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pages.replace_blocks(text, {"crcl-t1": "x"} if "crcl" in text or not text else {})
