"""``ncl results`` through the real command, in-process: one setting's published rows side by
side (markdown and CSV), the protocol filter, the marks, the measured-rows hook, and one error
line per mistake."""

from __future__ import annotations

import csv
import io

import pytest
from cli_helpers import error_lines, main_exit

import ncl.cli as cli
import ncl.numbers.results as results


def run_ok(capsys: pytest.CaptureFixture, *args: str) -> str:
    """``ncl ARGS`` expecting exit status 0 and no error; returns stdout."""
    cli.main(list(args))
    out, err = capsys.readouterr()
    assert err == "", err
    return out


def table_rows(out: str) -> dict[str, list[str]]:
    """The markdown table's lines by row id (the second column), cells stripped."""
    lines = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[header.index("row")]] = cells
    return rows


def test_f30k_caption_20_side_by_side(capsys: pytest.CaptureFixture) -> None:
    out = run_ok(capsys, "results", "--dataset", "f30k", "--noise", "caption", "--ratio", "0.2")
    assert out.startswith("Published rows for f30k, caption noise 20 %, protocol 1k:")
    rows = table_rows(out)
    assert rows["C6"][:8] == ["CRCL", "C6", "CRCL (NeurIPS 2023) Table 1", "SGRAF", "ensemble",
                              "NCR's shuffle, file not published", "1k", "not stated"]
    assert rows["C6"][8:15] == ["77.9", "95.4", "98.3", "60.9", "84.7", "90.6", "507.8"]
    assert rows["C6"][15] == "ReCon Table 2 prints 502.5"
    assert rows["E10"][14] == "511.8" and rows["E10"][7] == "validation rSum (stated)"
    assert rows["L7"][14] == "Σ498.9"  # LNC prints no rSum: the recalls' sum
    assert rows["C2"][4] == "single" and rows["I1"][14] == "511.6" and rows["I1"][8] == ""
    order = list(rows)  # the same method from several papers sits together
    assert order.index("L6") == order.index("C4") + 1 and order.index("E6") == order.index("L6") + 1
    assert "CM1" not in rows and "Recorded without numbers (paper not available here): CREAM-SGR (CM1)" in out
    assert not any(r[2].startswith("RCL") for r in rows.values())  # image-level rows: not 20 % caption


def test_csv_and_the_protocol_filter(capsys: pytest.CaptureFixture) -> None:
    out = run_ok(capsys, "results", "--dataset", "coco", "--noise", "caption", "--ratio", "0.2",
                 "--protocol", "5k", "--format", "csv")
    lines = list(csv.DictReader(io.StringIO(out)))
    assert {line["protocol"] for line in lines} == {"5k"}
    assert {line["row"] for line in lines} == {"N1", "N3", "N5", "N6", "L20", "L22", "L24", "L25",
                                               "L26", "C23", "E22"}
    crcl = next(line for line in lines if line["row"] == "C23")
    assert (crcl["rSum"], crcl["t2i R@10"], crcl["origin"]) == ("433.3", "82.1", "published")
    both = run_ok(capsys, "results", "--dataset", "coco", "--noise", "caption", "--ratio", "0.2",
                  "--format", "csv")
    assert {line["protocol"] for line in csv.DictReader(io.StringIO(both))} == {"5fold1k", "5k"}


def test_real_noise_and_the_zero_ratio_marks(capsys: pytest.CaptureFixture) -> None:
    rows = table_rows(run_ok(capsys, "results", "--dataset", "cc152k", "--noise", "real"))
    assert rows["E5"][14] == "380.5" and rows["I3"][14] == "380.8" and rows["B3"][14] == "370.2"
    assert rows["R17"][15].startswith("CRCL Table 2 prints 323.9") is False  # same value: no mark
    assert "copy error" in rows["R17"][15]
    zero = table_rows(run_ok(capsys, "results", "--dataset", "f30k", "--noise", "caption", "--ratio", "0"))
    assert zero["R5"][15].startswith("image-level table (no noise at 0 %)")
    assert zero["L7"][15] == ""


def test_measured_rows_hook(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``measured_lines`` returns is printed after the published rows, origin shown."""
    line = results.ResultLine(origin="ncl measured", method="NCR", row="grid", source="ncl grid",
                              backbone="2×SGR", model="ensemble", noise_file="seed 0",
                              protocol="1k", selection="validation rSum", recalls=("1.0",) * 6,
                              rsum="6.0", rsum_printed=True, marks=("3 seeds",))
    monkeypatch.setattr(results, "measured_lines", lambda setting: [line])
    out = run_ok(capsys, "results", "--dataset", "f30k", "--noise", "caption", "--ratio", "0.2")
    last = [ln for ln in out.splitlines() if ln.startswith("| ")][-1]
    assert last.startswith("| ncl measured | NCR | grid | ncl grid |") and last.endswith("| 6.0 | 3 seeds |")
    assert "| origin | method |" in out


def test_measured_preset_rows(capsys: pytest.CaptureFixture) -> None:
    """``--dataset synthetic-small``: ncl's grid rows at one setting, means over seeds from the
    shipped records; IN2R's from its per-cell file, recomputed here from the CSV."""
    from ncl.numbers.measured import MEASURED

    out = run_ok(capsys, "results", "--dataset", "synthetic-small", "--noise", "caption",
                 "--ratio", "0.5", "--format", "csv")
    lines = {line["method"]: line for line in csv.DictReader(io.StringIO(out))}
    assert {line["origin"] for line in lines.values()} == {"ncl measured"}
    cells = [r for r in csv.DictReader((MEASURED / "synthetic-small" / "in2r.csv").open())
             if r["noise_type"] == "caption" and float(r["noise"]) == 0.5]
    assert len(cells) == 3  # three seeds
    in2r = lines["IN2R-VSE (issue 47 defaults)"]
    assert float(in2r["rSum"]) == round(sum(float(r["rsum"]) for r in cells) / 3, 1)
    assert float(in2r["i2t R@1"]) == round(sum(float(r["i2t_r1"]) for r in cells) / 3, 1)
    assert "over 3 seeds" in in2r["marks"] and "aggregate only" not in in2r["marks"]
    assert lines["RCL-SGR"]["rSum"] == "529.7" and "aggregate only" in lines["RCL-SGR"]["marks"]
    clean = run_ok(capsys, "results", "--dataset", "synthetic-small", "--noise", "image", "--ratio", "0")
    assert clean.startswith("ncl's measured rows for synthetic-small, image noise 0 %, protocol 1k:")
    assert "| RCL-SGR | main |" in clean and "553.3" in clean  # the clean cells stand for ratio 0
    real = run_ok(capsys, "results", "--dataset", "f30k", "--noise", "caption", "--ratio", "0.2")
    assert "ncl's own rows: none measured on the real features yet" in real


@pytest.mark.parametrize(("args", "message"), [
    (["--dataset", "flickr", "--noise", "caption", "--ratio", "0.2"],
     "ncl: error: --dataset 'flickr': unknown dataset; one of f30k, coco, cc152k, synthetic-small"),
    (["--dataset", "synthetic-small", "--noise", "caption", "--ratio", "0.4"],
     "ncl: error: --ratio 0.4: no measured synthetic-small caption-noise row at this ratio; "
     "measured: 0, 0.2, 0.5, 0.8"),
    (["--dataset", "synthetic-small", "--noise", "real"],
     "ncl: error: --noise 'real': the synthetic-small rows measure caption, image noise"),
    (["--dataset", "synthetic-small", "--noise", "image", "--ratio", "0.2", "--protocol", "5k"],
     "ncl: error: --protocol 5k: synthetic-small is tested with 1k only"),
    (["--dataset", "f30k", "--noise", "shuffle", "--ratio", "0.2"],
     "ncl: error: --noise 'shuffle': unknown noise kind; one of caption, image, real"),
    (["--dataset", "f30k", "--noise", "caption", "--ratio", "0.3"],
     "ncl: error: --ratio 0.3: no published f30k caption-noise row at this ratio; recorded: "
     "0, 0.2, 0.4, 0.5, 0.6, 0.8"),
    (["--dataset", "f30k", "--noise", "image", "--ratio", "0.5"],
     "ncl: error: --ratio 0.5: no published f30k image-noise row at this ratio; recorded: "
     "0, 0.2, 0.4, 0.6, 0.8"),
    (["--dataset", "f30k", "--noise", "caption", "--ratio", "0.2", "--protocol", "5k"],
     "ncl: error: --protocol 5k: f30k is tested with 1k only"),
    (["--dataset", "coco", "--noise", "caption", "--ratio", "0.2", "--protocol", "1K"],
     "ncl: error: --protocol '1K': unknown protocol; one of 1k, 5fold1k, 5k"),
    (["--dataset", "f30k", "--noise", "caption"], "ncl: error: --noise caption needs --ratio"),
    (["--dataset", "cc152k", "--noise", "real", "--ratio", "0.2"],
     "ncl: error: --ratio 0.2: real noise has no ratio; drop --ratio"),
    (["--dataset", "f30k", "--noise", "real"], "ncl: error: --noise real: cc152k has real noise only"),
    (["--dataset", "f30k", "--noise", "caption", "--ratio", "x"],
     "ncl: error: --ratio 'x': expected a fraction such as 0.2"),
    (["--dataset", "f30k", "--noise", "caption", "--ratio", "0.2", "--format", "json"],
     "ncl: error: --format 'json': one of markdown, csv"),
    (["--noise", "caption"], "ncl: error: ncl results: the following arguments are required: --dataset"),
])
def test_a_mistake_is_one_error_line(capsys: pytest.CaptureFixture, args: list[str], message: str) -> None:
    err = main_exit(capsys, "results", *args)
    assert "Traceback" not in err
    [line] = error_lines(err)
    assert line.startswith(message), line
