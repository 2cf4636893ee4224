"""What the ``ncl`` command shows on the console: warning filters and ncl's own warnings.

Lightning and its dependencies print warnings meant for people writing Lightning code; a few
of them carry nothing an ncl user can act on and hide the lines that matter. The filters
below remove exactly those, each with the reason it is safe. Lightning's other warnings stay
(too few batches for ``log_every_n_steps``, a non-empty checkpoint folder, SLURM hints,
few DataLoader workers in training, ...), each as one ``ncl: warning:`` line
(:data:`SETTINGS_WARNING_SOURCES`). An explicit ``PYTHONWARNINGS`` or ``-W`` wins:
Python puts those filters in place first, and :func:`configure_console` then leaves the
warning settings alone.

:class:`ncl.errors.NclWarning` (e.g. empty captions) is printed as one line,
``ncl: warning: <message>``, instead of Python's two-line ``file:line: category`` format.

Every process of a run needs these settings. ``ncl fit --trainer.devices N`` (Lightning's
``ddp`` launcher) starts the other ranks by running the same ``ncl`` command, which calls
:func:`configure_console` again; ``strategy: ddp_spawn`` starts fresh interpreters that receive
the trainer by pickling and never run ``ncl.cli``: :class:`ncl.callbacks.console.ConsoleInEveryProcess`, a callback
``ncl`` adds to every trainer, configures their console when it is unpickled there (before the
DataModule or any hook runs).
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path
from typing import Any, TextIO

from ncl.errors import NclWarning

# (message regex, category, why an ncl user gains nothing from it)
WARNING_FILTERS: tuple[tuple[str, type[Warning], str], ...] = (
    (r"Starting from v1\.9\.0, `tensorboardX` has been removed", UserWarning,
     "ncl's configs choose their logger; without one the CSV logger Lightning falls back to "
     "is what ncl wants, and installing TensorBoard is not needed"),
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning,
     "a deprecation inside Lightning's use of torch.utils._pytree; nothing in ncl or in a "
     "config can change it"),
    (r"The '(val|test|predict)_dataloader' does not have many workers", Warning,
     "evaluation uses the same data.num_workers as training, so the warning for the "
     "training loader (kept) already says it; evaluation is one short pass"),
    (r"It is recommended to use `self\.log\('(val|val_\w+|test|train|division)/", Warning,
     "ncl logs these keys with sync_dist=False on purpose: evaluation metrics are computed "
     "from embeddings gathered from every rank (identical everywhere), and per-step "
     "training values would cost a collective per step"),
    (r"Using `DistributedSampler` with the dataloaders\. During `trainer\.(validate|test)\(\)`",
     Warning,
     "ncl scatters evaluation embeddings by dataset index, so the sampler's repeated "
     "samples cannot change a number (docs/design.md)"),
    (r"torch\.distributed\.nn\.functional\.all_gather is deprecated", FutureWarning,
     "raised inside Lightning's public LightningModule.all_gather (torch 2.13 deprecated the "
     "function Lightning calls), once per rank; ncl's own collectives "
     "(ncl.training.distributed) use torch.distributed.all_gather, and a method or callback "
     "that calls Lightning's all_gather cannot choose another implementation"),
)

# Lightning INFO log lines (logger "lightning.*"), same format: (regex, why).
LOG_FILTERS: tuple[tuple[str, str], ...] = (
    (r"Tip: For seamless cloud (logging|uploads)",
     "advertisements for Lightning's hosted services (LitLogger, LitModelCheckpoint)"),
)


class _DropMatching(logging.Filter):
    """Drop log records whose message matches one of ``LOG_FILTERS``."""

    def __init__(self) -> None:
        super().__init__()
        import re

        self.patterns = [re.compile(p) for p, _ in LOG_FILTERS]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(p.search(message) for p in self.patterns)


#: Where, in an installed package, the warnings about the user's settings come from:
#: Lightning (``Trainer(log_every_n_steps=10)`` more than an epoch's batches) and torch's
#: DataLoader (more workers than CPUs). They are shown as one ``ncl: warning:`` line.
SETTINGS_WARNING_SOURCES: tuple[tuple[str, ...], ...] = (
    ("lightning",), ("lightning_fabric",), ("pytorch_lightning",), ("torch", "utils", "data"))


def _about_settings(filename: str) -> bool:
    """Whether a warning was raised in one of :data:`SETTINGS_WARNING_SOURCES`."""
    parts = Path(filename).parts
    for i, part in enumerate(parts[:-1]):
        if part in ("site-packages", "dist-packages"):
            return any(parts[i + 1:i + 1 + len(src)] == src for src in SETTINGS_WARNING_SOURCES)
    return False


def _show_ncl_warnings_on_one_line(original: Any) -> Any:
    """Wrap ``warnings.showwarning``: NclWarning, and a warning Lightning or torch's DataLoader
    raise about the user's settings (:data:`SETTINGS_WARNING_SOURCES`), as one ``ncl: warning:``
    line (Python's format starts with a file path inside the library, which says nothing to a
    user, and repeats the ``warn(...)`` source line on a second line); others as before."""

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        if isinstance(category, type) and issubclass(category, NclWarning):
            (file or sys.stderr).write(f"ncl: warning: {message}\n")
            return
        if _about_settings(filename):
            (file or sys.stderr).write(f"ncl: warning: {' '.join(str(message).split())}\n")
            return
        original(message, category, filename, lineno, file, line)

    show._ncl_console = True  # type: ignore[attr-defined]
    return show


def configure_console() -> None:
    """Install the filters above and the one-line NclWarning format (idempotent)."""
    if not getattr(warnings.showwarning, "_ncl_console", False):
        warnings.showwarning = _show_ncl_warnings_on_one_line(warnings.showwarning)
    if not sys.warnoptions:  # the user's own -W / PYTHONWARNINGS choice wins
        for pattern, category, _ in WARNING_FILTERS:
            warnings.filterwarnings("ignore", message=pattern, category=category)
        warnings.filterwarnings("default", category=NclWarning)
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero",
                 "lightning_utilities.core.rank_zero", "lightning.pytorch"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropMatching) for f in logger.filters):
            logger.addFilter(_DropMatching())

