"""``python -m ncl.reproduce``: what each preset puts on a cell's command line (dry runs only),
``--extra``, where the configs are found, and the ``slurm`` templates shipped as package data."""

from __future__ import annotations

import os
import re
import shlex
import stat
import sys
from pathlib import Path

import pytest

from ncl.reproduce import cli as reproduce
from ncl.reproduce.cells import BENCH, METHODS, configs_dir
from ncl.reproduce.grid import PRESETS, ROWS, config_rows
from ncl.reproduce.slurm import TEMPLATES, template_text
from launch import launch, ncl_here

REPO = Path(__file__).resolve().parents[2]


def dry_run(capsys: pytest.CaptureFixture, tmp_path: Path, *argv: str) -> list[list[str]]:
    """The command lines ``--dry-run`` prints (fit, test per cell), split."""
    assert reproduce.main([*argv, "--dry-run", "--out", str(tmp_path / "grid")]) == 0
    return [shlex.split(line) for line in capsys.readouterr().out.splitlines()
            if line.startswith(sys.executable)]


def option(command: list[str], name: str) -> str:
    """The value of ``--name=value`` in ``command`` (the last one: the one the CLI keeps)."""
    return [a.split("=", 1)[1] for a in command if a.startswith(f"--{name}=")][-1]


def test_benchmark_preset_is_the_method_rows_at_batch_64_for_14_epochs_with_extras(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    extra = "--extra=--model.optimizer.init_args.lr=2e-4"
    fit, test = dry_run(capsys, tmp_path, "--preset", "benchmark", "--methods", "ncr", "--backbones", "SAF",
                        "--noise", "0.5", "--noise-types", "caption", extra)
    assert fit[3] == "fit" and test[3] == "test"
    assert Path(fit[fit.index("--config") + 1]) == REPO / "configs" / "quickstart.yaml"
    start = fit.index("--config") + 2
    assert fit[start:start + len(BENCH) + len(METHODS["ncr"])] == [*BENCH, *METHODS["ncr"]]
    assert option(fit, "trainer.max_epochs") == "14" and option(fit, "model.backbone.init_args.module_name") == "SAF"
    assert option(fit, "data.noise_type") == "caption" and option(fit, "data.noise_seed") == "0"
    for command in (fit, test):  # the extra override reaches both, after the preset's own
        assert option(command, "model.optimizer.init_args.lr") == "2e-4"


def test_quickstart_preset_is_the_config_as_shipped_over_training_seeds(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    commands = dry_run(capsys, tmp_path, "--preset", "quickstart")
    fits = [c for c in commands if c[3] == "fit"]
    assert [option(c, "seed_everything") for c in fits] == ["0", "1", "2", "3", "4"]
    for command in fits:  # the config's own batch, epochs and noise draw
        assert not any(a.startswith(("--data.batch_size=", "--trainer.max_epochs=")) for a in command)
        assert option(command, "data.noise_seed") == "0" and option(command, "data.noise_ratio") == "0.4"
        assert option(command, "data.noise_type") == "image"


def test_video_preset_runs_the_shipped_video_configs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    commands = dry_run(capsys, tmp_path, "--preset", "video-synthetic", "--seeds", "0")
    configs = [Path(c[c.index("--config") + 1]) for c in commands if c[3] == "fit"]
    assert sorted({p.name for p in configs}) == ["baseline_triplet_sum_video_synthetic.yaml",
                                                 "lnc_video_synthetic.yaml", "rcl_video_synthetic.yaml"]
    assert len(configs) == 3 * 3 and all(p.exists() for p in configs)  # 0 %, then 20 and 50 % caption
    lnc = next(c for c in commands if c[3] == "fit" and "lnc_video" in " ".join(c) and "--data.noise_ratio=0.5" in c)
    assert lnc[1:3] == ["-m", "ncl.cli"]  # python -m ncl.cli ...: run its arguments in this process
    done = ncl_here(*lnc[3:], "--print_config", cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "noise_ratio: 0.5" in done.stdout and "NclCSVLogger" in done.stdout


def test_config_presets_take_every_declared_row_with_a_config(tmp_path: Path) -> None:
    """The paper preset's rows come from the declarations and the files in configs/: each row
    with a paper config on each of its paper backbones that has a config for the dataset."""
    for stem in ("rcl_sgr_f30k", "rcl_saf_f30k", "ncr_sgr_f30k", "ncr_saf_coco", "crcl_vse_f30k",
                 "in2r_vse_f30k", "lnc_video_synthetic", "rcl_video_synthetic"):
        (tmp_path / f"{stem}.yaml").write_text("{}\n")
    rows = config_rows(tmp_path, "f30k")
    assert set(rows) == {("rcl", "sgr"), ("rcl", "saf"), ("ncr", "sgr"), ("in2r", "vse")}  # crcl: vse not its own
    assert rows == tuple(r for r in rows if r[0] == "rcl") + (("ncr", "sgr"), ("in2r", "vse"))  # row order
    assert config_rows(tmp_path, "coco") == (("ncr", "saf"),)
    # another backbone for every row that names {bb}; IN2R's in2r_vse_{ds} is VSE's only
    assert config_rows(tmp_path, "synthetic", ("video",)) == (("rcl", "video"), ("lnc", "video"))
    assert config_rows(tmp_path, "f30k", ("vse",)) == (("crcl", "vse"), ("in2r", "vse"))
    paper = PRESETS["paper"].resolved(REPO / "configs", "coco")
    assert paper.rows == config_rows(REPO / "configs", "coco") and PRESETS["paper"].rows == ()
    assert PRESETS["tiny"].resolved(tmp_path, "f30k") is PRESETS["tiny"]


def test_the_paper_preset_is_every_declared_row_with_a_paper_config(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    rows = PRESETS["paper"].resolved(REPO / "configs", "f30k").rows
    # the hand-written list of before (issue 46), now in row order, and the rows added since
    before = {("triplet", "sgr"), ("triplet", "saf"), ("triplet_warmup", "sgr"), ("triplet_sum", "sgr"),
              ("infonce", "sgr"), ("ncr", "sgr"), ("lnc", "sgr"), ("rcl", "sgr"), ("rcl", "saf"),
              ("crcl", "sgr"), ("crcl", "saf"), ("recon", "sgr"), ("recon", "saf"), ("decl", "sgr"),
              ("decl", "saf"), ("l2rm", "sgr"), ("l2rm", "saf")}
    assert before | {("gsc", "sgr"), ("gsc", "saf"), ("in2r", "vse")} <= set(rows)
    assert {m for m, _ in rows} == {name for name, row in ROWS.items() if row.paper_config}
    assert [m for m, _ in rows] == sorted((m for m, _ in rows), key=list(ROWS).index)
    fits = [c for c in dry_run(capsys, tmp_path, "--preset", "paper", "--methods", "in2r", "--seeds", "0",
                               "--noise", "0.2", "--noise-types", "caption") if c[3] == "fit"]
    assert [Path(c[c.index("--config") + 1]).name for c in fits] == ["in2r_vse_f30k.yaml"]


def test_configs_are_found_in_the_working_directory_or_named(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    assert configs_dir(REPO / "configs") == REPO / "configs"
    with pytest.raises(SystemExit, match="--configs DIR"):
        configs_dir(tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "quickstart.yaml").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    assert configs_dir() == tmp_path / "configs"


def test_slurm_writes_the_packaged_templates_and_keeps_existing_files(tmp_path: Path, capsys) -> None:
    out = tmp_path / "slurm"
    done = launch([sys.executable, "-m", "ncl.reproduce", "slurm", "--out", str(out)],
                          capture_output=True, text=True, check=False, cwd=tmp_path,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-2000:]
    for name in TEMPLATES:
        path = out / name
        assert path.read_text() == template_text(name) and path.stat().st_mode & stat.S_IXUSR
        assert "--trainer.num_nodes" in path.read_text()
    (out / TEMPLATES[0]).write_text("# edited\n")
    with pytest.raises(SystemExit, match="2"):
        reproduce.main(["slurm", "--out", str(out)])
    assert "--force" in capsys.readouterr().err
    assert (out / TEMPLATES[0]).read_text() == "# edited\n"
    assert reproduce.main(["slurm", "--out", str(out), "--force"]) == 0
    assert (out / TEMPLATES[0]).read_text() == template_text(TEMPLATES[0])


def test_the_presets_table_of_docs_results_counts_the_cells_the_tool_runs() -> None:
    """docs/results.md, "The reproduction tool": each preset's cell count is the tool's (a new
    method's row adds cells, and the page said 273 when the grid had 420)."""
    from ncl.reproduce.grid import grid

    page = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    shown = {name: int(count) for name, count in
             re.findall(r"^\| `([a-z-]+)` \| (\d+) \|", page, flags=re.MULTILINE)}
    assert set(shown) == set(PRESETS), sorted(shown)
    for name, preset in PRESETS.items():
        resolved = preset.resolved(REPO / "configs", "f30k")
        cells = grid(resolved.rows, resolved.noise_types, resolved.noises, resolved.seeds)
        assert shown[name] == len(cells), (name, shown[name], len(cells))
