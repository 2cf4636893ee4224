"""A run's record: what its folder says about the run, kept append-only across resumes.

A run folder's ``config.yaml``, ``noise.json`` and ``noise_index.npy`` describe the run as it
started (epoch 0) and are never rewritten by a resume. A resume (``ncl fit --ckpt_path``) is
compared with the run's options before anything is built or written:

* a model or data option that differs from the run's (the method, the backbone's shapes,
  the dataset, the noise) stops it with one line naming each difference, unless
  ``--override_run true``;
* a validated resume appends one JSON line to ``resumes.jsonl`` in the run folder: when, from
  which checkpoint (epoch, global step), whether ``--override_run`` was given, and every
  option whose value differs from the run's (``[option, run's value, new value]``: trainer
  options such as ``max_epochs`` too). The run's options are ``config.yaml`` with the changes
  of earlier lines applied;
* noise that differs from the recorded one (an overridden ``noise_ratio``) is written beside
  it as ``noise.<sha>.json`` / ``noise_index.<sha>.npy`` (``<sha>``: the first 12 digits of its
  SHA-256; the ``resumes.jsonl`` line names the file), never over it.

A checkpoint outside a run folder (no ``config.yaml`` beside ``checkpoints/``) is compared
with the options it stores itself (the method's and the DataModule's hyperparameters; the
backbone is not among them, so its shapes are checked against the weights instead:
:func:`ncl.runs.checkpoints.check_weights_fit`).

Failed starts leave no run folder: a start that fails (an error before its first
checkpoint) removes the folder it created when that holds a start record only
(:data:`START_RECORD`: no checkpoint, no metrics, no W&B files); a start killed before that
(SIGKILL, pre-emption) cannot, so ``--ckpt_path last --fresh_if_missing true`` replaces the
newest such folder of the same model and data options (:func:`leftover_start`) instead of
adding one per kill.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from lightning.pytorch.cli import SaveConfigCallback

from ncl.data.noise_record import noise_record
from ncl.errors import ConfigError

CONFIG = "config.yaml"
RESUMES = "resumes.jsonl"
ABSENT = "<absent>"
#: Options that say how this command runs, not what the run is: never compared or recorded.
NOT_RECORDED = ("ckpt_path", "fresh_if_missing", "override_run", "allow_untrained", "config",
                "weights_only", "trainer.logger", "print_config")
#: Model and data options that change speed, memory or checks but not what is trained: a
#: resume may change them freely (the change is still recorded).
FREE = ("data.init_args.eval_batch_size", "data.init_args.num_workers", "data.init_args.nan_check",
        "data.init_args.nan_check_samples", "data.init_args.test_protocols",
        "model.init_args.eval_shard_size", "model.init_args.eval_autocast",
        "model.init_args.backbone.init_args.similarity_strategy",
        "model.init_args.backbone.init_args.chunk_size")
#: The options that describe the run itself: a resume must keep them (or say --override_run).
RUN_OPTIONS = ("model.", "data.")
#: A start record only: the files a run writes before its first step (config, noise, logger
#: headers). A folder holding nothing else never trained a step worth keeping.
START_RECORD = {CONFIG, "hparams.yaml", "noise.json", "noise_index.npy", "wandb_run_id"}


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a.b[0].c": leaf}`` of a config loaded from YAML (lists of mappings indexed, other
    lists kept whole as leaves)."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(node, list) and node and all(isinstance(item, dict) for item in node):
        out = {}
        for i, item in enumerate(node):
            out.update(flatten(item, f"{prefix}[{i}]"))
        return out
    return {prefix: node}


def _recorded(key: str) -> bool:
    """Whether an option is part of the run (not one of :data:`NOT_RECORDED`, nor under one)."""
    return not any(key == skip or key.startswith((skip + ".", skip + "[")) for skip in NOT_RECORDED)


def run_options(run_dir: Path) -> dict[str, Any] | None:
    """The run's options, flattened: ``config.yaml`` with the changes of ``resumes.jsonl``
    applied (``None`` when the folder has no ``config.yaml``)."""
    config = run_dir / CONFIG
    if not config.is_file():
        return None
    try:
        options = flatten(yaml.safe_load(config.read_text()) or {})
        lines = (run_dir / RESUMES).read_text().splitlines() if (run_dir / RESUMES).is_file() else []
        for line in filter(str.strip, lines):
            for key, _, new in json.loads(line).get("changes", []):
                if new == ABSENT:
                    options.pop(key, None)
                else:
                    options[key] = new
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise ConfigError(f"the run record in {run_dir} cannot be read ({err}); resume with "
                          f"--ckpt_path pointing at a copy of the checkpoint outside it") from None
    return options


def stored_options(ckpt: dict[str, Any]) -> dict[str, Any]:
    """The options a checkpoint stores itself, named like the config's (``model.class_path``,
    ``model.init_args.tau``, ``data.init_args.noise_ratio`` ...)."""
    out: dict[str, Any] = {}
    for section, key in (("model", "hyper_parameters"), ("data", "datamodule_hyper_parameters")):
        for name, value in (ckpt.get(key) or {}).items():
            if name == "_class_path":
                out[f"{section}.class_path"] = value
            elif not name.startswith("_"):
                out.update(flatten(value, f"{section}.init_args.{name}"))
    return out


def differences(run: dict[str, Any], new: dict[str, Any],
                prefixes: Iterable[str] = ("",)) -> list[tuple[str, Any, Any]]:
    """``(option, run's value, new value)`` for every option under ``prefixes`` whose value
    differs. An option only one side has (another ncl version's) is not compared, except a
    ``class_path``; the options of a class whose ``class_path`` differs are not listed
    one by one."""
    prefixes = tuple(prefixes)
    keys = sorted(k for k in set(run) | set(new) if k.startswith(prefixes) and _recorded(k))
    found = [(k, run.get(k, ABSENT), new.get(k, ABSENT)) for k in keys
             if (k in run and k in new or k.endswith("class_path")) and run.get(k, ABSENT) != new.get(k, ABSENT)]
    replaced = [k[:-len("class_path")] + "init_args" for k, _, _ in found if k.endswith("class_path")]
    return [d for d in found if not any(d[0].startswith(r) for r in replaced)]


def _shown(value: Any) -> str:
    return ABSENT if value == ABSENT else json.dumps(value) if not isinstance(value, str) else value


def describe(diffs: Iterable[tuple[str, Any, Any]]) -> str:
    """``option: X (the run) vs Y (now)`` for each difference, joined with ``; ``."""
    return "; ".join(f"{key} {_shown(old)} (the run) vs {_shown(new)} (now)" for key, old, new in diffs)


def check_resume(run_dir: Path, ckpt_path: Path, ckpt: dict[str, Any], new: dict[str, Any],
                 override: bool) -> list[tuple[str, Any, Any]]:
    """Compare a resume's options (``new``, flattened) with the run's; return every recorded
    difference, or raise one :class:`ConfigError` naming the model/data ones unless
    ``override``."""
    run = run_options(run_dir)
    source = (f"the options stored in {ckpt_path}" if run is None else f"{run_dir / CONFIG}"
              + (f" and {RESUMES}" if (run_dir / RESUMES).is_file() else ""))
    if run is None:
        run = stored_options(ckpt)
        new = {k: v for k, v in new.items() if k.endswith("class_path") or k in run}
    changes = differences(run, new)
    blocking = [d for d in changes if d[0].startswith(RUN_OPTIONS) and not d[0].startswith(FREE)]
    if blocking and not override:
        raise ConfigError(f"--ckpt_path {ckpt_path}: this resume's options differ from the run's "
                          f"({source}): {describe(blocking)}; resume with the run's options, or "
                          f"add --override_run true to continue the run with the new ones "
                          f"(recorded in {run_dir / RESUMES})")
    return changes


def record_resume(run_dir: Path, ckpt_path: Path, ckpt: dict[str, Any],
                  changes: list[tuple[str, Any, Any]], override: bool,
                  noise_sha256: str | None = None) -> None:
    """Append one line to the run's ``resumes.jsonl`` (rank 0, once the resume is valid);
    ``noise`` names the noise record in use when the DataModule drew or read noise."""
    entry: dict[str, Any] = {
        "resumed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "checkpoint": str(ckpt_path.resolve()),
        "epoch": int(ckpt.get("epoch", 0)), "global_step": int(ckpt.get("global_step", 0)),
        "override_run": bool(override), "changes": [list(c) for c in changes]}
    if noise_sha256:
        entry["noise"] = noise_record(run_dir, noise_sha256)
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / RESUMES, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry, default=str) + "\n")


def is_start_record_only(folder: Path) -> bool:
    """Whether a run folder holds nothing but a start record (no checkpoint, no metrics,
    no W&B files): what a start that failed or was killed before its first step leaves."""
    if not folder.is_dir():
        return False
    files = [p for p in folder.rglob("*") if not p.is_dir()]
    return all(p.parent == folder and p.name in START_RECORD for p in files)


def leftover_start(root: Path | None, options: dict[str, Any]) -> Path | None:
    """The newest run folder under ``root`` that holds a start record only and was started
    with the same model and data ``options``: a start of this run killed before its first
    step (``--fresh_if_missing`` then starts again; that folder is replaced, not added to)."""
    if root is None or not root.is_dir():
        return None
    folders = sorted((p for p in root.iterdir() if (p / CONFIG).is_file()),
                     key=lambda p: (p / CONFIG).stat().st_mtime)
    if not folders or not is_start_record_only(folders[-1]):
        return None
    recorded = run_options(folders[-1]) or {}
    same = not [d for d in differences(recorded, options, RUN_OPTIONS) if not d[0].startswith(FREE)]
    return folders[-1] if same else None


def remove_start_record(folder: Path) -> None:
    """Remove a run folder that holds a start record only (checked again here), and its
    parent (the runs root) when that is left empty."""
    if is_start_record_only(folder):
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            folder.parent.rmdir()  # only succeeds when empty


@dataclass
class Resume:
    """A validated resume: the run folder, the checkpoint and what changed."""

    run_dir: Path
    ckpt_path: Path
    ckpt: dict[str, Any]
    changes: list[tuple[str, Any, Any]] = field(default_factory=list)
    override: bool = False


class RunConfigSaver(SaveConfigCallback):
    """LightningCLI's config saver, append-only: a new run writes ``config.yaml``; a resume
    into its run's folder (``resume`` set by :class:`ncl.cli.app.NclCLI`) appends its line to
    ``resumes.jsonl`` instead and leaves ``config.yaml`` as the run started."""

    resume: Resume | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.resume is None:
            super().setup(trainer, pl_module, stage)
            return
        if self.already_saved:
            return
        if trainer.is_global_zero:
            noise = getattr(trainer.datamodule, "noise", None)
            r = self.resume
            record_resume(r.run_dir, r.ckpt_path, r.ckpt, r.changes, r.override,
                          getattr(noise, "sha256", None))
            self.save_config(trainer, pl_module, stage)
        self.already_saved = trainer.strategy.broadcast(True)
