"""PC² through the real CLI on tiny synthetic data: ``ncl test`` and ``ncl predict`` on the
run's best checkpoint. SIGKILL-resume, bf16 and two CPU processes (the same weights, division and
distribution bank on both ranks after every epoch; every validation sample counted once) come
from the shared tests (``pc2`` in tiny_runs.METHODS: tests/cli/test_resume.py, test_bf16.py,
test_ddp_methods.py)."""

from __future__ import annotations

import math
from pathlib import Path

from tiny_runs import METHODS, best_tested_and_predicted, method_config

from ncl.cli import main


def test_fit_test_and_predict(tmp_path: Path, synthetic_cache: Path) -> None:
    config = method_config(tmp_path, synthetic_cache, METHODS["pc2"], max_epochs=2, steps=4)
    main(["fit", "--config", str(config)])
    _, rows = best_tested_and_predicted(config, tmp_path)
    prob = [float(r["clean_probability"]) for r in rows]
    assert len(rows) > 0 and prob == sorted(prob) and all(0 <= p <= 1 and math.isfinite(p) for p in prob)
