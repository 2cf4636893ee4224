"""The ``ncl`` application: a LightningCLI in subclass mode, its argument parser and checks.

:mod:`ncl.cli` is the console entry point that runs it.

``ncl fit | validate | test | predict --config FILE [--config FILE ...] [--key value ...]``;
``ncl predict ... --out FILE`` ranks a split's pairs by how likely they are mismatched: its own
options are those of :class:`~ncl.callbacks.prediction_writer.RankedPairsWriter`, added to the
``predict`` parser (:mod:`ncl.predict`).
Methods (``model``) and DataModules (``data``) are chosen by ``class_path`` in YAML; the
resolved config is saved as ``config.yaml`` in every run directory. The vocabulary size is
read from the DataModule's vocabulary file and passed to the method, so a config never has
to repeat it.
"""

from __future__ import annotations

import errno
import importlib
import inspect
import os
import pkgutil
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import lightning as L
from lightning.pytorch.callbacks import (Callback, LearningRateMonitor, ModelCheckpoint, ProgressBar,
                                         RichProgressBar)
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.io import CheckpointIO

from ncl.callbacks.figures import Figures
from ncl.callbacks.prediction_writer import RankedPairsWriter, check_scorer
from ncl.callbacks.tracking import WandbRunContent
from ncl.checkpoint_io import AtomicCheckpointIO
from ncl.compose import TRAINER_DEFAULTS, expand_configs
from ncl.errors import ConfigError, NclWarning
from ncl.loggers import NclWandbLogger, run_labels
from ncl.methods.base import RetrievalMethod
from ncl.runs import (
    CHECKPOINTS,
    default_logger,
    first_logger,
    point_logger_at,
    read_checkpoint,
    resolve_checkpoint,
    run_dir_of,
    WANDB_LOGGERS,
    set_logger,
)


class NclArgumentParser(LightningArgumentParser):
    """Argument parser whose errors are short: one usage line, the message, exit 2.

    jsonargparse prints the full option list on every error (40+ lines) which hides the
    message; ``ncl fit --help`` still shows everything.
    """

    def print_usage(self, file: TextIO | None = None) -> None:
        prog = self.prog.replace(" [options]", "")
        (file or sys.stderr).write(f"usage: {prog} [--config FILE ...] [--key value ...] "
                                   "(--help for all options)\n")

    def format_help(self) -> str:
        """argparse's help, with the epilog (ncl's catalogue of methods) kept as written
        instead of re-wrapped into one paragraph."""
        epilog, self.epilog = self.epilog, None
        try:
            text = super().format_help()
        finally:
            self.epilog = epilog
        return text + (f"\n{epilog}\n" if epilog else "")

    def add_method_arguments(self, theclass: Any, themethod: str, *args: Any, **kwargs: Any) -> Any:
        """Lightning's method arguments; ``--verbose`` of ``validate``/``test`` defaults to
        false: ncl prints its own results (a line per validation, the paper-style table),
        and Lightning's table repeats them per DataLoader with float32 digits.

        ``predict`` also gets :class:`RankedPairsWriter`'s options at the top level (``--out``,
        ``--split``, ``--batch_size``, ``--margin``, ``--ranking``, documented from its docstring); the
        application builds the writer from them (:func:`prediction_writer`). Its predictions
        are not returned (``return_predictions`` false): the writer keeps what it needs.
        """
        added = super().add_method_arguments(theclass, themethod, *args, **kwargs)
        if themethod in ("validate", "test") and "verbose" in added:
            self.set_defaults(verbose=False)
        if themethod == "predict":
            self.add_class_arguments(RankedPairsWriter, None, instantiate=False, fail_untyped=False)
            if "return_predictions" in added:
                self.set_defaults(return_predictions=False)
        return added  # the Trainer.predict arguments only: the writer's are not passed to it

    def parse_args(self, *args: Any, **kwargs: Any) -> Any:
        """Parse, then check ``ncl predict``'s options and that the subcommand's output folders
        can be written (before any class is instantiated, so nothing is trained or loaded
        whose results could not be saved)."""
        cfg = super().parse_args(*args, **kwargs)
        subcommand = cfg.get("subcommand") if hasattr(cfg, "get") else None
        if subcommand == "predict" and cfg.get(subcommand) is not None:
            check_prediction_options(cfg[subcommand])
        if subcommand and cfg.get(subcommand) is not None:
            check_output_folders(cfg[subcommand])
        return cfg


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

    def _parse_ckpt_path(self) -> None:
        """Resolve ``--ckpt_path`` (``last``, ``best``, a file; :mod:`ncl.runs`) and check
        that it can be read, before Lightning reads the hyperparameters stored in it."""
        self._resume: tuple[Path, int] | None = None
        subcommand = self.config.get("subcommand")
        cfg = self.config[subcommand] if subcommand else None
        if cfg is not None and "ckpt_path" in cfg:
            path = resolve_checkpoint(cfg.ckpt_path, cfg.trainer, subcommand,
                                      bool(cfg.get("fresh_if_missing")))
            cfg.ckpt_path = None if path is None else str(path)
            if path is not None:
                epoch = int(read_checkpoint(path).get("epoch", 0))
                self._resume = (path, epoch) if subcommand == "fit" else None
        if cfg is not None and subcommand in ("test", "validate"):
            check_trained_weights(cfg, subcommand)
        before = _flat(cfg.get("model")) if cfg is not None else {}
        own_extra = set(_extra_kwargs(cfg))
        super()._parse_ckpt_path()
        if cfg is not None and cfg.get("ckpt_path"):
            drop_removed_options(self.config[subcommand], own_extra, cfg.ckpt_path)
            warn_replaced_model_options(before, _flat(self.config[subcommand].get("model")),
                                        cfg.ckpt_path)

    def before_instantiate_classes(self) -> None:
        """Build ``ncl predict``'s writer, make the default logger explicit and, when
        resuming, point the loggers back at the checkpoint's run folder (:mod:`ncl.runs`)."""
        self._run_dir: Path | None = None
        self._writer: RankedPairsWriter | None = None
        if self.subcommand == "predict":
            self._writer = prediction_writer(self.config["predict"])
            # It writes its table and nothing else: a config.yaml would overwrite the one an
            # `ncl test` of the same config left in the same folder.
            self.save_config_callback = None
        trainer_cfg = (self.config[self.subcommand] if self.subcommand else self.config).trainer
        if first_logger(trainer_cfg) in (None, True):
            set_logger(trainer_cfg, default_logger(trainer_cfg))
        label_wandb_run(self.config[self.subcommand] if self.subcommand else self.config)
        if self.subcommand in ("validate", "test", "predict"):
            # Evaluating a checkpoint never writes checkpoints; its saved folder is irrelevant.
            warnings.filterwarnings("ignore", message=r"The dirpath has changed from")
        if getattr(self, "_resume", None) is not None:
            path, epoch = self._resume
            self._run_dir = run_dir_of(path)
            point_logger_at(trainer_cfg, self._run_dir, epoch)
            # Expected when resuming into the run's own folder; not worth a warning.
            warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")

    def before_predict(self) -> None:
        """``ncl predict``: one clear error for a model that cannot rank pairs (a training
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
        run_dir = getattr(self, "_run_dir", None) or Path(trainer.log_dir or trainer.default_root_dir)
        for callback in trainer.checkpoint_callbacks:
            # The same folder on resume is what lets ModelCheckpoint restore its best score
            # and path (it ignores its saved state when the folder differs).
            if isinstance(callback, ModelCheckpoint) and callback.dirpath is None:
                callback.dirpath = str(run_dir.resolve() / CHECKPOINTS)
        return trainer


def added_callbacks(trainer_config: dict[str, Any], callbacks: Sequence[Callback],
                    terminal: bool | None = None, subcommand: str | None = None) -> list[Callback]:
    """Callbacks ``ncl`` adds to a trainer that the config does not already have.

    * :class:`~ncl.callbacks.tracking.WandbRunContent` when a logger is an enabled
      :class:`~ncl.loggers.NclWandbLogger` (run files, provenance, test table in W&B);
    * Lightning's :class:`RichProgressBar` instead of the default tqdm bar when stdout is a
      terminal, the progress bar is enabled (``enable_progress_bar`` not false: Lightning
      refuses a progress-bar callback otherwise) and no progress bar is configured. When
      stdout is not a terminal (a log file, a batch job) Rich draws nothing until a bar is
      finished (for training: the end of fit), so a log would show no progress at all;
      Lightning's tqdm bar is kept there;
    * :class:`~ncl.callbacks.figures.Figures` for ``fit`` (PNG figures in ``<run>/figures``,
      also sent to W&B), unless the config lists one (e.g. to set its options or disable it).

    Args:
        trainer_config: the instantiated ``trainer`` section (``logger``, ``callbacks``,
            ``enable_progress_bar``).
        callbacks: the callbacks LightningCLI adds itself (e.g. ``SaveConfigCallback``).
        terminal: whether stdout is a terminal (default: ask ``sys.stdout``).
        subcommand: ``fit``, ``validate``, ``test``, ... (figures are drawn while fitting).
    """
    if terminal is None:
        terminal = sys.stdout.isatty()
    present = [*_as_list(trainer_config.get("callbacks") or []), *callbacks]
    loggers = _as_list(trainer_config.get("logger"))
    added: list[Callback] = []
    if (any(isinstance(lg, NclWandbLogger) and lg.enabled for lg in loggers)
            and not any(isinstance(cb, WandbRunContent) for cb in present)):
        added.append(WandbRunContent())
    if (terminal and trainer_config.get("enable_progress_bar") is not False
            and not any(isinstance(cb, ProgressBar) for cb in present)):
        added.append(RichProgressBar())
    if subcommand == "fit" and not any(isinstance(cb, Figures) for cb in present):
        added.append(Figures())
    return added


def _flat(node: Any, prefix: str = "model") -> dict[str, Any]:
    """A config node as ``{"model.init_args.x": value}`` (Namespaces and dicts alike)."""
    if node is None:
        return {}
    items = node.items() if isinstance(node, dict) else vars(node).items()
    out: dict[str, Any] = {}
    for key, value in items:
        if isinstance(value, dict) or type(value).__name__ == "Namespace":
            out.update(_flat(value, f"{prefix}.{key}"))
        else:
            out[f"{prefix}.{key}"] = value
    return out


def _extra_kwargs(cfg: Any) -> dict[str, Any]:
    """The model's ``dict_kwargs``: options jsonargparse could not map to a parameter."""
    model = cfg.get("model") if cfg is not None else None
    extra = model.get("dict_kwargs") if model is not None and hasattr(model, "get") else None
    return extra if isinstance(extra, dict) else {}


def check_trained_weights(cfg: Any, subcommand: str) -> None:
    """``ncl test``/``validate`` score trained weights: a ``--ckpt_path``, or a model that
    names its checkpoints (``model.checkpoints``: the ``eval_*`` configs); otherwise one
    ConfigError, unless ``--allow_untrained`` (the initial weights, to check the evaluation).
    Without this a forgotten ``--ckpt_path`` wrote an untrained model's scores as a result."""
    if cfg.get("ckpt_path") or cfg.get("allow_untrained"):
        return
    model = cfg.get("model")
    init_args = model.get("init_args") if model is not None and hasattr(model, "get") else None
    if init_args is not None and hasattr(init_args, "get") and init_args.get("checkpoints"):
        return
    raise ConfigError(f"ncl {subcommand}: no --ckpt_path, so this would score the model's untrained "
                      f"initial weights; pass --ckpt_path best (this config's newest run), last or a "
                      f"checkpoint file (or --allow_untrained true to check the evaluation itself)")


def drop_removed_options(cfg: Any, own: set[str], ckpt_path: str) -> None:
    """Drop, with one warning, the options a checkpoint stores that the method no longer has.

    LightningCLI passes a checkpoint's stored hyperparameters as keyword arguments; one that an
    older ncl had and this one removed (NCR's ``loss_figure``, issue 23) would end in a
    traceback when the method is built. The method's behaviour never depended on them.
    """
    extra = _extra_kwargs(cfg)
    removed = sorted(key for key in extra if key not in own)
    for key in removed:
        del extra[key]
    if removed:
        warnings.warn(f"{ckpt_path}: the checkpoint stores model options this version of ncl no "
                      f"longer has, ignored: {', '.join(removed)}", NclWarning, stacklevel=2)


def warn_replaced_model_options(before: dict[str, Any], after: dict[str, Any],
                                ckpt_path: str) -> None:
    """One warning naming every model option whose value the checkpoint replaced.

    LightningCLI re-applies the hyperparameters stored in ``--ckpt_path`` over the config
    and the command line (so a resumed run keeps the model it was started with); an option
    the user set to another value is therefore silently ignored without this.
    """
    # An unset (None) value is not the user's choice: vocab_size, for one, is linked from
    # the data only after parsing, and the checkpoint fills it in.
    changed = [f"{key} {before[key]!r} -> {after[key]!r}" for key in sorted(before)
               if before[key] is not None and key in after and before[key] != after[key]]
    if changed:
        warnings.warn(f"{ckpt_path}: the model options stored in the checkpoint replace the "
                      f"config's: {'; '.join(changed)}", NclWarning, stacklevel=2)


def label_wandb_run(cfg: Any) -> None:
    """Fill an NclWandbLogger's ``display_name`` and ``tags`` from the config where the
    user left them unset (:func:`ncl.loggers.run_labels`)."""
    for logger in _as_list(_get(cfg.trainer, "logger")):
        if _get(logger, "class_path") not in WANDB_LOGGERS or _get(logger, "init_args") is None:
            continue
        name, tags = run_labels(cfg)
        args = logger.init_args
        if _get(args, "display_name") is None:
            args.display_name = name
        if _get(args, "tags") is None:
            args.tags = tags


# --------------------------------------------------------------------- helpers of main()
UNAVAILABLE: dict[str, str] = {}  # reserved subcommands: name -> why it is refused
# Output folders checked by the parser, for main()'s fallback on OSError (see _output_error).
_OUTPUT_ROOTS: list[Path] = []
# errno values meaning "this output location cannot be written", as opposed to a bug.
_WRITE_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT,
                 errno.ENOTDIR, errno.EEXIST, errno.EISDIR}


def _subcommand_of(args: Sequence[str]) -> str | None:
    """The subcommand named on a command line (the first word that is not an option)."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-c", "--config"):
            skip = True  # the root parser's only option with a separate value
        elif not arg.startswith("-"):
            return arg
    return None


def _get(node: Any, key: str) -> Any:
    """``node[key]`` for dicts and jsonargparse Namespaces (``None`` when absent)."""
    if isinstance(node, dict):
        return node.get(key)
    return getattr(node, key, None) if node is not None else None


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def output_folders(sub_cfg: Any) -> list[tuple[str, str]]:
    """``(option, folder)`` pairs a run writes under: the trainer's ``default_root_dir``,
    each logger's ``save_dir`` and each callback's ``dirpath`` (local paths only)."""
    trainer = _get(sub_cfg, "trainer")
    found = [("trainer.default_root_dir", _get(trainer, "default_root_dir") or ".")]
    for kind, key in (("logger", "save_dir"), ("callbacks", "dirpath")):
        for item in _as_list(_get(trainer, kind)):
            value = _get(_get(item, "init_args"), key)
            if isinstance(value, (str, Path)) and value:
                found.append((f"trainer.{kind}.init_args.{key}", str(value)))
    return [(option, str(folder)) for option, folder in found if "://" not in str(folder)]


def _unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot be created and written, or ``None`` when it can.

    Creates nothing that stays: the test is a temporary folder in the nearest existing
    ancestor, removed at once (``os.access`` would be wrong for root and for file systems
    such as ``/proc``).
    """
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".ncl-write-test-", dir=existing))
    except OSError as err:
        return f"cannot create a folder in {existing} ({err.strerror or err})"
    return None


def check_output_folders(sub_cfg: Any) -> None:
    """Raise :class:`ConfigError` naming the first output folder that cannot be written."""
    for option, folder in output_folders(sub_cfg):
        path = Path(folder).expanduser().absolute()
        _OUTPUT_ROOTS.append(path)
        reason = _unwritable(path)
        if reason is not None:
            raise ConfigError(f"output folder {option}={folder} cannot be created or written: "
                              f"{reason}")


def prediction_writer(sub_cfg: Any) -> RankedPairsWriter:
    """``ncl predict``'s writer, from its options (``--out`` ...) in the ``predict`` config."""
    return RankedPairsWriter(**{key: _get(sub_cfg, key) for key in RankedPairsWriter.OPTIONS})


def check_prediction_options(sub_cfg: Any) -> None:
    """Raise ConfigError when ``ncl predict``'s options are wrong or ``--out``'s folder cannot
    be written; run by the parser, before anything is seeded, built or loaded."""
    out = prediction_writer(sub_cfg).out  # the writer checks its own options
    folder = out.parent.absolute()
    reason = _unwritable(folder)
    if reason is not None:
        raise ConfigError(f"--out {out} cannot be written: {reason}")
    _OUTPUT_ROOTS.append(folder)  # a write that fails later (disk full) is one line too


def _output_error(err: BaseException) -> OSError | None:
    """An OSError in ``err``'s chain about writing under a checked output folder."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _WRITE_ERRNOS and seen.filename:
            target = Path(os.fsdecode(seen.filename)).absolute()
            if any(target == root or root in target.parents for root in _OUTPUT_ROOTS):
                return seen
        seen = seen.__cause__ or seen.__context__
    return None


def catalogue() -> str:
    """The methods (``--model``) and DataModules (``--data``) ncl ships, for ``--help``.

    Importing every module of :mod:`ncl.methods` also makes jsonargparse list them as known
    subclasses and accept their short names (``--model RCL``).
    """
    import ncl.data.datamodule as datamodules
    import ncl.methods as methods

    for info in pkgutil.iter_modules(methods.__path__, prefix="ncl.methods."):
        importlib.import_module(info.name)

    def entries(classes: Any) -> list[str]:
        lines = []
        for cls in sorted(classes, key=lambda c: (c.__module__, c.__name__)):
            doc = (inspect.getdoc(cls) or "").strip().splitlines()
            lines.append(f"  {cls.__module__}.{cls.__name__}" + (f"\n      {doc[0]}" if doc else ""))
        return lines

    def subclasses(base: type) -> set[type]:
        found: set[type] = set()
        for sub in base.__subclasses__():
            found |= {sub} | subclasses(sub)
        return found

    method_classes = [c for c in subclasses(RetrievalMethod)
                      if c.__module__.startswith("ncl.methods.") and not c.__name__.startswith("_")]
    data_classes = [c for c in vars(datamodules).values() if isinstance(c, type)
                    and issubclass(c, L.LightningDataModule) and c.__module__ == datamodules.__name__]
    return "\n".join(["methods (--model: class_path, or the class name alone):",
                      *entries(method_classes), "", "DataModules (--data):", *entries(data_classes),
                      "", "The configs in configs/ combine them; see README.md."])
