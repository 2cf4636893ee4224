"""Offline Weights & Biases runs of ``ncl fit`` / ``ncl test`` hold what a researcher expects
(issue 13): the run folder's config and noise files, provenance in the W&B config, the
scalars, the test results table and, when asked, the best checkpoint as an artifact.

The CLI runs in a subprocess without credentials (no ``WANDB_API_KEY``, ``HOME`` without a
``.netrc``, ``WANDB_MODE`` unset, so mode ``auto`` must choose offline), with a proxy that
refuses every connection, stdin closed and a timeout; the offline ``.wandb`` file is then
read back record by record.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tiny_runs import TINY_SAF, save_config, tiny_trainer
from wandb.proto import wandb_internal_pb2

import ncl
from ncl.callbacks.figures import Figures
from ncl.callbacks.tracking import WandbRunContent, results_table, source_commit
from ncl.cli import added_callbacks
from ncl.evaluation.report import read_results
from ncl.runs.loggers import NclWandbLogger
from launch import launch

REPO = Path(__file__).resolve().parents[2]
EPOCHS = 2


# ------------------------------------------------------------- reading an offline run
def wandb_records(path: Path) -> list[wandb_internal_pb2.Record]:
    """The records of a ``run-<id>.wandb`` file.

    wandb 0.31 ships no Python reader (``wandb.sdk.internal.datastore`` is gone); the file
    is a 7-byte header (``:W&B``, magic ``0xBEE1``, version) followed by LevelDB-log chunks
    in 32 KiB blocks: CRC (4 bytes), length (2, little-endian), type (1: full, 2: first,
    3: middle, 4: last), data; a block's tail shorter than a chunk header is padding.
    """
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    block, pos, parts, records = 32768, 7, [], []
    while pos + 7 <= len(data):
        left = block - pos % block
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if left < 7 or (length == 0 and kind == 0):  # padding up to the next block
            pos += left
            continue
        parts.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            records.append(record)
            parts = []
    return records


def _items(items: Any) -> dict[str, Any]:
    """Config/history items as ``{"a/b": value}`` (nested keys joined with ``/``)."""
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}


def read_offline_run(run_folder: Path) -> dict[str, Any]:
    """The one offline W&B run under ``run_folder``: its files folder, config, history rows
    and artifacts."""
    runs = list((run_folder / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, f"expected one offline run in {run_folder}/wandb: {runs}"
    records = wandb_records(next(runs[0].glob("run-*.wandb")))
    config: dict[str, Any] = {}
    history: list[dict[str, Any]] = []
    artifacts, run = [], None
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
        elif kind == "config":
            config.update(_items(record.config.update))
        elif kind == "history":
            history.append(_items(record.history.item))
        elif kind == "artifact":
            artifacts.append(record.artifact)
    return {"files": runs[0] / "files", "config": config, "history": history,
            "artifacts": artifacts, "run": run}


# ------------------------------------------------------------- the runs
def offline_env(home: Path) -> dict[str, str]:
    """This process's environment without W&B settings or credentials, a fresh HOME and a
    proxy on a closed port (any network attempt fails at once)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("WANDB_") and k.lower() not in ("no_proxy", "all_proxy")}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9",
               https_proxy="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9",
               OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return env


def ncl_offline(args: list[str], root: Path) -> subprocess.CompletedProcess:
    done = launch([sys.executable, "-m", "ncl.cli", *args], cwd=root,
                          env=offline_env(root / "home"), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, synthetic_cache: Path) -> dict[str, Path]:
    """``ncl fit`` (2 epochs of 2 steps) then ``ncl test --ckpt_path best``: their run folders."""
    root = tmp_path_factory.mktemp("wandb_offline")
    trainer = tiny_trainer(root, max_epochs=EPOCHS, steps=2)
    trainer["logger"] = {"class_path": "ncl.runs.loggers.NclWandbLogger",
                         "init_args": {"project": "p", "name": "tiny", "save_dir": str(root / "w"),
                                       "log_best_checkpoint": True}}
    cfg = {"seed_everything": 0, "trainer": trainer,
           "model": {"class_path": "ncl.methods.rcl.RCL", "init_args": {
               "backbone": {"class_path": "ncl.models.sgraf.SGRAF", "init_args": TINY_SAF},
               "optimizer": {"class_path": "torch.optim.Adam", "init_args": {"lr": 2e-3}}}},
           "data": {"class_path": "ncl.data.datamodule.SyntheticDataModule",
                    "init_args": {"preset": "tiny", "cache_dir": str(synthetic_cache),
                                  "batch_size": 16, "eval_batch_size": 64,
                                  "noise_type": "image", "noise_ratio": 0.4}}}
    config = save_config(root, cfg)
    ncl_offline(["fit", "--config", str(config)], root)
    ncl_offline(["test", "--config", str(config), "--ckpt_path", "best"], root)
    folders = list((root / "w" / "p" / "tiny").iterdir())
    fit = [f for f in folders if (f / "checkpoints").is_dir()]
    test = [f for f in folders if (f / "test_results.json").is_file()]
    assert len(folders) == 2 and len(fit) == 1 and len(test) == 1, folders
    return {"fit": fit[0], "test": test[0]}


def expected_commit() -> str:
    """The repository's HEAD, computed here independently, or "unknown" outside a checkout."""
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False)
    is_checkout = done.returncode == 0 and (REPO / ".git").exists()
    return done.stdout.strip() if is_checkout else "unknown"


def test_fit_run_holds_files_provenance_and_scalars(runs: dict[str, Path]) -> None:
    folder = runs["fit"]
    run = read_offline_run(folder)
    # the run folder's files, as W&B run files (under ncl/: W&B's own config.yaml differs)
    for name in ("config.yaml", "noise.json"):
        assert (run["files"] / "ncl" / name).read_text() == (folder / name).read_text()
    noise = json.loads((folder / "noise.json").read_text())
    config = run["config"]
    assert config["noise_sha256"] == noise["sha256"]
    assert config["ncl_version"] == ncl.__version__
    assert config["git_commit"] == expected_commit()
    assert Path(config["run_dir"]) == folder.resolve()
    losses = [row["train/loss_step"] for row in run["history"] if "train/loss_step" in row]
    assert len(losses) == EPOCHS * 2 and all(math.isfinite(v) for v in losses)
    rsums = [row["val/rsum"] for row in run["history"] if "val/rsum" in row]
    assert len(rsums) == EPOCHS and all(0 <= v <= 600 for v in rsums)
    # log_best_checkpoint: the best checkpoint, once, as a model artifact
    models = [a for a in run["artifacts"] if a.type == "model"]
    best = list((folder / "checkpoints").glob("best*.ckpt"))
    assert len(models) == 1 and len(best) == 1
    assert "best" in models[0].aliases
    meta = json.loads(models[0].metadata)
    assert meta["original_filename"] == best[0].name and meta["score"] == max(rsums)
    # name and tags from the config (method, backbone, data, noise, seed), grouped by name
    assert run["run"].display_name == "RCL-SAF-synthetic-tiny-image0.4-s0"
    assert list(run["run"].tags) == ["RCL", "SAF", "synthetic-tiny", "noise:image", "ratio:0.4", "seed:0"]
    assert run["run"].run_group == "tiny"
    # the figures: PNG in the run folder and the same figures as W&B images
    pngs = sorted(p.name for p in (folder / "figures").glob("*.png"))
    assert "rsum.png" in pngs
    images = [row for row in run["history"] if "figures/rsum/filenames" in row]
    assert len(images) == EPOCHS  # one rsum figure per validation, as files of the run
    for row in images:
        (name,) = row["figures/rsum/filenames"]
        assert (run["files"] / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_test_run_holds_the_results_table(runs: dict[str, Path]) -> None:
    folder = runs["test"]
    run = read_offline_run(folder)
    assert (run["files"] / "ncl" / "config.yaml").read_text() == (folder / "config.yaml").read_text()
    assert run["config"]["git_commit"] == expected_commit()
    tables = [row for row in run["history"] if "test/results/_type" in row]
    assert len(tables) == 1 and tables[0]["test/results/_type"] == "table-file"
    table = json.loads((run["files"] / tables[0]["test/results/path"]).read_text())
    # the same numbers as test_results.json, which ncl.evaluation.report writes (rounded)
    written, _ = read_results(json.loads((folder / "test_results.json").read_text()))
    expected = {(s, p): m for s, by_protocol in written.items() for p, m in by_protocol.items()}
    rows = {(r[0], r[1]): dict(zip(table["columns"][2:], r[2:])) for r in table["data"]}
    assert table["columns"] == ["system", "protocol", "rsum", "i2t_r1", "i2t_r5", "i2t_r10",
                                "t2i_r1", "t2i_r5", "t2i_r10"]
    assert rows.keys() == expected.keys()
    for key, metrics in rows.items():
        for name, value in metrics.items():
            assert value == pytest.approx(expected[key][name], abs=1e-3), (key, name)


# ------------------------------------------------------------- pieces, without a run
def test_results_table_rows_per_system_and_protocol() -> None:
    metrics = {"test/net/1k/rsum": 300.0, "val/rsum": 1.0, "test/net/1k/i2t_r1": 50.0,
               "test/ens/5k/rsum": 200.0, "test/net/5k/rsum": 100.0, "test/net/1k/other": 9.0}
    columns, rows = results_table(metrics)
    assert columns[:3] == ["system", "protocol", "rsum"] and len(columns) == 9
    assert [r[:3] for r in rows] == [["net", "1k", 300.0], ["ens", "5k", 200.0], ["net", "5k", 100.0]]
    assert rows[0][columns.index("i2t_r1")] == 50.0 and rows[0][columns.index("t2i_r10")] is None
    assert results_table({"val/rsum": 1.0}) == (columns, [])


def test_source_commit_of_a_folder_outside_a_checkout(tmp_path: Path) -> None:
    package = tmp_path / "ncl"
    package.mkdir()
    assert source_commit(package) == ("unknown", None)


def test_added_callbacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning.pytorch.callbacks import TQDMProgressBar

    from ncl.callbacks.console import ConsoleInEveryProcess
    from ncl.callbacks.progress_bars import LineProgressBar, NclRichProgressBar

    monkeypatch.delenv("WANDB_MODE", raising=False)  # it would override the modes below

    off = NclWandbLogger(save_dir=str(tmp_path), mode="disabled")
    offline = NclWandbLogger(save_dir=str(tmp_path), mode="offline")
    kinds = lambda found: [type(cb) for cb in found]  # noqa: E731
    always = [Figures, ConsoleInEveryProcess]  # every subcommand: see added_callbacks
    assert kinds(added_callbacks({"logger": offline}, [], terminal=True)) == [WandbRunContent,
                                                                           NclRichProgressBar, *always]
    assert kinds(added_callbacks({"logger": [off]}, [], terminal=True)) == [NclRichProgressBar, *always]
    # no terminal: plain progress lines; a progress bar configured, or the bar switched off: none
    assert kinds(added_callbacks({"logger": offline}, [], terminal=False)) == [WandbRunContent,
                                                                            LineProgressBar, *always]
    assert kinds(added_callbacks({"callbacks": [TQDMProgressBar()]}, [], terminal=True)) == always
    assert kinds(added_callbacks({"enable_progress_bar": False}, [], terminal=True)) == always
    # figures unless the config brings its own Figures callback
    assert kinds(added_callbacks({"enable_progress_bar": False}, [], terminal=False,
                                 subcommand="test")) == always
    assert kinds(added_callbacks({"callbacks": [Figures(enabled=False)]}, [], terminal=False,
                                 subcommand="fit")) == [LineProgressBar, ConsoleInEveryProcess]
    assert kinds(added_callbacks({"logger": offline, "enable_progress_bar": False},
                                 [WandbRunContent()], terminal=False)) == always
    assert off.save_run_files(tmp_path, ["x"]) == [] and off._experiment is None
