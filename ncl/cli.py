"""The ``ncl`` command: a LightningCLI in subclass mode.

``ncl fit | validate | test | predict --config FILE [--config FILE ...] [--key value ...]``.
Methods (``model``) and DataModules (``data``) are chosen by ``class_path`` in YAML; the
resolved config is saved as ``config.yaml`` in every run directory. The vocabulary size is
read from the DataModule's vocabulary file and passed to the method, so a config never has
to repeat it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TextIO

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.io import CheckpointIO

from ncl.checkpoint_io import AtomicCheckpointIO
from ncl.errors import NclUserError
from ncl.methods.base import RetrievalMethod


class NclArgumentParser(LightningArgumentParser):
    """Argument parser whose errors are short: one usage line, the message, exit 2.

    jsonargparse prints the full option list on every error (40+ lines) which hides the
    message; ``ncl fit --help`` still shows everything.
    """

    def print_usage(self, file: TextIO | None = None) -> None:
        prog = self.prog.replace(" [options]", "")
        (file or sys.stderr).write(f"usage: {prog} [--config FILE ...] [--key value ...] "
                                   "(--help for all options)\n")


class NclCLI(LightningCLI):
    """LightningCLI with ncl's argument links and atomic checkpoint writes."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("data.vocab_size", "model.init_args.vocab_size", apply_on="instantiate")

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Callback]) -> L.Trainer:
        """Add :class:`AtomicCheckpointIO` unless the config brings its own CheckpointIO."""
        plugins = config.get("plugins")
        plugins = [] if plugins is None else list(plugins) if isinstance(plugins, list) else [plugins]
        if not any(isinstance(p, CheckpointIO) for p in plugins):
            plugins.append(AtomicCheckpointIO())
        config["plugins"] = plugins
        return super()._instantiate_trainer(config, callbacks)


def _root_cause(err: BaseException) -> BaseException:
    """The innermost NclUserError in an exception chain (jsonargparse may wrap it)."""
    seen = err
    while seen is not None:
        if isinstance(seen, NclUserError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return err


def main(args: Sequence[str] | None = None) -> None:
    """Console entry point. User errors end with one message and exit status 2."""
    try:
        NclCLI(RetrievalMethod, L.LightningDataModule, subclass_mode_model=True,
               subclass_mode_data=True, args=list(args) if args is not None else None,
               save_config_kwargs={"overwrite": True}, auto_configure_optimizers=False,
               parser_class=NclArgumentParser)
    except Exception as err:  # noqa: BLE001 - only user errors are reported briefly
        cause = _root_cause(err)
        if isinstance(cause, NclUserError):
            print(f"ncl: error: {cause}", file=sys.stderr)
            raise SystemExit(2) from None
        raise


if __name__ == "__main__":
    main()
