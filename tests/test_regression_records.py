"""``scripts/layout_regression.py`` keeps one record per case (issue 46): recording a case writes
its own ``docs/regression/<case>.json`` and no other file, and ``--compare`` reads each case's
record (or a scratch reference in the one-file format of before). The runs are faked here;
``tests/methods/test_declaration.py`` checks that every declared case has a record."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("layout_regression", REPO / "scripts" / "layout_regression.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REG = _script()
CASES = list(REG.CASES)


def fake_values(case: str) -> dict[str, str]:
    """Four epochs and a digest that differ per case."""
    return {**{str(e): f"{len(case) + e}.5" for e in range(4)}, "weights": f"sha-{case}"}


@pytest.fixture
def fake_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the ``ncl fit`` runs by :func:`fake_values`; the list of cases run."""
    ran: list[str] = []

    def run_case(case: str, out: Path) -> dict[str, str]:
        assert out.is_dir()
        ran.append(case)
        return fake_values(case)

    monkeypatch.setattr(REG, "run_case", run_case)
    return ran


def test_every_committed_record_is_a_declared_case_in_the_record_format() -> None:
    records = sorted(REG.RECORDS.glob("*.json"))
    assert {p.stem for p in records} == set(CASES)
    assert not (REG.RECORDS / "layout_rsum.json").exists()
    for path in records:
        values = json.loads(path.read_text())
        assert re.fullmatch(r"[0-9a-f]{64}", values["weights"]), path  # a SHA-256 hex digest
        assert values[REG.MACHINE], path  # where it was made: digits hold for one CPU kind
        epochs = sorted(k for k in values if k not in ("weights", REG.MACHINE))
        assert epochs == ["0", "1", "2", "3"] and all(float(values[e]) >= 0 for e in epochs), path


def test_record_writes_only_the_cases_run_and_by_default_those_without_a_record(
        tmp_path: Path, fake_runs: list[str]) -> None:
    first, second, third = CASES[:3]
    other = REG.write_record(third, {"0": "1.0", "weights": "mine"}, tmp_path)
    assert REG.main(["--record", "--cases", first, "--into", str(tmp_path)]) == 0
    assert fake_runs == [first]
    here = {REG.MACHINE: REG.this_machine()}  # every record names the machine it was made on
    assert json.loads((tmp_path / f"{first}.json").read_text()) == {**fake_values(first), **here}
    assert sorted(p.stem for p in tmp_path.iterdir()) == sorted([first, third])
    assert json.loads(other.read_text()) == {"0": "1.0", "weights": "mine", **here}  # untouched
    # no --cases: every case without a record in the folder
    assert REG.main(["--record", "--into", str(tmp_path), "--jobs", "1"]) == 0
    assert fake_runs[1:] == [c for c in CASES if c not in (first, third)] and second in fake_runs
    assert json.loads(other.read_text()) == {"0": "1.0", "weights": "mine", **here}
    assert REG.unrecorded(CASES, tmp_path) == []
    assert REG.main(["--record", "--into", str(tmp_path)]) == 0 and len(fake_runs) == len(CASES) - 1


def test_compare_reads_each_cases_record_or_the_old_one_file_format(
        tmp_path: Path, fake_runs: list[str], capsys: pytest.CaptureFixture) -> None:
    first, second = CASES[:2]
    for case in (first, second):
        REG.write_record(case, fake_values(case), tmp_path)
    argv = ["--compare", "--cases", first, second, "--against"]
    assert REG.main([*argv, str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "identical"
    old = tmp_path / "all.json"
    old.write_text(json.dumps({first: fake_values(first), second: fake_values(second), "gone": {}}))
    assert REG.main([*argv, str(old)]) == 0
    # one digit of one epoch, the digest, a missing record: each named
    changed = {**fake_values(second), "2": fake_values(second)["2"] + "1"}
    REG.write_record(second, changed, tmp_path)
    assert REG.main([*argv, str(tmp_path)]) == 1
    assert f"{second}: epoch 2: {changed['2']} -> {fake_values(second)['2']}" in capsys.readouterr().out
    REG.write_record(second, {**fake_values(second), "weights": "other"}, tmp_path)
    assert REG.main([*argv, str(tmp_path)]) == 1
    assert f"{second}: epoch weights: other -> sha-{second}" in capsys.readouterr().out
    (tmp_path / f"{second}.json").unlink()
    assert REG.main([*argv, str(tmp_path)]) == 1
    assert f"{second}: no record" in capsys.readouterr().out


def test_the_machine_is_not_compared_but_named_when_it_differs(
        tmp_path: Path, fake_runs: list[str], capsys: pytest.CaptureFixture) -> None:
    case = CASES[0]
    (tmp_path / f"{case}.json").write_text(json.dumps({**fake_values(case), REG.MACHINE: "Other CPU"}))
    assert REG.main(["--compare", "--cases", case, "--against", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"note: {case}'s record was made on Other CPU, this is {REG.this_machine()}" in out
    assert out.splitlines()[-1] == "identical"
    REG.write_record(case, fake_values(case), tmp_path)  # made here: no note
    assert REG.main(["--compare", "--cases", case, "--against", str(tmp_path)]) == 0
    assert "note:" not in capsys.readouterr().out


def test_differences_count_every_epoch_both_ways() -> None:
    now = {"a": {"0": "1.0", "1": "2.0", "weights": "w"}}
    assert REG.differences(now, {"a": {"0": "1.0", "1": "2.0", "weights": "w"}}) == []
    assert REG.differences(now, {"a": {"0": "1.00", "1": "2.0", "weights": "w"}}) == ["a: epoch 0: 1.00 -> 1.0"]
    assert REG.differences(now, {"a": {"0": "1.0", "1": "2.0", "2": "3.0", "weights": "w"}}) == \
        ["a: epochs ['0', '1', '2', 'weights'] -> ['0', '1', 'weights']"]


def test_the_command_line_refuses_options_of_the_other_mode(capsys: pytest.CaptureFixture) -> None:
    for argv in (["--record", "--against", "x.json"], ["--compare", "--into", "x"], ["--cases", CASES[0]],
                 ["--record", "--compare"], ["--compare", "--cases", "no_such_case"],
                 ["--compare", "--jobs", "0"]):
        with pytest.raises(SystemExit) as stop:
            REG.main(argv)
        assert stop.value.code == 2, argv
    assert "--against: only with --compare" in capsys.readouterr().err
