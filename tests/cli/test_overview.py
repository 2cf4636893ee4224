"""``ncl`` and ``ncl --help`` introduce ncl and list every subcommand; a missing or unknown
subcommand is one error line (the command in-process, as the console script runs it)."""

from __future__ import annotations

import pytest

from ncl.cli import main
from ncl.cli.overview import subcommands, tool_module


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    """``ncl ARGV`` in this process: (exit status, stdout, stderr)."""
    try:
        main(list(argv))
        code = 0
    except SystemExit as stop:
        code = int(stop.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["help"]])
def test_help_says_what_ncl_is_and_lists_every_subcommand(capsys: pytest.CaptureFixture,
                                                         argv: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 0 and err == ""
    assert out.startswith("ncl: learning image-text retrieval from noisy correspondence.")
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert listed == ["fit", "validate", "test", "predict", "data", "results"]
    assert "python -m ncl.reproduce" in out
    assert "Lightning Trainer command line tool" not in out


def test_the_listed_subcommands_are_the_ones_that_run(capsys: pytest.CaptureFixture) -> None:
    """Every listed subcommand has its own help (none is refused as unknown)."""
    for name in subcommands():
        code, out, err = run(capsys, name, "--help")
        assert code == 0 and "unknown subcommand" not in err, name
        assert out.strip(), name


@pytest.mark.parametrize(("argv", "message"), [
    ([], "ncl: error: no subcommand given; one of fit, validate, test, predict, data, results"),
    (["fitt", "--config", "x.yaml"], "ncl: error: unknown subcommand 'fitt'; did you mean fit?"),
    (["prdict"], "ncl: error: unknown subcommand 'prdict'; did you mean predict?"),
    (["zzz"], "ncl: error: unknown subcommand 'zzz'; one of fit, validate, test, predict, data, results"),
])
def test_a_missing_or_unknown_subcommand_is_one_line(capsys: pytest.CaptureFixture,
                                                      argv: list[str], message: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.splitlines() == [err.splitlines()[0]] and err.startswith(message), err


def test_tool_subcommands_declare_themselves() -> None:
    """A ``*_cli`` module of ncl.cli is a subcommand with its own ``SUMMARY``; nothing else is."""
    assert tool_module("data") == "ncl.cli.data_cli"
    assert tool_module("fit") is None and tool_module("app") is None and tool_module("x-y") is None
    assert subcommands()["data"].startswith("check a dataset folder")
