"""Run folders: one folder per run, found again and reused when the run is resumed.

A run folder holds everything a run writes: ``config.yaml``, the noise indices,
``metrics.csv`` / ``wandb/``, and ``checkpoints/`` (``best-epoch=N.ckpt``, ``last.ckpt``).
Every run of one config lives under that config's *runs root*:

=========================================  ==========================================
logger in the config                        runs root / run folder
=========================================  ==========================================
none (Lightning's default)                  ``<default_root_dir>/lightning_logs/version_N``
``ncl.runs.loggers.NclCSVLogger`` / CSVLogger    ``<save_dir>/<name>/version_N``
``ncl.runs.loggers.NclWandbLogger``              ``<save_dir>/<project>/<name>/<time>-<pid>``
``logger: false``                           ``<default_root_dir>`` itself
=========================================  ==========================================

``--ckpt_path last`` resumes the newest ``last.ckpt`` under the runs root, and ``ncl test
--ckpt_path best`` tests the best checkpoint of the newest run. A checkpoint path, given or
found, names its run folder (the parent of ``checkpoints/``); the loggers and checkpoint
callbacks are pointed back at that folder, so a resumed run appends to its metrics, keeps
its best-checkpoint tracking and continues the same W&B run; nothing in the folder is written
before the resume is validated, and its start record (``config.yaml``, noise files) never
(:mod:`ncl.runs.record`). ``--ckpt_path best`` of a run none
of whose epochs could be selected (``val/rsum_selected`` -1 throughout: warm-up) is an error,
not its last checkpoint. The functions here are pure path logic; :mod:`ncl.cli` applies them
to the parsed config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from jsonargparse import Namespace

from ncl.errors import ConfigError
from ncl.evaluation.selection import SELECTED_KEY, UNSELECTED_RSUM

CHECKPOINTS = "checkpoints"
LAST = "last.ckpt"
WANDB_LOGGERS = ("ncl.runs.loggers.NclWandbLogger",)
CSV_LOGGERS = ("ncl.runs.loggers.NclCSVLogger", "lightning.pytorch.loggers.CSVLogger",
               "lightning.pytorch.loggers.csv_logs.CSVLogger")


def run_dir_of(checkpoint: Path) -> Path:
    """The run folder of a checkpoint: the parent of its ``checkpoints/`` folder.

    A checkpoint outside a ``checkpoints/`` folder is its own folder's run.
    """
    folder = checkpoint.resolve().parent
    return folder.parent if folder.name == CHECKPOINTS else folder


#: ``ncl predict``'s tables in a run folder, ``predictions/<split>.csv``, when no ``--out``.
PREDICTIONS = "predictions"


def predictions_path(checkpoint: Path, split: str) -> Path:
    """Where ``ncl predict --ckpt_path`` without ``--out`` writes: ``<run>/predictions/<split>.csv``
    in the checkpoint's run folder (:func:`run_dir_of`)."""
    return run_dir_of(checkpoint) / PREDICTIONS / f"{split}.csv"


def _get(node: Any, key: str, default: Any = None) -> Any:
    """``node[key]`` for dicts and jsonargparse Namespaces alike."""
    if node is None:
        return default
    if isinstance(node, dict):
        return node.get(key, default)
    return getattr(node, key, default)


def first_logger(trainer_cfg: Any) -> Any:
    """The first logger of a trainer config: ``None``/``True`` (default), ``False`` or a
    ``{class_path, init_args}`` node."""
    logger = _get(trainer_cfg, "logger")
    if isinstance(logger, list):
        return logger[0] if logger else False
    return logger


def runs_root(trainer_cfg: Any) -> Path | None:
    """The folder under which this config's run folders are created (``None`` when the
    run folder is ``default_root_dir`` itself, i.e. ``logger: false``)."""
    default_root = Path(_get(trainer_cfg, "default_root_dir") or ".")
    logger = first_logger(trainer_cfg)
    if logger is None or logger is True:
        return default_root / "lightning_logs"
    if logger is False:
        return None
    path, args = _get(logger, "class_path", ""), _get(logger, "init_args") or {}
    if path in WANDB_LOGGERS:
        return (Path(_get(args, "save_dir") or "runs") / (_get(args, "project") or "ncl")
                / (_get(args, "name") or "run"))
    save_dir = _get(args, "save_dir") or default_root
    return Path(save_dir) / (_get(args, "name") or "lightning_logs")


def newest_checkpoint(trainer_cfg: Any, name: str = LAST) -> Path | None:
    """The most recently written ``checkpoints/<name>`` of this config's runs, if any."""
    root = runs_root(trainer_cfg)
    if root is None:
        candidate = Path(_get(trainer_cfg, "default_root_dir") or ".") / CHECKPOINTS / name
        return candidate if candidate.is_file() else None
    found = [p for p in root.glob(f"*/{CHECKPOINTS}/{name}") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _monitored_states(ckpt: dict[str, Any]) -> list[dict[str, Any]]:
    """The states of a checkpoint's ModelCheckpoint callbacks that monitor a metric (the
    ``last`` callback monitors none, and names last.ckpt as its "best")."""
    return [value for key, value in (ckpt.get("callbacks") or {}).items()
            if key.startswith("ModelCheckpoint") and isinstance(value, dict) and value.get("monitor")]


def _check_selectable(path: Path) -> Path:
    """``path``, unless its monitored score is the one of an epoch that may not be selected
    (``val/rsum_selected`` -1: warm-up or ``model.selection``): then no epoch of the run was
    selectable yet, and its "best" is not a best."""
    for state in _monitored_states(read_checkpoint(path)):
        score = state.get("best_model_score")
        if state["monitor"] == SELECTED_KEY and score is not None and float(score) <= UNSELECTED_RSUM:
            raise ConfigError(f"--ckpt_path best: no epoch of the run in {run_dir_of(path)} could "
                              f"be selected yet ({state['monitor']} was {UNSELECTED_RSUM:g} in every "
                              f"validation: warm-up epochs or model.selection), so it has no best "
                              f"checkpoint; train it longer, or test --ckpt_path last on purpose")
    return path


def best_checkpoint(run_dir: Path) -> Path:
    """The best checkpoint of a run: its single ``best*.ckpt``, or the one its last
    checkpoint names as best when there are several. A :class:`ConfigError` when there is
    none, or when no epoch could be selected (never a silent fall back to ``last.ckpt``)."""
    folder = run_dir / CHECKPOINTS
    found = sorted(folder.glob("best*.ckpt"))
    if len(found) == 1:
        return _check_selectable(found[0])
    last = folder / LAST
    if last.is_file():
        for state in _monitored_states(read_checkpoint(last)):
            best = state.get("best_model_path")
            if best and Path(best).is_file():
                return _check_selectable(Path(best))
    if not found:
        raise ConfigError(f"--ckpt_path best: no best*.ckpt in {folder}, and its last.ckpt names "
                          f"no best checkpoint (no ModelCheckpoint with a monitor saved one); test "
                          f"--ckpt_path last on purpose")
    raise ConfigError(f"--ckpt_path best: {len(found)} best checkpoints in {folder} and no "
                      f"last.ckpt that says which is best; pass one of them as --ckpt_path")


def read_checkpoint(path: Path) -> dict[str, Any]:
    """Load a Lightning checkpoint's dictionary (memory-mapped: the weights are not read)."""
    try:
        ckpt = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except Exception as err:  # noqa: BLE001 - any unreadable file is the user's to fix
        raise ConfigError(f"checkpoint {path} cannot be read ({type(err).__name__}: {err}); "
                          f"it may be truncated or not a checkpoint") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise ConfigError(f"checkpoint {path} is not a Lightning checkpoint (no state_dict)")
    return ckpt


def resolve_checkpoint(ckpt_path: str | None, trainer_cfg: Any, subcommand: str,
                       fresh_if_missing: bool = False) -> Path | None:
    """Turn ``--ckpt_path`` into an existing file (or ``None`` for a fresh run).

    ``last`` is the newest ``last.ckpt`` of this config's runs; ``best`` (test/validate)
    the best checkpoint of the newest run; anything else a file that must exist. Missing
    checkpoints are a :class:`ConfigError` unless ``fresh_if_missing`` (fit only).
    """
    if ckpt_path is None:
        return None
    if ckpt_path in ("hpc", "registry") or "://" in ckpt_path:
        raise ConfigError(f"--ckpt_path {ckpt_path}: ncl resumes local checkpoint files, "
                          f"'last' or 'best' only")
    where = runs_root(trainer_cfg) or Path(_get(trainer_cfg, "default_root_dir") or ".")
    if ckpt_path in ("last", "best"):
        last = newest_checkpoint(trainer_cfg)
        if last is None:
            if fresh_if_missing and subcommand == "fit":
                return None
            if subcommand == "fit":
                raise ConfigError(f"--ckpt_path {ckpt_path}: no run to resume under {where} (no run "
                                  f"folder has checkpoints/last.ckpt); check trainer.default_root_dir "
                                  f"and the logger's save_dir/name (or add --fresh_if_missing true "
                                  f"to start a new run)")
            raise ConfigError(f"--ckpt_path {ckpt_path}: no trained run of this config under {where} "
                              f"(no run folder has checkpoints); train it first with ncl fit and "
                              f"the same --config, or check trainer.default_root_dir and the "
                              f"logger's save_dir/name")
        if ckpt_path == "best":
            if subcommand == "fit":
                raise ConfigError("--ckpt_path best is for ncl test/validate; resume with "
                                  "--ckpt_path last or a checkpoint file")
            return best_checkpoint(run_dir_of(last))
        return last
    path = Path(ckpt_path)
    if path.is_dir():
        raise ConfigError(f"--ckpt_path {ckpt_path} is a folder; give a checkpoint file (.ckpt), "
                          f"best or last")
    if not path.is_file():
        if fresh_if_missing and subcommand == "fit":
            return None
        raise ConfigError(f"--ckpt_path {ckpt_path}: no such checkpoint file")
    return path


def point_logger_at(trainer_cfg: Any, run_dir: Path, resume_epoch: int) -> None:
    """Make the config's first logger write into ``run_dir`` (a resumed run's folder).

    Lightning's default logger is made explicit as :class:`~ncl.runs.loggers.NclCSVLogger` so
    that the metrics file is appended to (Lightning's CSV logger deletes it).
    """
    logger = first_logger(trainer_cfg)
    if logger is False:
        return
    if logger is None or logger is True:
        logger = default_logger(trainer_cfg)
        set_logger(trainer_cfg, logger)
    path, args = _get(logger, "class_path", ""), _get(logger, "init_args")
    if args is None:
        args = Namespace()
        _set(logger, "init_args", args)
    if path in CSV_LOGGERS and path != "ncl.runs.loggers.NclCSVLogger":
        _set(logger, "class_path", "ncl.runs.loggers.NclCSVLogger")
        path = "ncl.runs.loggers.NclCSVLogger"
    if path == "ncl.runs.loggers.NclCSVLogger" or path in WANDB_LOGGERS:
        _set(args, "run_dir", str(run_dir))
        _set(args, "resume_epoch", resume_epoch)
    else:
        raise ConfigError(f"resuming into the same run folder supports ncl's loggers "
                          f"(NclCSVLogger, NclWandbLogger) and Lightning's CSVLogger; "
                          f"the config uses {path}")


def default_logger(trainer_cfg: Any) -> Namespace:
    """Lightning's default logger made explicit: CSV metrics in
    ``<default_root_dir>/lightning_logs/version_N`` whatever else is installed (Lightning
    picks TensorBoard when it is importable), appending on resume."""
    save_dir = str(_get(trainer_cfg, "default_root_dir") or ".")
    return Namespace(class_path="ncl.runs.loggers.NclCSVLogger",
                     init_args=Namespace(save_dir=save_dir, name="lightning_logs"))


def _set(node: Any, key: str, value: Any) -> None:
    if isinstance(node, dict):
        node[key] = value
    else:
        setattr(node, key, value)


def set_logger(trainer_cfg: Any, node: Any) -> None:
    """Replace the first logger of a trainer config by ``node``."""
    logger = _get(trainer_cfg, "logger")
    if isinstance(logger, list) and logger:
        logger[0] = node
    else:
        _set(trainer_cfg, "logger", node)
