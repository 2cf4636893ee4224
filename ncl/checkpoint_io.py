"""Checkpoints that are never half-written.

Lightning's default ``TorchCheckpointIO`` serialises into memory and then writes the target
file in place: a run killed during that write (pre-emption, out of disk, Ctrl-C) leaves a
truncated ``last.ckpt`` where the previous good one used to be. :class:`AtomicCheckpointIO`
writes to a hidden temporary file beside the target and renames it over the target, so the
path always holds either the previous complete checkpoint or the new complete one.

The ``ncl`` command installs it on every Trainer that does not bring its own CheckpointIO
(see :class:`ncl.app.NclCLI`); Python users pass ``Trainer(plugins=[AtomicCheckpointIO()])``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ncl.io import atomic_write


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` with write-to-temporary-then-rename for local paths.

    Remote paths (``s3://`` and other fsspec protocols) fall back to Lightning's own writer,
    since a rename is not atomic there anyway.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path,
                        storage_options: Any | None = None) -> None:
        if storage_options is not None or not _is_local_file_protocol(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        atomic_write(Path(path), lambda handle: torch.save(checkpoint, handle))
