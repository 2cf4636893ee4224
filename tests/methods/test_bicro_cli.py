"""BiCro through the real CLI on tiny synthetic data: ``ncl test`` and ``ncl predict`` on the
run's best checkpoint. SIGKILL-resume, bf16 and two CPU processes (the same weights and division
on both ranks after every epoch, compared as bytes, so the official division's NaN
probabilities compare equal; every validation sample counted once) come from the shared tests
(``bicro`` in tiny_runs.METHODS: tests/cli/test_resume.py, test_bf16.py, test_ddp_methods.py)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from launch import ncl_here
from tiny_runs import METHODS, method_config

from ncl.cli import main


def test_fit_test_and_predict(tmp_path: Path, synthetic_cache: Path) -> None:
    config = method_config(tmp_path, synthetic_cache, METHODS["bicro"], max_epochs=2, steps=4)
    main(["fit", "--config", str(config)])
    assert ncl_here("test", "--config", str(config), "--ckpt_path", "best", cwd=tmp_path).returncode == 0
    results = json.loads(next(tmp_path.rglob("test_results.json")).read_text())
    assert {"A", "B", "A+B"} <= set(results)
    out = tmp_path / "ranked.csv"
    result = ncl_here("predict", "--config", str(config), "--ckpt_path", "best", "--out", str(out),
                      cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(out.open()))
    prob = [float(r["clean_probability"]) for r in rows]
    assert len(rows) > 0 and prob == sorted(prob) and all(0 <= p <= 1 and math.isfinite(p) for p in prob)
