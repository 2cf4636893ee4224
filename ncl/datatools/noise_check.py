"""The noise-file part of ``ncl data check`` (issue 27): are the noise-index files a run would
read present, valid for the training split, and which published pairing is each.

Two sources of files:

* ``--config FILE`` (any number): the file each config would read, resolved exactly as the
  DataModule resolves it (:func:`ncl.data.noise.resolve_noise_file`: ``{noise_ratio}``
  filled in, a bare name looked up in the dataset folder). A config for another dataset is
  skipped with a warning; one that reads no file (noise drawn from a seed) needs nothing.
* the dataset folder itself: every file named as a published noise file is (``noise_inx_*.npy``
  as RCL, ``<dataset>_*.npy`` as NCR and L2RM), so that a stray or truncated download is found
  before a config points at it.

A missing or invalid file is a *problem* (the run would stop); every valid one gets a line
naming its format, noise rate and registry name (``rcl/f30k/0.2 = l2rm/f30k/0.2``, ``clean``
or ``new``). Pure: nothing is printed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncl.compose import merged
from ncl.data.noise import resolve_noise_file
from ncl.data.noise_registry import identify
from ncl.errors import ConfigError, DataError

#: Published noise-file names in a dataset folder: RCL's, then NCR's and L2RM's.
NOISE_GLOBS = ("noise_inx_*.npy", "{dataset}_*.npy")
DEFAULT_DATA_NAME = "f30k_precomp"  # PrecompDataModule's default data_name


@dataclass(frozen=True)
class NoiseRequest:
    """What one config asks for: the noise file option, its ratio and its dataset."""

    config: Path
    data_name: str
    noise_file: str | None
    noise_ratio: float


def config_request(config: Path) -> NoiseRequest:
    """The data options of ``config`` (its fragments merged in) that decide its noise file.

    Raises:
        ConfigError: the config cannot be read (names the file).
    """
    data = merged(config).get("data") or {}
    args: dict[str, Any] = data.get("init_args", data) if isinstance(data, dict) else {}
    return NoiseRequest(config, str(args.get("data_name", DEFAULT_DATA_NAME)),
                        args.get("noise_file"), float(args.get("noise_ratio", 0.0) or 0.0))


def folder_noise_files(data_dir: Path, dataset: str) -> list[Path]:
    """Files in ``data_dir`` named as published noise files are, sorted, without repeats."""
    found = {p for pattern in NOISE_GLOBS for p in data_dir.glob(pattern.format(dataset=dataset))}
    return sorted(p for p in found if p.is_file() and not p.name.endswith("_ims.npy"))


def describe(path: Path, n_images: int, n_captions: int) -> str:
    """One line about a valid noise file; :class:`DataError` for an invalid one."""
    found = identify(path, n_images, n_captions)
    return (f"{path}: {found.format}-level, {found.length:,} entries, noise rate "
            f"{found.noise_rate:.4f}, pairing {found.pairing_name}")


def check_noise_files(data_dir: Path, dataset: str, train_counts: tuple[int, int] | None,
                      configs: list[Path]) -> tuple[list[str], list[str], list[str]]:
    """Check the noise files of ``configs`` and of the dataset folder.

    Args:
        data_dir: ``<data_root>/<dataset>``.
        dataset: its name (``f30k_precomp``).
        train_counts: ``(images, captions)`` of its training split, or ``None`` when the split
            could not be read (then the files cannot be validated: one problem).
        configs: config files whose noise files must be present.

    Returns:
        ``(lines, warnings, problems)``: a line per valid file, then what to look at, then what
        would stop a run.
    """
    lines: list[str] = []
    warnings: list[str] = []
    problems: list[str] = []
    wanted: dict[Path, list[str]] = {}
    for config in configs:
        try:
            request = config_request(config)
        except ConfigError as err:
            problems.append(str(err))
            continue
        if request.data_name != dataset:
            warnings.append(f"{config}: its data_name is {request.data_name}, not {dataset}; "
                            "its noise file was not checked")
            continue
        try:
            path = resolve_noise_file(request.noise_file, data_dir, request.noise_ratio)
        except DataError as err:
            problems.append(f"{config}: {err}")
            continue
        if path is not None:
            wanted.setdefault(path, []).append(str(config))
    for path in folder_noise_files(data_dir, dataset):
        wanted.setdefault(path, [])
    if wanted and train_counts is None:
        problems.append(f"{data_dir}: the training split could not be read, so its noise files "
                        "could not be checked")
        return lines, warnings, problems
    for path, users in wanted.items():
        try:
            line = describe(path, *train_counts)  # type: ignore[misc]
        except DataError as err:
            problems.append(f"{err}" + (f" (read by {', '.join(users)})" if users else ""))
            continue
        lines.append(line + (f" (read by {', '.join(users)})" if users else ""))
    return lines, warnings, problems
