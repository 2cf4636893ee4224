"""``--model.eval_autocast`` through the CLI: ``ncl test`` of a tiny checkpoint under
``bf16-mixed`` with it on and off, refused in one line under ``32-true``, a bad value one line."""

from __future__ import annotations

from pathlib import Path

from launch import ncl_here
from tiny_runs import METHODS, method_config


def test_ncl_test_with_eval_autocast_on_off_refused_and_a_bad_value(tmp_path: Path) -> None:
    config = method_config(tmp_path / "rcl", tmp_path / "cache", METHODS["rcl"], max_epochs=1, steps=1)
    fitted = ncl_here("fit", "--config", str(config), cwd=tmp_path)
    assert fitted.returncode == 0, fitted.stderr[-3000:]
    for value in ("false", "true"):
        tested = ncl_here("test", "--config", str(config), "--ckpt_path=last",
                          "--trainer.precision=bf16-mixed", f"--model.eval_autocast={value}",
                          cwd=tmp_path)
        assert tested.returncode == 0, tested.stderr[-3000:]
        assert "rSum" in tested.stdout
    refused = ncl_here("test", "--config", str(config), "--ckpt_path=last",
                       "--model.eval_autocast=true", cwd=tmp_path)
    errors = [line for line in refused.stderr.splitlines() if line.startswith("ncl: error:")]
    assert refused.returncode == 2 and len(errors) == 1, refused.stderr[-3000:]
    assert "trainer.precision 32-true has none" in errors[0]
    bad = ncl_here("test", "--config", str(config), "--ckpt_path=last",
                   "--model.eval_autocast=maybe", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "ncl: error: model.eval_autocast 'maybe' is not valid: it must be true or false"), bad.stderr
