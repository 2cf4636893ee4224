"""Ctrl-C during ``ncl fit`` ends with exit status 130 and one last line that says how to
resume; the command it prints resumes the run in its folder (a real process: the signal, the
exit status and the last line of stderr are what is tested)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import launch
from ncl.cli import main
from tiny_runs import METHODS, last_checkpoint, method_config, per_epoch, run_folder

STEPS = 4


def test_ctrl_c_exits_130_with_one_line_that_resumes(tmp_path: Path, synthetic_cache: Path) -> None:
    config = method_config(tmp_path, synthetic_cache, METHODS["rcl"], max_epochs=3, steps=STEPS)
    env = launch.tests_on_pythonpath({**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"})
    argv = ["fit", "--config", str(config), "--trainer.callbacks+=resume_helpers.InterruptAtStep",
            f"--trainer.callbacks.step={STEPS + 2}"]  # in the second epoch
    done = launch.launch([sys.executable, "-m", "ncl.cli", *argv], cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 130, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ncl: interrupted: checkpoints of finished epochs are kept; resume with: ncl fit "), last
    assert "Traceback" not in done.stderr
    folder = run_folder(tmp_path)
    assert last_checkpoint(folder)["epoch"] == 0  # the first epoch finished, the second did not

    resume = shlex.split(last.split("resume with: ", 1)[1])
    assert resume[0] == "ncl" and resume[-2:] == ["--ckpt_path", "last"]
    assert resume[1:-2] == argv  # the same command line, nothing dropped or added
    # Resume without the interrupting callback: the command as printed, less that test hook.
    main([a for a in resume[1:] if "InterruptAtStep" not in a and "callbacks.step" not in a])
    assert run_folder(tmp_path) == folder and sorted(per_epoch(folder, "val/rsum")) == [0, 1, 2]


def test_a_given_ckpt_path_is_replaced_by_last_in_the_hint(capsys) -> None:
    """The hint drops an earlier ``--ckpt_path`` in either spelling."""
    from ncl.cli import _interrupted

    stop = _interrupted(["fit", "--config", "a b.yaml", "--ckpt_path", "x.ckpt", "--ckpt_path=y"], "fit")
    assert stop.code == 130
    assert capsys.readouterr().err.strip() == ("ncl: interrupted: checkpoints of finished epochs are kept; "
                                              "resume with: ncl fit --config 'a b.yaml' --ckpt_path last")
    _interrupted(["test", "--config", "c.yaml"], "test")
    assert capsys.readouterr().err.strip() == "ncl: interrupted"
