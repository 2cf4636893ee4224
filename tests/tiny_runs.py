"""Shared pieces of the tests that train tiny synthetic runs through the real CLI: the
trainer section with the configs' two checkpoints, writing the YAML, reading a run back,
comparing checkpoints, and the two-process (DDP on gloo) checks: ranks in sync, every
sample counted once."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
import yaml

from ncl.methods.declaration import tiny_cases

#: A small SAF that trains on the ``tiny`` synthetic preset (6 regions x 16 dims).
TINY_SAF = {"module_name": "SAF", "img_dim": 16, "num_regions": 6, "word_dim": 8,
            "embed_size": 16, "sim_dim": 8}


def tiny_trainer(root: Path, max_epochs: int, steps: int, monitor: str = "val/rsum",
                 **extra: Any) -> dict[str, Any]:
    """CPU, deterministic, ``steps`` batches an epoch, outputs under ``root/runs``; a best
    checkpoint monitoring ``monitor`` and an unmonitored ``last.ckpt``, as the configs have;
    ncl's default CSV logger (``logger: true``) instead of the W&B logger of ncl/defaults.yaml."""
    return {"accelerator": "cpu", "devices": 1, "max_epochs": max_epochs, "deterministic": True,
            "logger": True,
            "log_every_n_steps": 1, "enable_model_summary": False, "enable_progress_bar": False,
            "limit_train_batches": steps, "default_root_dir": str(root / "runs"),
            "callbacks": [
                {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                 "init_args": {"monitor": monitor, "mode": "max", "filename": "best-{epoch}"}},
                {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                 "init_args": {"filename": "last", "enable_version_counter": False}}],
            **extra}


#: The SGRAF of the per-method resume and DDP tests; dropout stays at 0.4, so that draws from
#: torch's global stream matter.
TINY_SGRAF = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8,
              "similarity_strategy": "chunked"}
#: One tiny case per method (``class_path`` and switches), shared by the resume, DDP and bf16
#: tests: what each method class declares (``spec.tiny``, :mod:`ncl.methods.declaration`).
METHODS: dict[str, dict[str, Any]] = tiny_cases()


def method_config(root: Path, cache: Path, method: dict[str, Any], max_epochs: int, steps: int,
                  trainer: dict[str, Any] | None = None, data: dict[str, Any] | None = None,
                  data_class: str = "ncl.data.datamodule.SyntheticDataModule") -> Path:
    """``root/config.yaml`` of a tiny run of ``method`` (an entry of :data:`METHODS`) on the
    ``tiny`` preset with 40% image noise, Adam at 2e-3, ``seed_everything: 0``; ``data_class``
    another generated DataModule with the same options (NoW's layout:
    ``ncl.data.now_synthetic.NowSyntheticDataModule``)."""
    model = {"class_path": method["class_path"],
             "init_args": {"backbone": {"class_path": "ncl.models.sgraf.SGRAF", "init_args": TINY_SGRAF},
                           **method["init_args"],  # a case may name its own backbone (IN2R's VSE)
                           "optimizer": {"class_path": "torch.optim.Adam", "init_args": {"lr": 2e-3}}}}
    data_args = {"preset": "tiny", "cache_dir": str(cache), "batch_size": 16, "eval_batch_size": 64,
                 "noise_type": "image", "noise_ratio": 0.4, **(data or {})}
    return save_config(root, {
        "seed_everything": 0, "model": model,
        "trainer": tiny_trainer(root, max_epochs, steps, **(trainer or {})),
        "data": {"class_path": data_class, "init_args": data_args}})


def save_config(root: Path, cfg: dict[str, Any]) -> Path:
    """Write ``cfg`` as ``root/config.yaml`` and return the path."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_folder(root: Path) -> Path:
    """The one run folder of a run whose ``default_root_dir`` is ``root/runs``."""
    folders = sorted((root / "runs" / "lightning_logs").iterdir())
    assert len(folders) == 1, folders
    return folders[0]


def metric_rows(folder: Path) -> list[dict[str, str]]:
    with open(folder / "metrics.csv") as handle:
        return list(csv.DictReader(handle))


def per_epoch(folder: Path, key: str) -> dict[int, float]:
    """``{epoch: value}`` of ``key``; fails when an epoch was logged twice."""
    rows = [r for r in metric_rows(folder) if r.get(key)]
    epochs = [int(r["epoch"]) for r in rows]
    assert len(epochs) == len(set(epochs)), f"duplicated rows of {key}: {epochs}"
    return {int(r["epoch"]): float(r[key]) for r in rows}


def last_checkpoint(folder: Path) -> dict:
    return torch.load(folder / "checkpoints" / "last.ckpt", weights_only=False)


# ------------------------------------------------------------------ state comparison
def flat_state(state: Any, prefix: str = "") -> dict[str, Any]:
    """``{dotted.key: leaf}`` of a nested dict/list of training state (tensors, numbers, None)."""
    if isinstance(state, dict):
        items = state.items()
    elif isinstance(state, (list, tuple)):
        items = enumerate(state)
    else:
        return {prefix: state}
    out: dict[str, Any] = {}
    for key, value in items:
        out.update(flat_state(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def assert_same_checkpoints(a: dict, b: dict) -> None:
    """Two checkpoints hold bit-identical weights and method training state (every per-sample
    tensor, every schedule counter: ``ncl_training_state``)."""
    assert a["epoch"] == b["epoch"]
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for key, value in a["state_dict"].items():
        assert torch.equal(value, b["state_dict"][key]), key
    sa, sb = flat_state(a.get("ncl_training_state", {})), flat_state(b.get("ncl_training_state", {}))
    assert sa.keys() == sb.keys()
    for key, value in sa.items():
        same = torch.equal(value, sb[key]) if isinstance(value, torch.Tensor) else value == sb[key]
        assert same, f"ncl_training_state.{key}"


# ------------------------------------------------------------------ two CPU processes
#: Two processes on gloo, forked from the test's process (``ddp_fork``): they inherit its
#: imports, where ``ddp_spawn`` starts two fresh interpreters that import torch, Lightning and
#: ncl again (about 4 s each here; a two-process case took 18.0 s with spawn, 4.3 s forked,
#: measured on the same loaded 2-core machine). The ranks' training is the same either way;
#: what only spawn exercises (pickling the trainer, the console filters in fresh processes) is
#: tested with spawn in tests/cli/test_console_output.py. CPU only: fork is safe before any
#: CUDA initialisation, and conftest.py keeps torch at one thread.
DDP_TRAINER = {"devices": 2, "strategy": "ddp_fork", "limit_train_batches": 3}
#: Data of the two-process tests. Sizes not divisible by the world size (63 images / 315
#: captions to train, 31 / 155 to validate): the DistributedSampler pads each rank's share
#: with a repeated sample, so any per-sample count or metric that did not de-duplicate by
#: index would count it twice. (Not 61 images: 305 pairs in batches of 16 leave a division
#: batch of one pair, whose loss is 0; on a set this small NCR's GMM takes that pair as the
#: only clean one, and co-training then has no batches.) Evaluation one sample at a time:
#: an embedding depends on its batch's other samples in the last bits (3e-8 for the tiny
#: caption encoder), which can flip a near-tie in the recalls between two batchings.
DDP_DATA = {"n_train": 63, "n_dev": 31, "eval_batch_size": 1}


def leaf_digest(value: Any) -> str:
    """A fingerprint of one leaf of training state: a tensor's (or NumPy array's) dtype, shape
    and bytes (sha256), any other value's ``repr`` (numbers, None, strings)."""
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    if not isinstance(value, torch.Tensor):
        return repr(value)
    flat = value.detach().cpu().contiguous().reshape(-1)
    return f"{flat.dtype}{tuple(value.shape)}:{hashlib.sha256(flat.view(torch.uint8).numpy()).hexdigest()}"


def state_digests(pl_module: L.LightningModule, weights: bool = True, buffers: bool = False,
                  state: bool = True) -> dict[str, str]:
    """``{name: digest}`` of a method's parameters, buffers (BatchNorm running statistics) and
    every leaf of its ``training_state()`` (per-sample tables, divisions, counters)."""
    out: dict[str, str] = {}
    if weights:
        out.update({f"weight {n}": leaf_digest(p) for n, p in pl_module.named_parameters()})
    if buffers:
        out.update({f"buffer {n}": leaf_digest(b) for n, b in pl_module.named_buffers()})
    if state:
        out.update({f"training_state.{k}": leaf_digest(v)
                    for k, v in flat_state(pl_module.training_state()).items()})  # type: ignore[operator]
    return out


def diverged(every: list[dict[str, str]]) -> list[str]:
    """The names whose digest is not the same in every rank's ``{name: digest}`` (a name
    missing on some rank counts as different), sorted."""
    names = sorted(set().union(*every))
    return [n for n in names if len({d.get(n) for d in every}) > 1]


class RankSyncCheck(L.Callback):
    """DDP tests: every rank must hold the same weights and the same method training state
    (every leaf of ``training_state()``: divisions, soft labels, momentum targets, their
    epochs and counters) after every training epoch; the same buffers (BatchNorm running
    statistics) when a validation ends, since each rank encodes and scores its share of the
    validation set with them; and the same weights, buffers and training state whenever a
    checkpoint is written (rank 0 writes it: it must be every rank's). Rank 0 then writes the
    epoch into ``<marker_dir>/sync_ok_world<W>`` (validation end) and
    ``<marker_dir>/saved_ok_world<W>`` (checkpoint).

    Lightning calls ``on_save_checkpoint`` on every rank (``Trainer.save_checkpoint`` runs on
    all of them), so the gather there is safe.

    Args:
        marker_dir: folder of the marker files.
    """

    def __init__(self, marker_dir: str = ".") -> None:
        self.marker_dir = marker_dir

    @staticmethod
    def check(trainer: L.Trainer, digests: dict[str, str], when: str) -> None:
        """Raise AssertionError naming every entry whose digest differs between the ranks."""
        every: list[Any] = [None] * trainer.world_size
        torch.distributed.all_gather_object(every, digests)
        if names := diverged(every):
            raise AssertionError(f"the ranks' {', '.join(names)} diverged {when} "
                                 f"(epoch {trainer.current_epoch})")

    def mark(self, trainer: L.Trainer, name: str) -> None:
        if trainer.is_global_zero:
            Path(self.marker_dir, f"{name}_world{trainer.world_size}").write_text(
                str(trainer.current_epoch))

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.check(trainer, state_digests(pl_module), "at the end of a training epoch")

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        self.check(trainer, state_digests(pl_module, weights=False, buffers=True, state=False),
                   "at the end of a validation")
        self.mark(trainer, "sync_ok")

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        self.check(trainer, state_digests(pl_module, buffers=True), "in a checkpoint")
        self.mark(trainer, "saved_ok")


def sync_check_args(marker_dir: Path) -> list[str]:
    """Command-line arguments that add :class:`RankSyncCheck` to a run."""
    return ["--trainer.callbacks+=tiny_runs.RankSyncCheck", f"--trainer.callbacks.marker_dir={marker_dir}"]


def validation_metrics(folder: Path, epoch: int | None = None) -> dict[str, float]:
    """Every ``val*`` metric of one epoch (the last one logged when ``epoch`` is None)."""
    rows = [r for r in metric_rows(folder) if any(k.startswith("val") and v for k, v in r.items())]
    assert rows, f"no validation row in {folder}"
    epoch = max(int(r["epoch"]) for r in rows) if epoch is None else epoch
    return {k: float(v) for r in rows if int(r["epoch"]) == epoch
            for k, v in r.items() if k.startswith("val") and v}


def assert_counted_once(config: Path, folder: Path, root: Path) -> None:
    """The last validation of a multi-process run equals a single-process ``ncl validate``
    of the checkpoint written after it (``last.ckpt``): every image and caption counted
    once, none lost or doubled by the DistributedSampler's padding, whatever the ranks'
    batch boundaries. Exact equality: with ``eval_batch_size: 1`` (:data:`DDP_DATA`) every
    embedding is computed the same way in both runs, and the similarities from them."""
    from ncl.cli import main

    epoch = int(last_checkpoint(folder)["epoch"])
    distributed = validation_metrics(folder, epoch)
    assert "val/rsum" in distributed, sorted(distributed)
    main(["validate", "--config", str(config), "--trainer.devices=1", "--trainer.strategy=auto",
          f"--trainer.default_root_dir={root / 'alone'}",
          f"--ckpt_path={folder / 'checkpoints' / 'last.ckpt'}"])
    (folder_alone,) = (root / "alone" / "lightning_logs").iterdir()
    alone = validation_metrics(folder_alone)
    shared = alone.keys() & distributed.keys()  # a fit-only key (CRCL's rsum_selected) aside
    assert "val/rsum" in shared, (sorted(alone), sorted(distributed))
    assert {k: alone[k] for k in shared} == {k: distributed[k] for k in shared}


def best_tested_and_predicted(config: Path, root: Path) -> tuple[dict, list[dict[str, str]]]:
    """``ncl test`` then ``ncl predict`` of a run's best checkpoint, both through the CLI in
    ``root``: the test results (``test_results.json``, asserted to hold the A, B and A+B rows
    of a two-network method) and the rows of the ranked training pairs ``predict`` wrote."""
    import csv
    import json

    from launch import ncl_here

    tested = ncl_here("test", "--config", str(config), "--ckpt_path", "best", cwd=root)
    assert tested.returncode == 0, tested.stderr[-3000:]
    results = json.loads(next(root.rglob("test_results.json")).read_text())
    assert {"A", "B", "A+B"} <= set(results), sorted(results)
    out = root / "ranked.csv"
    predicted = ncl_here("predict", "--config", str(config), "--ckpt_path", "best",
                         "--out", str(out), cwd=root)
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    return results, list(csv.DictReader(out.open(newline="", encoding="utf-8")))
