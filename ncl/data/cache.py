"""Where generated datasets and other caches live: ``$XDG_CACHE_HOME/ncl`` (default
``~/.cache/ncl``), one folder per generated dataset, named by its preset and the hash of its
spec, so that a dataset is generated once per distinct spec and reused."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/ncl``, or ``~/.cache/ncl`` when the variable is unset or empty."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ncl"


def spec_folder(cache_dir: str | Path | None, name: str, spec: Any) -> Path:
    """``<cache_dir>/<name>-<first 10 hex digits of the SHA-256 of the spec's fields as sorted
    JSON>`` (``cache_dir`` None: :func:`default_cache_dir`); ``spec`` a dataclass instance."""
    digest = hashlib.sha256(json.dumps(asdict(spec), sort_keys=True).encode()).hexdigest()[:10]
    return Path(default_cache_dir() if cache_dir is None else cache_dir) / f"{name}-{digest}"
