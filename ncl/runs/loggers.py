"""Loggers that keep one folder per run and continue it when the run is resumed.

* :class:`NclCSVLogger` - Lightning's CSV logger (``metrics.csv``, ``hparams.yaml``) that,
  when resuming into its run folder, appends to the metrics file instead of deleting it.
* :class:`NclWandbLogger` - Weights & Biases, online with credentials and offline without;
  the run id is kept in the run folder so that a resumed run continues the same W&B run.
  It can save run files, add config entries and upload the best checkpoint as an artifact;
  :class:`ncl.callbacks.tracking.WandbRunContent` (added by ``ncl``) says what and when.

:mod:`ncl.runs.folders` says where run folders live and how ``--ckpt_path last`` finds them.
"""

from __future__ import annotations

import csv
import io
import netrc
import os
import secrets
import string
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only

from ncl.io import atomic_write_text

WANDB_ID_FILE = "wandb_run_id"
#: Folder of the W&B run's files that holds the copies of the run folder's files.
WANDB_FILES_PREFIX = "ncl"


def wandb_credentials_available() -> bool:
    """True if an API key is set in the environment or stored in ``~/.netrc``."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        auth = netrc.netrc(str(Path.home() / ".netrc"))
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False
    return any(auth.authenticators(h) for h in ("api.wandb.ai", "wandb.ai"))


class _ResumingWriter(ExperimentWriter):
    """CSV writer that keeps an existing ``metrics.csv``: rows of epochs up to
    ``resume_epoch`` (those the checkpoint includes) stay, later rows (an interrupted
    epoch that is about to run again) are dropped, and new rows are appended."""

    def __init__(self, log_dir: str, resume_epoch: int) -> None:
        self.resume_epoch = resume_epoch
        super().__init__(log_dir=log_dir)

    def _check_log_dir_exists(self) -> None:  # called by the parent's __init__
        path = Path(self.metrics_file_path)
        if not path.is_file():
            return
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            header, rows = list(reader.fieldnames or []), list(reader)
        kept = [r for r in rows if not r.get("epoch") or int(float(r["epoch"])) <= self.resume_epoch]
        self.metrics_keys = header
        if len(kept) != len(rows):
            out = io.StringIO()
            writer = csv.DictWriter(out, fieldnames=header)
            writer.writeheader()
            writer.writerows(kept)
            atomic_write_text(path, out.getvalue())


class NclCSVLogger(CSVLogger):
    """Lightning's ``CSVLogger`` that can continue a run folder.

    Args:
        save_dir, name, version, prefix, flush_logs_every_n_steps: as ``CSVLogger``
            (run folders ``<save_dir>/<name>/version_N``).
        run_dir: write into this existing run folder instead (set by ``ncl`` on resume).
        resume_epoch: with ``run_dir``: the last epoch the resumed checkpoint holds; metrics
            rows of later epochs are dropped before new ones are appended.
    """

    def __init__(self, save_dir: str = ".", name: str = "lightning_logs",
                 version: int | str | None = None, prefix: str = "",
                 flush_logs_every_n_steps: int = 100, run_dir: str | None = None,
                 resume_epoch: int | None = None) -> None:
        if run_dir is not None:
            folder = Path(run_dir)
            save_dir, name, version = str(folder.parent), "", folder.name
        super().__init__(save_dir=save_dir, name=name, version=version, prefix=prefix,
                         flush_logs_every_n_steps=flush_logs_every_n_steps)
        self._resume_epoch = resume_epoch if run_dir is not None else None

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None and self._resume_epoch is not None:
            self._fs.makedirs(self.log_dir, exist_ok=True)
            self._experiment = _ResumingWriter(self.log_dir, self._resume_epoch)
        return super().experiment


class NclWandbLogger(WandbLogger):
    """``WandbLogger`` that runs offline automatically when there are no credentials.

    Args:
        project: W&B project.
        name: run name (default: W&B's); also names the folder of this config's runs.
        save_dir: parent of the run folders: each run writes its config, noise indices,
            checkpoints, results and ``wandb/`` into ``<save_dir>/<project>/<name>/<time>-<pid>``
            (``<name>`` is ``run`` when no name is given).
        mode: ``auto`` (online with credentials, else offline), ``online``, ``offline`` or
            ``disabled``. ``WANDB_MODE`` in the environment wins, as in wandb itself.
        log_model: Lightning's option: upload checkpoints as artifacts (online only).
        log_best_checkpoint: at the end of a successful fit, log the best checkpoint of the
            first monitored ``ModelCheckpoint`` as the artifact ``model-<run id>`` (type
            ``model``, aliases ``best`` and ``latest``, metadata: monitor, mode, score, file).
            Works offline too: the file is staged locally and uploaded by ``wandb sync``.
        tags: run tags (``ncl fit``/``test`` fill them from the config when not given:
            method, backbone, dataset, noise kind and ratio, seed; :func:`run_labels`).
        display_name: the run's name in W&B (``ncl`` fills it like the tags, e.g.
            ``RCL-SGR-coco_precomp-image0.2-s0``); the W&B group is then ``name``, so the
            seeds and noise ratios of one config sit together. Folders still use ``name``.
        run_dir: continue this existing run folder and its W&B run (set by ``ncl`` on resume).
        resume_epoch: with ``run_dir``: the last epoch the resumed checkpoint holds
            (informational; W&B keeps the run's history).
    """

    def __init__(self, project: str = "ncl", name: str | None = None, save_dir: str = "runs",
                 mode: Literal["auto", "online", "offline", "disabled"] = "auto",
                 log_model: bool = False, log_best_checkpoint: bool = False,
                 tags: list[str] | None = None, display_name: str | None = None,
                 run_dir: str | None = None, resume_epoch: int | None = None) -> None:
        env_mode = os.environ.get("WANDB_MODE")
        if env_mode:
            mode = env_mode  # type: ignore[assignment]
        elif mode == "auto":
            mode = "online" if wandb_credentials_available() else "offline"
        if run_dir is None:
            stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
            folder = Path(save_dir) / project / (name or "run") / stamp
        else:
            folder = Path(run_dir)
        run_id = _run_id(folder)
        extra: dict[str, Any] = {"resume": "allow"} if run_dir is not None else {}
        if display_name is not None and name is not None:
            extra["group"] = name
        super().__init__(project=project, name=display_name or name, save_dir=str(folder),
                         log_model=log_model,
                         offline=mode == "offline", mode=mode, tags=tags, id=run_id, **extra)
        self.resume_epoch = resume_epoch
        self.mode = mode
        self.log_best_checkpoint = log_best_checkpoint
        self._best_callback: ModelCheckpoint | None = None
        self._logged_best: set[str] = set()  # checkpoint files already logged as artifacts

    @property
    def enabled(self) -> bool:
        """False for ``mode: disabled`` (``WANDB_MODE=disabled``): nothing is recorded."""
        return self.mode != "disabled"

    @rank_zero_only
    def log_config(self, entries: dict[str, Any]) -> None:
        """Add ``entries`` to the run's W&B config (values may change on resume)."""
        if self.enabled:
            self.experiment.config.update(entries, allow_val_change=True)

    @rank_zero_only
    def save_run_files(self, folder: Path, names: Iterable[str]) -> list[str]:
        """Save the files ``names`` of ``folder`` that exist as W&B run files ``ncl/<name>``.

        Each file is copied into the run's W&B files folder and saved with policy ``now``:
        the copy is the file as it was at the start of the run (what the run used), and the
        ``ncl/`` prefix keeps the run folder's ``config.yaml`` apart from W&B's own
        ``config.yaml`` (the W&B config), which W&B writes into the same files folder.

        Returns:
            The saved files' paths in the W&B files folder.
        """
        if not self.enabled:
            return []
        files_dir = Path(self.experiment.dir)
        saved: list[str] = []
        for name in names:
            source = folder / name
            if not source.is_file():
                continue
            target = files_dir / WANDB_FILES_PREFIX / name
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(target, source.read_text())
            saved += self.experiment.save(str(target), base_path=str(files_dir), policy="now",
                                          glob=False)
        return saved

    @rank_zero_only
    def after_save_checkpoint(self, checkpoint_callback: ModelCheckpoint) -> None:
        """Lightning's artifact logic, and remember the first monitored checkpoint callback
        (the one whose best checkpoint ``log_best_checkpoint`` logs)."""
        super().after_save_checkpoint(checkpoint_callback)
        if self._best_callback is None and checkpoint_callback.monitor is not None:
            self._best_callback = checkpoint_callback

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """At the end of a successful fit: Lightning's checkpoint artifacts, then the best
        checkpoint when ``log_best_checkpoint`` (once per file)."""
        super().finalize(status)
        if status == "success" and self.log_best_checkpoint and self.enabled \
                and self._experiment is not None and self._best_callback is not None:
            self._log_best_checkpoint(self._best_callback)

    def _log_best_checkpoint(self, callback: ModelCheckpoint) -> None:
        """Log ``callback``'s best checkpoint as a new version of ``model-<run id>``.

        A resumed fit logs again: W&B keeps one version per distinct file content.
        """
        import wandb

        path = callback.best_model_path
        if not path or path in self._logged_best or not Path(path).is_file():
            return
        score = callback.best_model_score
        metadata = {"monitor": callback.monitor, "mode": callback.mode,
                    "score": None if score is None else float(score),
                    "original_filename": Path(path).name}
        artifact = wandb.Artifact(name=f"model-{self.experiment.id}", type="model",
                                  metadata=metadata)
        artifact.add_file(path, name=Path(path).name, policy=self.add_file_policy)
        self.experiment.log_artifact(artifact, aliases=["best", "latest"])
        self._logged_best.add(path)


def _run_id(folder: Path) -> str:
    """The W&B run id kept in ``folder`` (created, with the folder, on the first call).

    Only rank 0 writes; other DDP ranks never start a W&B run and get a throw-away id.
    """
    path = folder / WANDB_ID_FILE
    if path.is_file():
        return path.read_text().strip()
    # W&B accepts any id of letters and digits; its own generator is not public API.
    alphabet = string.ascii_lowercase + string.digits
    run_id = "".join(secrets.choice(alphabet) for _ in range(12))
    if rank_zero_only.rank == 0:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, run_id + "\n")
    return run_id


def _value(node: Any, *keys: str) -> Any:
    """``node[k1][k2]...`` through dicts and Namespaces; ``None`` where a key is missing."""
    for key in keys:
        if node is None:
            return None
        node = node.get(key) if isinstance(node, dict) else getattr(node, key, None)
    return node


def run_labels(cfg: Any) -> tuple[str, list[str]]:
    """A W&B display name and tags from a resolved ``fit``/``test`` config.

    Args:
        cfg: the subcommand's config (``model``, ``data``, ``seed_everything``), as dicts or
            jsonargparse Namespaces.

    Returns:
        ``(name, tags)``, e.g. ``("RCL-SGR-coco_precomp-image0.2-s0", ["RCL", "SGR",
        "coco_precomp", "noise:image", "ratio:0.2", "seed:0"])``. Parts the config does not
        have are left out.
    """
    method = str(_value(cfg, "model", "class_path") or "").rsplit(".", 1)[-1]
    margs = _value(cfg, "model", "init_args")
    if method == "NCR" and (_value(margs, "momentum_regularization") or _value(margs, "noise_abandon")):
        method = "LNC"  # LNC is NCR with its regulariser and/or Randomly Noise Abandon
    backbone_path = str(_value(cfg, "model", "init_args", "backbone", "class_path") or "")
    backbone = (_value(cfg, "model", "init_args", "backbone", "init_args", "module_name")
                or backbone_path.rsplit(".", 1)[-1])
    data = _value(cfg, "data", "init_args")
    dataset = _value(data, "data_name") or (f"synthetic-{_value(data, 'preset')}"
                                             if _value(data, "preset") else None)
    kind, ratio = _value(data, "noise_type"), _value(data, "noise_ratio")
    seed = _value(cfg, "seed_everything")
    noisy = kind not in (None, "none") and ratio not in (None, 0, 0.0)
    real = _value(data, "real_noise")
    if real is None:  # the DataModule's default: CC152K's noise is real and unlabelled
        real = str(dataset or "").lower().startswith("cc152k")
    noise = f"{kind}{ratio:g}" if noisy else "realnoise" if real else "clean"
    if real and not noisy:
        kind = "real"
    parts = [method, str(backbone) if backbone else "", str(dataset or ""), noise,
             f"s{seed}" if isinstance(seed, int) and not isinstance(seed, bool) else ""]
    tags = [p for p in parts[:3] if p]
    tags += [f"noise:{kind if noisy or real else 'none'}", f"ratio:{ratio:g}" if noisy else "ratio:0"]
    if parts[4]:
        tags.append(f"seed:{seed}")
    return "-".join(p for p in parts if p), tags
