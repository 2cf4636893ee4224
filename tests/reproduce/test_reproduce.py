"""``python -m ncl.reproduce``: the tiny grid end to end and resumed, the config presets' command
lines, the other presets' overrides, and the pure pieces (cell ids, the detection read-back,
option errors)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from ncl.reproduce import cli as reproduce
from ncl.reproduce.grid import CLEAN, PRESETS, Cell, grid
from ncl.reproduce.records import detection, legacy_detection_of_row
from ncl.reproduce.tables import purity_table, rsum_summary
from launch import ncl_here

REPO = Path(__file__).resolve().parents[2]

# NCR (divides the data: detection table) at 50 % caption noise, one seed: one cell, to keep the
# test to four CLI processes (the sharing of the clean cell is tested on grid() below).
TINY = ["--preset", "tiny", "--methods", "ncr", "--noise-types", "caption", "--noise", "0.5", "--threads", "1"]
CELL = "ncr-SAF-caption-0.5-s0"


def test_tiny_grid_runs_then_skips_then_resumes_a_killed_cell(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "grid"
    record_path = out / "cells" / f"{CELL}.json"
    assert reproduce.main([*TINY, "--out", str(out)]) == 0
    record = json.loads(record_path.read_text())
    assert record["fit_seconds"] > 0 and record["cpu_seconds"] > 0 and not record["resumed"]
    assert 0 <= record["test"]["rsum"] <= 600 and len(record["val_rsums"]) == 2
    assert set(record["detection"]) == {"after_warmup", "end"}
    assert record["detection"]["after_warmup"]["epoch"] == 1  # the tiny preset's 1 warm-up epoch
    # the pairing the cell trained on, from its test_results.json (issue 27)
    assert record["noise_pairing"] == "new" and len(record["noise_pairing_digest"]) == 64
    text = (out / "results.md").read_text()
    assert "NCR-SAF" in text and "Noise detection" in text and "50 %: i2t R@1" in text
    png = (out / "rsum_vs_noise.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert len((out / "cells.csv").read_text().strip().splitlines()) == 2  # header + 1 cell

    # Run again: the finished cell is skipped, its record untouched.
    before = record_path.read_bytes()
    capsys.readouterr()
    assert reproduce.main([*TINY, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1 cells, 1 finished before, 0 to run" in printed and f"done {CELL}" not in printed
    assert record_path.read_bytes() == before

    # A kill after the fit but before the record: the record is missing, the run folder (with
    # last.ckpt) is there. The rerun resumes the fit (--ckpt_path last) instead of starting over.
    record_path.unlink()
    assert reproduce.main([*TINY, "--out", str(out)]) == 0
    assert f"done {CELL}" in capsys.readouterr().out
    again = json.loads(record_path.read_text())
    assert again["resumed"] and again["finished"] >= record["finished"]
    # read back from the fit's own run folder, not from the first test's
    assert again["val_rsums"] == record["val_rsums"] and again["detection"] == record["detection"]
    assert again["test"] == record["test"]  # the same best checkpoint


def test_paper_dry_run_builds_the_method_configs_command_lines(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    assert reproduce.main(["--preset", "paper", "--seeds", "0", "--dry-run", "--out", str(tmp_path),
                           "--data-root", "/data"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(sys.executable)]
    rows = len(PRESETS["paper"].resolved(REPO / "configs", "f30k").rows)
    assert len(lines) == 2 * rows * 7  # fit + test; ratio 0 once, 3 ratios x 2 kinds
    assert not (tmp_path / "cells").exists()  # nothing ran
    commands = [shlex.split(line) for line in lines]
    for command in commands:
        config = Path(command[command.index("--config") + 1])
        assert config.exists(), config
        assert "--data.data_root=/data" in command
    fits = {(Path(c[c.index("--config") + 1]).name, next(a for a in c if a.startswith("--data.noise_type="))): c
            for c in commands if c[3] == "fit"}
    # image noise: the _imagenoise variant where there is one; its own (RCL-format) noise file kept
    assert ("ncr_sgr_f30k_imagenoise.yaml", "--data.noise_type=image") in fits
    assert "--data.noise_file=null" not in fits[("rcl_sgr_f30k.yaml", "--data.noise_type=image")]
    # caption noise on a config whose noise file is image-level: drawn from the seed instead
    assert "--data.noise_file=null" in fits[("rcl_sgr_f30k.yaml", "--data.noise_type=caption")]
    assert "--data.noise_file=null" not in fits[("ncr_sgr_f30k.yaml", "--data.noise_type=caption")]
    # the overrides are valid for the CLI (parsed, nothing trained)
    command = fits[("rcl_sgr_f30k.yaml", "--data.noise_type=caption")]
    assert command[1:3] == ["-m", "ncl.cli"]  # python -m ncl.cli ...: run its arguments in this process
    done = ncl_here(*command[3:], "--print_config", cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "NclCSVLogger" in done.stdout and "noise_file: null" in done.stdout


def test_grid_shares_the_clean_cell_between_noise_kinds() -> None:
    cells = grid([("ncr", "SGR"), ("rcl", "SAF")], ("caption", "image"), (0.0, 0.2), (0, 1))
    assert len(cells) == 2 * 2 * (1 + 2)
    assert len({c.id for c in cells}) == len(cells)
    assert {c.noise_type for c in cells if c.noise == 0} == {CLEAN}
    assert cells[0].label == "NCR-SGR" and Cell("triplet_warmup", "SGR", "image", 0.2, 0).label.startswith("SGR*")


def test_rsum_summary_gives_mean_std_and_range_per_kind_and_ratio() -> None:
    def rec(label: str, kind: str, noise: float, rsum: float) -> dict:
        return {"label": label, "noise_type": kind, "noise": noise, "test": {"rsum": rsum}}

    records = [rec("A", "clean", 0.0, 500.0), rec("A", "clean", 0.0, 510.0), rec("A", "caption", 0.2, 400.0),
               rec("A", "image", 0.2, 300.0), rec("A", "image", 0.2, 310.0), rec("A", "image", 0.2, 320.0)]
    table = rsum_summary(records, ["caption", "image"], ["A", "B"], [0.0, 0.2])
    head, _, row_a, row_b = table.splitlines()
    assert head == "| method | clean | caption 20 % | image 20 % |"
    # sample std of (500, 510) = 7.07; of (300, 310, 320) = 10; one value: no spread
    assert row_a == "| A | 505.0 ± 7.1 [500.0, 510.0] | 400.0 | 310.0 ± 10.0 [300.0, 320.0] |"
    assert row_b == "| B | - | - | - |"


def test_legacy_detection_reads_each_methods_own_keys() -> None:
    """Runs from before issue 37 (backfill_detection): each method's own keys."""
    # 100 truly noisy pairs: 10 in D_c, 20 in D_l, 70 in D_n (of 80 pairs): P 70/80, R 70/100.
    row = {"epoch": "3", "division/noisy": "80", "division/clean_true_noisy": "10",
           "division/local_true_noisy": "20", "division/noisy_true_noisy": "70"}
    got = legacy_detection_of_row(row, "three-way")
    assert got["precision"] == pytest.approx(0.875) and got["recall"] == pytest.approx(0.7)
    assert got["f1"] == pytest.approx(2 * 0.875 * 0.7 / 1.575)
    # clean-set purity: 10 noisy of D_c's 400, 30 of D_c + D_l's 400 + 100
    got = legacy_detection_of_row({**row, "division/clean": "400", "division/local": "100"}, "three-way")
    assert got["clean_noisy"] == pytest.approx(0.025) and got["rough_clean_noisy"] == pytest.approx(0.06)
    table = purity_table([{"label": "R", "noise": 0.2, "noise_type": "image",
                                     "detection": {"after_warmup": got, "end": got}}],
                                   ["caption", "image"], ["R"], [0.0, 0.2])
    assert table.splitlines()[-1] == "| R | image 20 % | 6.0 | 2.5 | 6.0 | 2.5 |"
    nets = {"epoch": "1", "division/A/precision": "0.5", "division/A/recall": "1", "division/A/f1": "0.6",
            "division/B/precision": "0.7", "division/B/recall": "0", "division/B/f1": "0.2"}
    assert legacy_detection_of_row(nets, "co-divide") == pytest.approx(
        {"precision": 0.6, "recall": 0.5, "f1": 0.4})
    # CRCL: the zeroed labels (865 of the 1,033 zeroed are truly noisy; 996 noisy pairs)
    crcl = {"epoch": "7", "labels/all/zero": "1033", "labels/noisy/zero": "865", "labels/noisy/count": "996",
            "labels/noisy_precision": "0.27", "labels/noisy_recall": "0.99", "labels/noisy_f1": "0.43"}
    got = legacy_detection_of_row(crcl, "labels")
    assert got["precision"] == pytest.approx(865 / 1033) and got["recall"] == pytest.approx(865 / 996)
    old_run = {k: v for k, v in crcl.items() if "/zero" not in k and "/count" not in k}
    assert legacy_detection_of_row(old_run, "labels")["f1"] == pytest.approx(0.43)
    # the first division at or after the warm-up, and the last
    rows = [{**nets, "epoch": "0"}, {**nets, "epoch": "2", "division/A/f1": "1.0"}, {"epoch": "3"}]
    got = detection(rows, 1, "co-divide")
    assert got["after_warmup"]["epoch"] == 2 == got["end"]["epoch"]


@pytest.mark.parametrize("argv, message", [
    (["--methods", "nope"], "--methods"),
    (["--preset", "tiny", "--backbones", "VSE", "--methods", "rcl"], "--backbones"),
    (["--noise", "1.5"], "--noise"),
    (["--epochs", "0"], "--epochs"),
])
def test_bad_options_name_the_option(argv: list[str], message: str, tmp_path: Path, capsys) -> None:
    """One ``ncl: error:`` line naming the option, exit status 2."""
    with pytest.raises(SystemExit) as stop:
        reproduce.main([*argv, "--out", str(tmp_path), "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1
    assert err[0].startswith(f"ncl: error: python -m ncl.reproduce: {message}"), err
