"""Weights & Biases logging that works on machines without credentials or network."""

from __future__ import annotations

import netrc
import os
import time
from pathlib import Path
from typing import Literal

from lightning.pytorch.loggers import WandbLogger


def wandb_credentials_available() -> bool:
    """True if an API key is set in the environment or stored in ``~/.netrc``."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        auth = netrc.netrc(str(Path.home() / ".netrc"))
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False
    return any(auth.authenticators(h) for h in ("api.wandb.ai", "wandb.ai"))


class NclWandbLogger(WandbLogger):
    """``WandbLogger`` that runs offline automatically when there are no credentials.

    Args:
        project: W&B project.
        name: run name (default: W&B's).
        save_dir: parent of the run directories: each run writes its config, noise indices,
            checkpoints, results and ``wandb/`` into ``<save_dir>/<project>/<time>-<name>``.
        mode: ``auto`` (online with credentials, else offline), ``online``, ``offline`` or
            ``disabled``. ``WANDB_MODE`` in the environment wins, as in wandb itself.
        log_model: upload checkpoints as artifacts (online only).
        tags: run tags.
    """

    def __init__(self, project: str = "ncl", name: str | None = None, save_dir: str = "runs",
                 mode: Literal["auto", "online", "offline", "disabled"] = "auto",
                 log_model: bool = False, tags: list[str] | None = None) -> None:
        env_mode = os.environ.get("WANDB_MODE")
        if env_mode:
            mode = env_mode  # type: ignore[assignment]
        elif mode == "auto":
            mode = "online" if wandb_credentials_available() else "offline"
        stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        run_dir = Path(save_dir) / project / (f"{stamp}-{name}" if name else stamp)
        run_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(project=project, name=name, save_dir=str(run_dir), log_model=log_model,
                         offline=mode == "offline", mode=mode, tags=tags)
