"""The ``ncl`` application: a LightningCLI in subclass mode (its parser and the checks after
parsing: :mod:`ncl.cli.parser`; checkpoint options: :mod:`ncl.cli.checkpoint_options`).

:mod:`ncl.cli` is the console entry point that runs it.

``ncl fit | validate | test | predict --config FILE [--config FILE ...] [--key value ...]``;
``ncl predict --config <fit config> --ckpt_path best|last|FILE [--out FILE]`` (or an ``eval_*``
config with ``--out``) ranks a split's pairs by how likely they are mismatched, without ``--out``
into the run's ``predictions/<split>.csv``: its own
options are those of :class:`~ncl.callbacks.prediction_writer.RankedPairsWriter`, added to the
``predict`` parser (:mod:`ncl.evaluation.ranking`).
Methods (``model``) and DataModules (``data``) are chosen by ``class_path`` in YAML; the
resolved config is saved as ``config.yaml`` in every run directory. The vocabulary size is
read from the DataModule's vocabulary file and passed to the method, so a config never has
to repeat it.
"""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
import yaml
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.callbacks import (
    Callback,
    LearningRateMonitor,
    ModelCheckpoint,
    ProgressBar,
)
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.io import CheckpointIO

from ncl.callbacks.console import ConsoleInEveryProcess
from ncl.callbacks.figures import Figures
from ncl.callbacks.prediction_writer import RankedPairsWriter, check_scorer
from ncl.callbacks.progress_bars import LineProgressBar, NclRichProgressBar
from ncl.callbacks.tracking import WandbRunContent
from ncl.cli.checkpoint_options import (
    _extra_kwargs,
    _flat,
    check_trained_weights,
    drop_removed_options,
    warn_replaced_model_options,
)
from ncl.cli.input_checks import precision_note
from ncl.cli.parser import (  # noqa: F401
    NclArgumentParser,
    _as_list,
    _get,
    check_prediction_options,
    prediction_writer,
)
from ncl.compose import TRAINER_DEFAULTS, expand_configs
from ncl.errors import ConfigError, NclWarning
from ncl.runs.checkpoints import (
    AtomicCheckpointIO,
    check_backbone,
    check_weights_fit,
    warn_other_noise,
)
from ncl.runs.folders import (
    CHECKPOINTS,
    WANDB_LOGGERS,
    default_logger,
    first_logger,
    point_logger_at,
    predictions_path,
    read_checkpoint,
    resolve_checkpoint,
    run_dir_of,
    runs_root,
    set_logger,
)
from ncl.runs.loggers import NclWandbLogger, run_labels
from ncl.runs.record import (
    Resume,
    RunConfigSaver,
    check_resume,
    flatten,
    leftover_start,
    remove_start_record,
)


class NclCLI(LightningCLI):
    """LightningCLI with ncl's argument links and atomic checkpoint writes; every parse loads
    the trainer defaults (``ncl/defaults.yaml``) first and expands configs that ``compose``
    fragments (:mod:`ncl.compose`)."""

    def __init__(self, *args: Any, parser_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        parser_kwargs = dict(parser_kwargs or {})
        defaults = {"default_config_files": [str(TRAINER_DEFAULTS)]}
        if kwargs.get("run", True):  # one parser per subcommand
            for sub in ("fit", "validate", "test", "predict"):
                parser_kwargs[sub] = {**defaults, **parser_kwargs.get(sub, {})}
        else:
            parser_kwargs = {**defaults, **parser_kwargs}
        # config.yaml when a run starts, a resumes.jsonl line when it is resumed (ncl.runs.record)
        kwargs.setdefault("save_config_callback", RunConfigSaver)
        super().__init__(*args, parser_kwargs=parser_kwargs, **kwargs)

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Expand ``--config`` files that compose fragments, then parse."""
        if args is None:  # the command line itself (LightningCLI warns when given both)
            sys.argv[1:] = expand_configs(sys.argv[1:])
        elif isinstance(args, (list, tuple)):
            args = expand_configs(list(args))
        super().parse_arguments(parser, args)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("data.vocab_size", "model.init_args.vocab_size", apply_on="instantiate")
        parser.add_argument("--fresh_if_missing", type=bool, default=False,
                            help="with --ckpt_path last (or a path): start a new run instead of "
                                 "stopping when there is no checkpoint to resume")
        parser.add_argument("--allow_untrained", type=bool, default=False,
                            help="ncl test/validate without --ckpt_path: score the model's "
                                 "initial (untrained) weights, to check the evaluation itself; "
                                 "never a result")
        parser.add_argument("--float32_matmul_precision", type=Literal["highest", "high", "medium"],
                            default="highest",
                            help="torch.set_float32_matmul_precision for float32 matrix "
                                 "products: highest (exact float32, the default), high (TF32 "
                                 "on Ampere+ GPUs, about 10 bits of mantissa), medium (bf16 "
                                 "where supported); docs/precision.md")
        parser.add_argument("--override_run", type=bool, default=False,
                            help="ncl fit --ckpt_path: resume although model or data options "
                                 "differ from the run's (otherwise one error line names them); "
                                 "the run's config.yaml and noise files stay as the run started, "
                                 "the changes are appended to its resumes.jsonl (new noise as "
                                 "noise.<sha>.json beside noise.json)")

    def _parse_ckpt_path(self) -> None:
        """Resolve ``--ckpt_path`` (``last``, ``best``, a file; :mod:`ncl.runs.folders`) and check
        that it can be read, before Lightning reads the hyperparameters stored in it.

        A resume is checked against its run's record before anything is built or written
        (:func:`ncl.runs.record.check_resume`), an evaluated checkpoint against the config's
        backbone (:func:`ncl.runs.checkpoints.check_backbone`)."""
        self._resume: tuple[Path, int] | None = None
        self._resume_record: Resume | None = None
        self._leftover: Path | None = None
        subcommand = self.config.get("subcommand")
        cfg = self.config[subcommand] if subcommand else None
        if cfg is not None and "ckpt_path" in cfg:
            path = resolve_checkpoint(cfg.ckpt_path, cfg.trainer, subcommand,
                                      bool(cfg.get("fresh_if_missing")))
            cfg.ckpt_path = None if path is None else str(path)
            if path is not None:
                ckpt = read_checkpoint(path)
                self._resume = (path, int(ckpt.get("epoch", 0))) if subcommand == "fit" else None
                self._check_run_record(subcommand, path, ckpt)
                if subcommand == "predict" and cfg.get("out") is None:
                    cfg.out = str(predictions_path(path, cfg.split).absolute())
                    check_prediction_options(cfg)
            elif subcommand == "fit" and cfg.get("fresh_if_missing"):
                self._leftover = leftover_start(runs_root(cfg.trainer), self._options(subcommand))
        if cfg is not None and subcommand in ("test", "validate", "predict"):
            check_trained_weights(cfg, subcommand)
        if self._resume_record is not None and self._resume_record.override:
            return  # the resumed run's options are the user's: the stored ones must not win
        before = _flat(cfg.get("model")) if cfg is not None else {}
        own_extra = set(_extra_kwargs(cfg))
        super()._parse_ckpt_path()
        if cfg is not None and cfg.get("ckpt_path"):
            drop_removed_options(self.config[subcommand], own_extra, cfg.ckpt_path)
            warn_replaced_model_options(before, _flat(self.config[subcommand].get("model")),
                                        cfg.ckpt_path)

    def _options(self, subcommand: str) -> dict[str, Any]:
        """The subcommand's config as ``config.yaml`` would hold it, flattened."""
        text = self._parser(subcommand).dump(self.config[subcommand], skip_none=False, skip_check=True)
        return flatten(yaml.safe_load(text) or {})

    def _check_run_record(self, subcommand: str, path: Path, ckpt: dict[str, Any]) -> None:
        """A resume: one error line for options that differ from the run's (unless
        ``--override_run``), else the record of the resume. An evaluation: one error line for
        backbone options that differ from the checkpoint's run."""
        options = self._options(subcommand)
        if subcommand != "fit":
            check_backbone(path, options)
            if subcommand == "predict":
                warn_other_noise(path, options)
            return
        override = bool(self.config[subcommand].get("override_run"))
        changes = check_resume(run_dir_of(path), path, ckpt, options, override)
        steps = {key: ckpt.get(key, 0) for key in ("epoch", "global_step")}
        self._resume_record = Resume(run_dir_of(path), path, steps, changes, override)

    def _run_subcommand(self, subcommand: str) -> None:
        """Check that the checkpoint's weights fit the model first; a run folder this command
        created and left holding a start record only (it failed before its first step) is
        removed: failed starts leave no empty run folders."""
        try:
            ckpt_path = self.config[subcommand].get("ckpt_path")
            if ckpt_path:
                check_weights_fit(self.model, ckpt_path)
            super()._run_subcommand(subcommand)
        except BaseException as err:
            new_run = getattr(self, "_new_run_dir", None)
            if new_run is not None and self.trainer.is_global_zero:
                remove_start_record(new_run)
            line = run_error(err, self.config[subcommand])
            if line is not None:
                raise ConfigError(line) from err
            raise

    def before_instantiate_classes(self) -> None:
        """Build ``ncl predict``'s writer, make the default logger explicit and, when
        resuming, point the loggers back at the checkpoint's run folder (:mod:`ncl.runs.folders`)."""
        self._run_dir: Path | None = None
        self._writer: RankedPairsWriter | None = None
        if self.subcommand == "predict":
            self._writer = prediction_writer(self.config["predict"])
            # It writes its table and nothing else: a config.yaml would overwrite the one an
            # `ncl test` of the same config left in the same folder.
            self.save_config_callback = None
        trainer_cfg = (self.config[self.subcommand] if self.subcommand else self.config).trainer
        if self.subcommand == "predict" and self.config["predict"].get("ckpt_path"):
            # A fit config's logger would start a new, empty run folder beside the trained
            # one (and a W&B run) for a command that writes one table into the trained run.
            trainer_cfg.logger = False
        if first_logger(trainer_cfg) in (None, True):
            set_logger(trainer_cfg, default_logger(trainer_cfg))
        label_wandb_run(self.config[self.subcommand] if self.subcommand else self.config)
        sub_cfg = self.config[self.subcommand] if self.subcommand else self.config
        torch.set_float32_matmul_precision(sub_cfg.get("float32_matmul_precision") or "highest")
        if self.subcommand in ("validate", "test", "predict"):
            # Evaluating a checkpoint never writes checkpoints; its saved folder is irrelevant.
            warnings.filterwarnings("ignore", message=r"The dirpath has changed from")
        leftover = getattr(self, "_leftover", None)
        if leftover is not None and rank_zero_only.rank == 0:
            remove_start_record(leftover)  # a killed start of this run: start it again, once
        if getattr(self, "_resume", None) is not None:
            path, epoch = self._resume
            self._run_dir = run_dir_of(path)
            point_logger_at(trainer_cfg, self._run_dir, epoch)
            # Expected when resuming into the run's own folder; not worth a warning.
            warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")

    def instantiate_classes(self) -> None:
        """Build model, data and trainer; an error Lightning, torch or jsonargparse raise
        while building (a bad option value that no earlier check knew) is one ConfigError
        line naming the option where it can be told (:func:`building_error`)."""
        try:
            super().instantiate_classes()
        except Exception as err:  # only errors of those libraries are rewritten
            line = building_error(err, self.config[self.subcommand] if self.subcommand else self.config)
            if line is None:
                raise
            raise ConfigError(line) from err

    def before_predict(self) -> None:
        """``ncl predict``: one clear error for a model that cannot rank pairs (not an ncl
        method), before Lightning's own check asks it for a ``forward``."""
        check_scorer(self.model)

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Callback]) -> L.Trainer:
        """Add :class:`AtomicCheckpointIO` unless the config brings its own CheckpointIO, add
        ncl's callbacks (:func:`added_callbacks`), and keep checkpoints in the run folder
        (``<run>/checkpoints``)."""
        plugins = config.get("plugins")
        plugins = [] if plugins is None else list(plugins) if isinstance(plugins, list) else [plugins]
        if not any(isinstance(p, CheckpointIO) for p in plugins):
            plugins.append(AtomicCheckpointIO())
        config["plugins"] = plugins
        if config.get("logger") is False and config.get("callbacks"):
            # the default LR monitor needs a logger: no logger, no monitor
            listed = config["callbacks"] if isinstance(config["callbacks"], list) else [config["callbacks"]]
            config["callbacks"] = [c for c in listed if not isinstance(c, LearningRateMonitor)]
        callbacks = [*callbacks, *added_callbacks(config, callbacks, subcommand=self.subcommand)]
        if getattr(self, "_writer", None) is not None:
            callbacks.append(self._writer)
        trainer = super()._instantiate_trainer(config, callbacks)
        warn_slow_precision(trainer)
        run_dir = getattr(self, "_run_dir", None) or Path(trainer.log_dir or trainer.default_root_dir)
        for callback in trainer.callbacks:
            if isinstance(callback, RunConfigSaver):
                callback.resume = getattr(self, "_resume_record", None)
        # a run folder of its own (not a resumed one, not default_root_dir itself)
        self._new_run_dir = (run_dir if getattr(self, "_run_dir", None) is None and trainer.loggers
                             and run_dir.resolve() != Path(trainer.default_root_dir).resolve() else None)
        for callback in trainer.checkpoint_callbacks:
            # The same folder on resume is what lets ModelCheckpoint restore its best score
            # and path (it ignores its saved state when the folder differs).
            if isinstance(callback, ModelCheckpoint) and callback.dirpath is None:
                callback.dirpath = str(run_dir.resolve() / CHECKPOINTS)
        return trainer



#: Packages whose errors while building are about the user's values, not bugs of ncl.
_LIBRARIES = ("lightning", "torch", "jsonargparse", "torchmetrics")


def building_error(err: BaseException, cfg: Any, libraries: Sequence[str] = _LIBRARIES,
                   named_only: bool = False) -> str | None:
    """One line for an error raised inside Lightning, torch or jsonargparse while the classes
    are built, naming the option whose name the message mentions; ``None`` for an error of
    ncl's own code (a bug keeps its traceback) or a user error ncl already words.

    Args:
        err: the exception.
        cfg: the subcommand's config (the options that can be named).
        libraries: the packages whose errors are about the user's values.
        named_only: ``None`` too when the message names no option of ``cfg``."""
    from ncl.cli.input_checks import _leaves, _plain
    from ncl.errors import NclUserError

    chain, seen = [], err
    while seen is not None and seen not in chain:
        chain.append(seen)
        if isinstance(seen, NclUserError):
            return None
        seen = seen.__cause__ or seen.__context__
    inner = chain[-1]
    tb = inner.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = Path(tb.tb_frame.f_code.co_filename).parts if tb is not None else ()
    if not any(part in libraries for part in where):
        return None
    message = " ".join(str(inner).split("\n", 1)[0].split()) or type(inner).__name__
    named = [(key, value) for key, value in _leaves(cfg)
             if re.search(rf"\b{re.escape(key.rsplit('.', 1)[-1])}\b", message) and _plain_value(value)]
    # the option the message names first is the one it is about ("`val_check_interval` (1000)
    # must be less than ... set `limit_val_batches` to 0.0 instead")
    named.sort(key=lambda item: re.search(rf"\b{re.escape(item[0].rsplit('.', 1)[-1])}\b",
                                          message).start())
    if named_only and not named:
        return None
    option = f"{_plain(named[0][0])}={named[0][1]}: " if named else ""
    return f"{option}{message}"


def _plain_value(value: Any) -> bool:
    """Whether an option's value can be shown in one line: a number or string, or a list of
    them (``devices [0, 1]``), not a group of options or a list of classes."""
    if isinstance(value, list):
        return all(isinstance(item, (int, float, str)) for item in value)
    return not isinstance(value, dict)


def run_error(err: BaseException, cfg: Any) -> str | None:
    """One line for a ValueError Lightning raises when a run starts, about a trainer option
    it can only check against the data (``val_check_interval`` 1000 with 2 training batches);
    ``None`` for any other error, which keeps its traceback."""
    if not isinstance(err, ValueError) or cfg is None or cfg.get("trainer") is None:
        return None
    return building_error(err, {"trainer": cfg.get("trainer")}, libraries=("lightning",), named_only=True)


def warn_slow_precision(trainer: L.Trainer) -> None:
    """Rank 0: :func:`ncl.cli.input_checks.precision_note` for the trainer's precision and device."""
    native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    note = precision_note(getattr(trainer.precision_plugin, "precision", None),
                          trainer.strategy.root_device.type, native)
    if note and trainer.is_global_zero:
        warnings.warn(note, NclWarning, stacklevel=2)


def added_callbacks(trainer_config: dict[str, Any], callbacks: Sequence[Callback],
                    terminal: bool | None = None, subcommand: str | None = None) -> list[Callback]:
    """Callbacks ``ncl`` adds to a trainer that the config does not already have.

    * :class:`~ncl.callbacks.tracking.WandbRunContent` when a logger is an enabled
      :class:`~ncl.runs.loggers.NclWandbLogger` (run files, provenance, test table in W&B);
    * a progress bar, when it is enabled (``enable_progress_bar`` not false: Lightning refuses
      a progress-bar callback otherwise) and none is configured: on a terminal
      :class:`~ncl.callbacks.progress_bars.NclRichProgressBar` (Lightning's Rich bar without
      ``v_num``); otherwise (a log file, a batch job) :class:`~ncl.callbacks.progress_bars.LineProgressBar`,
      plain lines every few steps. Lightning itself would pick its Rich bar whenever rich is
      installed, which writes nothing to a log while an epoch runs;
    * :class:`~ncl.callbacks.figures.Figures` (PNG figures in ``<run>/figures`` while fitting,
      also sent to W&B), unless the config lists one (e.g. to set its options or disable it).
      Added for every subcommand: a checkpoint of ``fit`` holds its curves' state, which
      Lightning restores into a callback of the same kind also in ``validate``/``test``/
      ``predict`` and warns about when there is none; outside ``fit`` it draws nothing.
    * :class:`~ncl.callbacks.console.ConsoleInEveryProcess`: ncl's console settings (warning filters,
      one-line NclWarnings) also in the processes ``strategy: ddp_spawn`` starts.

    Args:
        trainer_config: the instantiated ``trainer`` section (``logger``, ``callbacks``,
            ``enable_progress_bar``).
        callbacks: the callbacks LightningCLI adds itself (e.g. ``SaveConfigCallback``).
        terminal: whether stdout is a terminal (default: ask ``sys.stdout``).
        subcommand: ``fit``, ``validate``, ``test``, ... (not used: kept for callers).
    """
    if terminal is None:
        terminal = sys.stdout.isatty()
    present = [*_as_list(trainer_config.get("callbacks") or []), *callbacks]
    loggers = _as_list(trainer_config.get("logger"))
    added: list[Callback] = []
    if (any(isinstance(lg, NclWandbLogger) and lg.enabled for lg in loggers)
            and not any(isinstance(cb, WandbRunContent) for cb in present)):
        added.append(WandbRunContent())
    if (trainer_config.get("enable_progress_bar") is not False
            and not any(isinstance(cb, ProgressBar) for cb in present)):
        added.append(NclRichProgressBar() if terminal else LineProgressBar())
    if not any(isinstance(cb, Figures) for cb in present):
        added.append(Figures())
    if not any(isinstance(cb, ConsoleInEveryProcess) for cb in present):
        added.append(ConsoleInEveryProcess())
    return added



def label_wandb_run(cfg: Any) -> None:
    """Fill an NclWandbLogger's ``display_name`` and ``tags`` from the config where the
    user left them unset (:func:`ncl.runs.loggers.run_labels`)."""
    for logger in _as_list(_get(cfg.trainer, "logger")):
        if _get(logger, "class_path") not in WANDB_LOGGERS or _get(logger, "init_args") is None:
            continue
        name, tags = run_labels(cfg)
        args = logger.init_args
        if _get(args, "display_name") is None:
            args.display_name = name
        if _get(args, "tags") is None:
            args.tags = tags

