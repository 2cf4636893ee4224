"""Issue 41, item 3: a probe of user mistakes on ``ncl fit --config configs/quickstart.yaml``
(the tiny preset: :func:`cli_helpers.tiny`), kept as a table. Each case is a command line (and
config files it writes) -> the exit status and the prefix of the one line that must say what
is wrong: ``ncl: error:`` (exit 2, no traceback, no usage/tip/type dump) or ``ncl: warning:``
(the run goes on). Cases with neither are runs that must succeed without an error line.

Everything runs in-process (``ncl.cli.main``)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import yaml
from cli_helpers import tiny

import ncl.cli as cli
import ncl.data.start_checks as start_checks
from ncl.cli.app import building_error
from ncl.data.batch_policy import batch_memory_error
from ncl.models import SGRAF

REPO = Path(__file__).resolve().parents[2]
#: Keeps the runs that train short: one epoch of two batches.
SHORT = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1"]
ERROR, WARNING = "ncl: error: ", "ncl: warning: "


def run_main(capsys: pytest.CaptureFixture, argv: list[str]) -> tuple[int, str]:
    """``ncl.cli.main(argv)`` -> ``(exit status, stderr)``; a traceback fails the test."""
    code = 0
    with warnings.catch_warnings():
        try:
            cli.main(argv)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
    return code, capsys.readouterr().err


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def truncated_checkpoint(path: Path) -> str:
    """A Lightning-like checkpoint cut in half (a copy that ran out of disk)."""
    torch.save({"state_dict": {"w": torch.zeros(256, 256)}, "epoch": 0}, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return str(path)


def eval_override(root: Path, cache: Path, checkpoint: str) -> str:
    """An override of configs/eval_sgraf_f30k.yaml: tiny data and backbones, ``checkpoint``."""
    dims = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8,
            "add_mask_token": True}
    return write(root / "override.yaml", yaml.safe_dump({
        "data": {"class_path": "ncl.data.datamodule.SyntheticDataModule",
                 "init_args": {"preset": "tiny", "n_train": None, "cache_dir": str(cache)}},
        "model": {"init_args": {
            "backbones": [{"class_path": "ncl.models.SGRAF", "init_args": {"module_name": m, **dims}}
                          for m in ("SGR", "SAF")],
            "checkpoints": [checkpoint, checkpoint]}},
        "trainer": {"accelerator": "cpu", "default_root_dir": str(root / "eval"),
                    "enable_progress_bar": False}}))


# (case id, subcommand, extra argv (``{tmp}`` is the test's folder), exit status, line prefix)
# extra argv entries "file:NAME=TEXT" write TEXT into tmp/NAME and pass "--config tmp/NAME".
CASES = [
    # --- numbers out of range: one check after parsing, before anything is built
    ("eval_batch_size 0", "fit", ["--data.eval_batch_size", "0"], 2,
     f"{ERROR}data.eval_batch_size is 0, but it must be a positive integer (1 or more)"),
    ("max_epochs -3", "fit", ["--trainer.max_epochs", "-3"], 2,
     f"{ERROR}trainer.max_epochs is -3, but it must be -1 (no limit) or more"),
    ("lr -1", "fit", ["--model.init_args.optimizer.init_args.lr", "-1"], 2,
     f"{ERROR}model.optimizer.lr is -1.0, but it must be 0 or more"),
    ("num_workers -1", "fit", ["--data.num_workers", "-1"], 2,
     f"{ERROR}data.num_workers is -1, but it must be 0 (load in the main process) or more"),
    ("embed_size 0", "fit", ["--model.init_args.backbone.init_args.embed_size", "0"], 2,
     f"{ERROR}model.backbone.embed_size is 0, but it must be a positive integer (1 or more)"),
    ("limit_train_batches -5", "fit", ["--trainer.limit_train_batches", "-5"], 2,
     f"{ERROR}trainer.limit_train_batches is -5, but it must be 0 or more"),
    ("batch_size 0 in a file", "fit", ["file:b.yaml=data:\n  init_args:\n    batch_size: 0\n"], 2,
     f"{ERROR}data.batch_size is 0, but it must be a positive integer (1 or more)"),
    # trainer options the probe did not try
    ("accumulate_grad_batches 0", "fit", ["--trainer.accumulate_grad_batches", "0"], 2,
     f"{ERROR}trainer.accumulate_grad_batches is 0, but it must be 1 or more"),
    ("check_val_every_n_epoch 0", "fit", ["--trainer.check_val_every_n_epoch", "0"], 2,
     f"{ERROR}trainer.check_val_every_n_epoch is 0, but it must be 1 or more"),
    ("num_sanity_val_steps -2", "fit", ["--trainer.num_sanity_val_steps", "-2"], 2,
     f"{ERROR}trainer.num_sanity_val_steps is -2, but it must be -1 (all) or more"),
    # --- an error Lightning raises while building: one line naming the option
    ("unknown strategy", "fit", ["--trainer.strategy", "no_such_strategy"], 2,
     f"{ERROR}trainer.strategy=no_such_strategy: "),
    # --- unreadable checkpoints
    ("truncated --ckpt_path", "fit", ["--ckpt_path", "{tmp}/cut.ckpt"], 2,
     f"{ERROR}checkpoint {{tmp}}/cut.ckpt cannot be read"),
    ("truncated model.checkpoints", "test-eval", [], 2,
     f"{ERROR}model.checkpoints: cannot load {{tmp}}/cut.ckpt: path: {{tmp}}/cut.ckpt cannot be read"),
    # --- config files
    ("unknown top-level key", "fit", ["file:m.yaml=modle:\n"], 2,
     f"{ERROR}unknown option modle in a --config file; did you mean model?"),
    ("unknown top-level key with options", "fit", ["file:m.yaml=modle:\n  init_args: {tau: 1}\n"], 2,
     f"{ERROR}unknown option modle.init_args.tau in a --config file; did you mean model.init_args.tau?"),
    ("unknown key under data", "fit", ["file:u.yaml=data:\n  init_args:\n    batch_sizee: 3\n"], 2,
     (f"{ERROR}unknown option data.init_args.batch_sizee in a --config file: SyntheticDataModule "
      f"has no option 'batch_sizee'; did you mean data.init_args.batch_size?")),
    ("unknown key under trainer", "fit", ["file:t.yaml=trainer:\n  max_epohcs: 3\n"], 2,
     f"{ERROR}unknown option trainer.max_epohcs in a --config file; did you mean trainer.max_epochs?"),
    ("empty config file", "fit", ["file:empty.yaml="], 2,
     f"{ERROR}config file {{tmp}}/empty.yaml is empty (or holds only comments)"),
    ("folder as --config", "fit", ["--config", "{tmp}"], 2,
     f"{ERROR}--config {{tmp}} is a folder; give a YAML config file"),
    # --- wrong types and choices
    ("batch_size sixteen in a file", "fit", ["file:s.yaml=data:\n  init_args:\n    batch_size: sixteen\n"],
     2, f"{ERROR}data.batch_size 'sixteen' is not valid: it must be an integer"),
    ("max_epochs abc", "fit", ["--trainer.max_epochs", "abc"], 2,
     f"{ERROR}trainer.max_epochs 'abc' is not valid: it must be an integer"),
    ("noise_type pixel", "fit", ["--data.noise_type", "pixel"], 2,
     f"{ERROR}data.noise_type 'pixel' is not valid: it must be one of none, caption, image"),
    ("preset huge", "fit", ["--data.preset", "huge"], 2,
     f"{ERROR}data.preset 'huge' is not valid: it must be one of tiny, quickstart, bench"),
    ("precision 8-bit", "fit", ["--trainer.precision", "8-bit"], 2,
     f"{ERROR}trainer.precision '8-bit' is not valid: it must be one of 64, 32, 16, "),
    ("unknown class", "fit", ["--model", "NoSuchMethod"], 2,
     f"{ERROR}--model NoSuchMethod: no such class; ncl's are "),
    ("class typo", "fit", ["--model", "RCLL"], 2, f"{ERROR}--model RCLL: no such class; "),
    # --- a batch that cannot fit (free memory made small: the quickstart's 5,000 pairs
    # would need 38.7 GiB; test_batch_memory_bound_of_the_quickstart checks that sum)
    ("batch_size 100000", "fit-small-memory", ["--data.batch_size", "100000"], 2,
     f"{ERROR}data.batch_size=100000 makes batches of 300 pairs, whose 300 x 300 similarities"),
    # --- warnings: the run goes on
    ("lr 0", "fit", ["--model.init_args.optimizer.init_args.lr", "0", *SHORT], 0,
     f"{WARNING}model.optimizer.lr is 0: the optimizer will not change the weights"),
    # --- correct runs: no error line
    ("no mistake", "fit", SHORT, 0, None),
    ("max_epochs -1 with max_steps", "fit", ["--trainer.max_epochs", "-1", "--trainer.max_steps", "2",
                                             "--trainer.limit_val_batches", "1"], 0, None),
]


def _argv(root: Path, extra: list[str]) -> list[str]:
    out = []
    for word in extra:
        if word.startswith("file:"):
            name, text = word[5:].split("=", 1)
            out += ["--config", write(root / name, text)]
        else:
            out.append(word.replace("{tmp}", str(root)))
    return out


@pytest.mark.parametrize("case, subcommand, extra, status, prefix", CASES, ids=[c[0] for c in CASES])
def test_probe(tmp_path: Path, synthetic_cache: Path, capsys, monkeypatch, case: str,
               subcommand: str, extra: list[str], status: int, prefix: str | None) -> None:
    monkeypatch.chdir(tmp_path)
    truncated_checkpoint(tmp_path / "cut.ckpt")
    if subcommand == "test-eval":
        argv = ["test", "--config", str(REPO / "configs" / "eval_sgraf_f30k.yaml"), "--config",
                eval_override(tmp_path, synthetic_cache, str(tmp_path / "cut.ckpt"))]
    else:
        if subcommand == "fit-small-memory":
            monkeypatch.setattr(start_checks, "available_bytes", lambda device: 2**20)
        argv = ["fit", *tiny(synthetic_cache), *_argv(tmp_path, extra)]
    code, err = run_main(capsys, argv)
    assert "Traceback" not in err and "usage:" not in err and "tip:" not in err, err
    assert code == status, err
    errors = [line for line in err.splitlines() if line.startswith(ERROR)]
    if prefix is None:
        assert errors == [], err
        return
    prefix = prefix.replace("{tmp}", str(tmp_path))
    if prefix.startswith(ERROR):
        assert len(errors) == 1 and errors[0].startswith(prefix), err
        assert len(err.strip().splitlines()[-1]) and err.strip().splitlines()[-1] == errors[0]
    else:
        assert errors == [], err
        assert [line for line in err.splitlines() if line.startswith(prefix)], err


def test_a_refused_number_leaves_no_run_folder(tmp_path: Path, synthetic_cache: Path, capsys,
                                               monkeypatch) -> None:
    """The check runs before anything is built: no run folder, no checkpoint."""
    monkeypatch.chdir(tmp_path)
    code, _ = run_main(capsys, ["fit", *tiny(synthetic_cache), "--trainer.max_epochs", "-3"])
    assert code == 2 and not (tmp_path / "runs").exists()


def test_batch_memory_bound_of_the_quickstart() -> None:
    """The bound stated in ``batch_memory_error``: B x B x (R + 1) x sim_dim float32 values,
    for the quickstart's backbone (12 regions, sim_dim 32) and its 5,000 training pairs."""
    net = SGRAF(10, img_dim=64, word_dim=32, embed_size=64, sim_dim=32, num_regions=12)
    need = 5000 * 5000 * 13 * 32 * 4
    line = batch_memory_error(100000, 5000, [net], need - 1)
    assert line is not None and line.startswith("data.batch_size=100000 makes batches of 5000 "
                                                "pairs, whose 5000 x 5000 similarities (416 ")
    assert "38.7 GiB" in line
    assert batch_memory_error(100000, 5000, [net], need) is None  # exactly fits
    assert batch_memory_error(128, 5000, [net], 30 * 2**20) is None  # the quickstart's 128: 26 MB


@pytest.mark.parametrize("logger, where", [
    ("false", "{root}/test_results.json"),  # as the eval_* configs
    ("null", "{root}/lightning_logs/version_0/test_results.json"),  # the default logger's run
])
def test_test_results_are_where_the_readme_says(tmp_path: Path, synthetic_cache: Path, capsys,
                                                monkeypatch, logger: str, where: str) -> None:
    """The user guide (section on evaluating) and the README: the table is in
    ``trainer.default_root_dir`` without a logger, in the logger's run folder with one."""
    monkeypatch.chdir(tmp_path)
    guide = (REPO / "docs" / "usage.md").read_text()
    assert "written in `trainer.default_root_dir` when the\nconfig has no logger" in guide
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "with `trainer.logger: false`, as in the `eval_*` configs, into `default_root_dir`" in readme
    root = tmp_path / "out"
    code, err = run_main(capsys, ["test", *tiny(synthetic_cache), "--allow_untrained", "true",
                                  f"--trainer.logger={logger}", f"--trainer.default_root_dir={root}"])
    assert code == 0, err
    assert [p for p in root.rglob("test_results.json")] == [Path(where.format(root=root))]


def test_only_library_errors_are_shortened() -> None:
    """An error raised inside torch or Lightning while building is one line naming the option
    its message names; one raised by ncl's own code (a bug) keeps its traceback (``None``)."""
    cfg = {"data": {"init_args": {"batch_size": -4}}, "trainer": {"max_epochs": 3}}
    try:
        torch.utils.data.BatchSampler(range(3), batch_size=-4, drop_last=False)
    except ValueError as err:
        line = building_error(err, cfg)
    assert line is not None and line.startswith("data.batch_size=-4: batch_size should be a "
                                                "positive integer value")
    try:
        raise ValueError("batch_size is wrong")  # raised here: not a library's
    except ValueError as err:
        assert building_error(err, cfg) is None
