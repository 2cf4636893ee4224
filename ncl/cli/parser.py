"""``ncl``'s argument parser and the checks it runs right after parsing, before anything is
instantiated: short errors (one usage line or one ``ncl: error:`` line), output folders that
can be written, ``ncl predict``'s options, and the catalogue of methods in ``--help``.

:class:`ncl.cli.app.NclCLI` uses the parser; :mod:`ncl.cli` re-exports the names tests import.
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
from lightning.pytorch.cli import LightningArgumentParser

from ncl.callbacks.prediction_writer import RankedPairsWriter
from ncl.cli.input_checks import (
    check_numbers,
    check_optimizer,
    check_trainer_values,
    check_trains_something,
    shipped,
    short_usage,
    unknown_key_line,
    unknown_option_line,
    value_error_line,
)
from ncl.errors import ConfigError, NclWarning
from ncl.evaluation.ranked_output import check_options
from ncl.methods.base import RetrievalMethod


class NclArgumentParser(LightningArgumentParser):
    """Argument parser whose errors are short: one usage line, the message, exit 2; a mistyped
    option is one ``ncl: error:`` line naming the closest valid one.

    jsonargparse prints the full option list on every error (40+ lines) which hides the
    message; ``ncl fit --help`` still shows everything.
    """

    def error(self, message: str, ex: Exception | None = None) -> Any:
        """One ConfigError line instead of jsonargparse's usage, tip and dump of the union
        types it tried: an unknown option (``unknown option --model.tauu: RCL has no option
        'tauu'; did you mean --model.tau?``), an unknown key in a config file, a value of the
        wrong type or not among the choices (the option, the value, what is allowed), or any
        other parse error on one line.

        Only a parser that exits on errors (``exit_on_error``: the command's own) rewrites:
        jsonargparse's inner parsers raise instead, and it catches those to try alternatives.
        """
        if self.exit_on_error:
            parser = getattr(ex, "subcommand_parser", None) or self
            line = (unknown_option_line(message, getattr(self, "args", None) or [], parser)
                    or unknown_key_line(message, parser) or value_error_line(message))
            if line is None:  # any other parse error: still one line, not usage + tip + dump
                line = " ".join(message.split())
            raise ConfigError(line) from None
        return super().error(message, ex)

    def print_usage(self, file: TextIO | None = None) -> None:
        prog = self.prog.replace(" [options]", "")
        (file or sys.stderr).write(f"usage: {prog} [--config FILE ...] [--key value ...] "
                                   "(--help for all options)\n")

    def format_help(self) -> str:
        """argparse's help, with the epilog (ncl's catalogue of methods) kept as written
        instead of re-wrapped into one paragraph, and a one-line usage (argparse's synopsis
        lists every option that the help lists again: :func:`~ncl.cli.input_checks.short_usage`)."""
        epilog, self.epilog = self.epilog, None
        usage = self.usage
        if usage is None and getattr(self, "_subcommands_action", None) is None:  # root's is short
            self.usage = short_usage(self.prog, self.description)
        try:
            text = super().format_help()
        finally:
            self.epilog, self.usage = epilog, usage
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
        """Parse, then check that ``ncl fit`` trains something (``max_epochs``/``max_steps`` not
        0), ``ncl predict``'s options and that the subcommand's output folders can be written
        (before any class is instantiated, so nothing is trained or loaded whose results could
        not be saved)."""
        cfg = super().parse_args(*args, **kwargs)
        subcommand = cfg.get("subcommand") if hasattr(cfg, "get") else None
        check_trains_something(cfg.get(subcommand) if subcommand else None, subcommand)
        if subcommand and cfg.get(subcommand) is not None:
            check_trainer_values(cfg[subcommand])
        if subcommand and cfg.get(subcommand) is not None:
            for note in check_numbers(cfg[subcommand]):
                warnings.warn(note, NclWarning, stacklevel=2)
            check_optimizer(cfg[subcommand])
        if subcommand == "predict" and cfg.get(subcommand) is not None:
            check_prediction_options(cfg[subcommand])
        if subcommand and cfg.get(subcommand) is not None:
            check_output_folders(cfg[subcommand])
        return cfg



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
    be written; run by the parser, before anything is seeded, built or loaded.

    Without ``--out`` the table goes into the checkpoint's run folder
    (:func:`ncl.runs.folders.predictions_path`), known once ``--ckpt_path`` is resolved: the
    application sets ``out`` then and calls this again. A training method without
    ``--ckpt_path`` is left to :func:`ncl.cli.checkpoint_options.check_trained_weights`."""
    if _get(sub_cfg, "out") is None and (_get(sub_cfg, "ckpt_path") or not _has_checkpoints(sub_cfg)):
        check_options(None, _get(sub_cfg, "split"), _get(sub_cfg, "batch_size"), out_later=True)
        return
    out = prediction_writer(sub_cfg).out  # the writer checks its own options
    folder = out.parent.absolute()
    reason = _unwritable(folder)
    if reason is not None:
        raise ConfigError(f"--out {out} cannot be written: {reason}")
    _OUTPUT_ROOTS.append(folder)  # a write that fails later (disk full) is one line too


def _has_checkpoints(sub_cfg: Any) -> bool:
    """Whether the model names its checkpoints (``model.checkpoints``: the ``eval_*`` configs)."""
    return bool(_get(_get(_get(sub_cfg, "model"), "init_args"), "checkpoints"))


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


def _import_all(package: Any) -> None:
    """Import every module of ``package``, so that the classes they define are known (to
    :func:`catalogue`, and to jsonargparse as subclasses it accepts by their short names)."""
    for info in pkgutil.iter_modules(package.__path__, prefix=f"{package.__name__}."):
        importlib.import_module(info.name)


def catalogue() -> str:
    """The methods (``--model``) and DataModules (``--data``) ncl ships, for ``--help``: every
    public subclass of :class:`~ncl.methods.base.RetrievalMethod` in :mod:`ncl.methods` and of
    ``LightningDataModule`` in :mod:`ncl.data` (the video ones of :mod:`ncl.data.video` too).

    Importing every module of both packages also makes jsonargparse list them as known
    subclasses and accept their short names (``--model RCL``).
    """
    import ncl.data as data
    import ncl.methods as methods

    _import_all(methods)
    _import_all(data)

    def entries(classes: list[type]) -> list[str]:
        lines = []
        for cls in classes:
            doc = (inspect.getdoc(cls) or "").strip().splitlines()
            lines.append(f"  {cls.__module__}.{cls.__name__}" + (f"\n      {doc[0]}" if doc else ""))
        return lines

    return "\n".join(["methods (--model: class_path, or the class name alone):",
                      *entries(shipped(RetrievalMethod, methods.__name__)), "",
                      "DataModules (--data):", *entries(shipped(L.LightningDataModule, data.__name__)),
                      "", "The configs in configs/ combine them; see README.md."])

