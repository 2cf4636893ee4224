"""The checkpoints the authors of each method released, as data (issue 52, part 4).

One JSON file per method in ``ncl/numbers/checkpoints/<method>.json`` (package data): where
the authors publish the files, what they are called, their format, the ``eval_*`` config and
the options with which ``ncl test`` loads them, and the numbers a paper reports for them. A
method whose authors released none has a file too, with an empty ``checkpoints`` list and the
page that was checked, so the question "are there checkpoints?" has a recorded answer.

This module only reads and checks the records (pure: no torch, no network). A record that
breaks a rule raises one :class:`CheckpointRecordError` naming the file and the field.
``docs/checkpoints.md`` is generated from the records (:mod:`ncl.numbers.checkpoints_page`).

A record (every key required unless marked optional)::

    {"method": "NCR", "paper": "...", "repository": "owner/name",
     "page": "https://github.com/owner/name#...",      # where the files are published
     "checked": "README.md at 38c4d03",                 # what was read to write this record
     "note": "...",                                     # optional
     "checkpoints": [
       {"name": "f30k_0.2", "dataset": "f30k" | "coco" | "cc152k" | null (not stated),
        "noise": "caption" | "none" | "real" | null, "noise_ratio": 0.2 | null,
        "url": "https://...",                           # the file, or the folder holding it
        "files": ["ncr_f30k_0.2_model_best.pth.tar"],   # [] when the page names none
        "format": "official_pair",                      # a key of FORMATS
        "backbones": [{"module_name": "SGR", "add_mask_token": false}],  # one per file
        "config": "configs/eval_official_f30k.yaml",    # "{dataset}" when dataset is null
        "checksum": null | {"algorithm": "md5" | "sha256", "value": "<hex>"},
        "reported": [{"source": "LNC (IJCV 2024)", "table": "Table 1", "protocol": "1k",
                      "recalls": [6 numbers] | null, "rsum": 496.7 | null, "note": "..."}],
        "note": "..."}]}                                # optional
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ncl.errors import NclUserError

#: Where the records live (package data).
CHECKPOINTS_DIR = Path(__file__).resolve().parent / "checkpoints"
#: The folder the generated commands put the downloaded files in.
DOWNLOAD_DIR = "checkpoints"
#: Stands for a file name the authors' page does not give.
UNNAMED = "FILE.pth.tar"

#: Checkpoint formats: key -> (what the file holds, whether ``ncl test`` loads it).
FORMATS: dict[str, tuple[str, bool]] = {
    "official_pair": (
        "official .pth.tar in NCR's layout: model_A and model_B, each a list of three SGRAF "
        "state dicts [img_enc, txt_enc, sim_enc], and the options as an argparse Namespace "
        "under opt; no `<mask>` embedding row", True),
    "official_single": (
        "official .pth.tar with one network under model (RCL, CRCL, DECL layout)", True),
}
DATASETS = ("f30k", "coco", "cc152k")
NOISES = ("caption", "image", "none", "real")
PROTOCOLS = ("1k", "5fold1k", "5k")
MODULES = ("SGR", "SAF")
ALGORITHMS = {"md5": 32, "sha256": 64}


class CheckpointRecordError(NclUserError):
    """A checkpoint record breaks a rule; the message names the file and the field."""


@dataclass(frozen=True)
class Reported:
    """Numbers a paper prints for a released checkpoint's setting.

    ``recalls`` are R@1, R@5, R@10 image-to-text then text-to-image (percent), ``rsum`` the
    sum the paper prints (``None`` when it prints none; :attr:`total` then sums the recalls).
    """

    source: str
    table: str
    protocol: str
    recalls: tuple[float, ...] | None
    rsum: float | None
    note: str

    @property
    def total(self) -> float | None:
        """The printed rSum, else the sum of the six printed recalls (one decimal)."""
        if self.rsum is not None:
            return self.rsum
        return None if self.recalls is None else round(sum(self.recalls), 1)


@dataclass(frozen=True)
class Backbone:
    """The SGRAF network one file is loaded into (``model.backbones`` entry)."""

    module_name: str
    add_mask_token: bool


@dataclass(frozen=True)
class Checkpoint:
    """One released model (one file, or a folder whose files the page does not name)."""

    name: str
    dataset: str | None
    noise: str | None
    noise_ratio: float | None
    url: str
    files: tuple[str, ...]
    format: str
    backbones: tuple[Backbone, ...]
    config: str | None
    checksum: tuple[str, str] | None
    reported: tuple[Reported, ...]
    note: str

    def configs(self) -> tuple[str, ...]:
        """The config path(s) that load it: one, or one per dataset when the page does not
        say which dataset (the config names ``{dataset}``)."""
        if self.config is None:
            return ()
        if self.dataset is None:
            return tuple(self.config.format(dataset=d) for d in DATASETS)
        return (self.config,)

    def paths(self) -> tuple[str, ...]:
        """Where ``ncl test`` expects the files: ``checkpoints/<file>`` (:data:`UNNAMED` for
        files the page does not name, one per backbone)."""
        names = self.files or (UNNAMED,) * len(self.backbones)
        return tuple(f"{DOWNLOAD_DIR}/{name}" for name in names)

    def overrides(self) -> tuple[str, ...]:
        """The ``ncl test`` options after ``--config``: ``--model.checkpoints`` and the
        ``--model.backbones`` the files load into."""
        nets = ", ".join("{class_path: ncl.models.SGRAF, init_args: {module_name: "
                         f"{b.module_name}, add_mask_token: {str(b.add_mask_token).lower()}}}}}"
                         for b in self.backbones)
        return ("--model.checkpoints", f"[{', '.join(self.paths())}]",
                "--model.backbones", f"[{nets}]")


@dataclass(frozen=True)
class Release:
    """What one method's authors released (possibly nothing)."""

    method: str
    paper: str
    repository: str
    page: str
    checked: str
    note: str
    checkpoints: tuple[Checkpoint, ...]
    path: Path


# ---------------------------------------------------------------------- reading
def load_releases(directory: Path = CHECKPOINTS_DIR) -> list[Release]:
    """Every ``<method>.json`` in ``directory``, checked, ordered by method name.

    Raises:
        CheckpointRecordError: a file that is not JSON or breaks a rule (file and field named),
            or two files for one method.
    """
    releases = [load_release(path) for path in sorted(directory.glob("*.json"))]
    seen: dict[str, Path] = {}
    for release in releases:
        key = release.method.lower()
        if key in seen:
            raise CheckpointRecordError(f"{release.path}: method: {release.method!r} is also "
                                        f"recorded in {seen[key]}")
        seen[key] = release.path
    return sorted(releases, key=lambda r: r.method.lower())


def load_release(path: Path) -> Release:
    """One method's record, checked (see the module docstring for the fields)."""
    try:
        raw = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise CheckpointRecordError(f"{path}: not valid JSON ({err})") from None
    return parse_release(raw, Path(path))


def parse_release(raw: Any, path: Path) -> Release:
    """Check a decoded record and turn it into a :class:`Release`."""
    fields = _Fields(raw, path, "")
    fields.only({"method", "paper", "repository", "page", "checked", "note", "checkpoints"})
    items = fields.list("checkpoints")
    checkpoints = tuple(_checkpoint(item, path, f"checkpoints[{k}]") for k, item in enumerate(items))
    names = [c.name for c in checkpoints]
    for k, name in enumerate(names):
        if name in names[:k]:
            raise CheckpointRecordError(f"{path}: checkpoints[{k}].name: {name!r} is used twice")
    return Release(method=fields.text("method"), paper=fields.text("paper"),
                   repository=fields.text("repository", pattern=r"[\w.-]+/[\w.-]+"),
                   page=fields.text("page", pattern=r"https://\S+"),
                   checked=fields.text("checked"), note=fields.text("note", optional=True),
                   checkpoints=checkpoints, path=path)


def _checkpoint(raw: Any, path: Path, where: str) -> Checkpoint:
    f = _Fields(raw, path, where)
    f.only({"name", "dataset", "noise", "noise_ratio", "url", "files", "format", "backbones",
            "config", "checksum", "reported", "note"})
    dataset = f.choice("dataset", DATASETS, nullable=True)
    fmt = f.choice("format", tuple(FORMATS))
    files = tuple(f.text_list("files"))
    backbones = tuple(_backbone(b, path, f"{where}.backbones[{k}]")
                      for k, b in enumerate(f.list("backbones", nonempty=True)))
    if files and len(files) != len(backbones):
        f.fail("backbones", f"one per file: {len(files)} files, {len(backbones)} backbones")
    config = f.text("config", nullable=True, pattern=r"configs/eval_[\w{}]+\.yaml")
    if config is not None and not FORMATS[fmt][1]:
        f.fail("config", f"format {fmt!r} is one ncl cannot load: config must be null")
    if config is None and FORMATS[fmt][1]:
        f.fail("config", f"format {fmt!r} loads in ncl: name the eval_* config")
    if config is not None and ("{dataset}" in config) != (dataset is None):
        f.fail("config", "must contain {dataset} exactly when dataset is null (not stated)")
    noise = f.choice("noise", NOISES, nullable=True)
    ratio = f.number("noise_ratio", 0.0, 1.0, nullable=True)
    if noise in ("caption", "image") and ratio is None:
        f.fail("noise_ratio", f"{noise} noise needs its ratio")
    return Checkpoint(
        name=f.text("name", pattern=r"[\w.-]+"), dataset=dataset, noise=noise, noise_ratio=ratio,
        url=f.text("url", pattern=r"https://\S+"), files=files, format=fmt, backbones=backbones,
        config=config, checksum=_checksum(f), note=f.text("note", optional=True),
        reported=tuple(_reported(r, path, f"{where}.reported[{k}]")
                       for k, r in enumerate(f.list("reported"))))


def _backbone(raw: Any, path: Path, where: str) -> Backbone:
    f = _Fields(raw, path, where)
    f.only({"module_name", "add_mask_token"})
    return Backbone(module_name=f.choice("module_name", MODULES),
                    add_mask_token=f.boolean("add_mask_token"))


def _checksum(f: _Fields) -> tuple[str, str] | None:
    raw = f.get("checksum")
    if raw is None:
        return None
    c = _Fields(raw, f.path, f"{f.where}.checksum")
    c.only({"algorithm", "value"})
    algorithm = c.choice("algorithm", tuple(ALGORITHMS))
    value = c.text("value", pattern=rf"[0-9a-f]{{{ALGORITHMS[algorithm]}}}")
    return algorithm, value


def _reported(raw: Any, path: Path, where: str) -> Reported:
    f = _Fields(raw, path, where)
    f.only({"source", "table", "protocol", "recalls", "rsum", "note"})
    recalls = f.get("recalls")
    if recalls is not None:
        if not isinstance(recalls, list) or len(recalls) != 6:
            f.fail("recalls", "six numbers (R@1, R@5, R@10 image-to-text, then text-to-image) or null")
        for value in recalls:
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 100:
                f.fail("recalls", f"{value!r} is not a recall in [0, 100]")
        recalls = tuple(float(v) for v in recalls)
    rsum = f.number("rsum", 0.0, 600.0, nullable=True)
    if recalls is None and rsum is None:
        f.fail("recalls", "give the recalls, the printed rsum or both (no number: no entry)")
    return Reported(source=f.text("source"), table=f.text("table"),
                    protocol=f.choice("protocol", PROTOCOLS), recalls=recalls, rsum=rsum,
                    note=f.text("note", optional=True))


class _Fields:
    """Typed access to one JSON object; every error names the file and the field."""

    def __init__(self, raw: Any, path: Path, where: str) -> None:
        self.path, self.where = path, where
        if not isinstance(raw, Mapping):
            raise CheckpointRecordError(f"{path}: {where or 'top level'}: expected an object, "
                                        f"got {type(raw).__name__}")
        self.raw = raw

    def fail(self, key: str, problem: str) -> None:
        field = f"{self.where}.{key}" if self.where else key
        raise CheckpointRecordError(f"{self.path}: {field}: {problem}")

    def only(self, allowed: set[str]) -> None:
        unknown = sorted(set(self.raw) - allowed)
        if unknown:
            self.fail(unknown[0], f"unknown field (allowed: {', '.join(sorted(allowed))})")

    def get(self, key: str) -> Any:
        return self.raw.get(key)

    def _required(self, key: str) -> Any:
        if key not in self.raw:
            self.fail(key, "missing")
        return self.raw[key]

    def text(self, key: str, optional: bool = False, nullable: bool = False,
             pattern: str | None = None) -> Any:
        if optional and key not in self.raw:
            return ""
        value = self._required(key)
        if value is None and nullable:
            return None
        if not isinstance(value, str) or not value.strip():
            self.fail(key, f"expected a non-empty string, got {value!r}")
        if pattern is not None and not re.fullmatch(pattern, value):
            self.fail(key, f"{value!r} does not match {pattern}")
        return value

    def choice(self, key: str, choices: Sequence[str], nullable: bool = False) -> Any:
        value = self._required(key)
        if value is None and nullable:
            return None
        if value not in choices:
            self.fail(key, f"{value!r} is not one of {', '.join(choices)}"
                      + (" (or null)" if nullable else ""))
        return value

    def number(self, key: str, low: float, high: float, nullable: bool = False) -> Any:
        value = self._required(key)
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            self.fail(key, f"expected a number in [{low:g}, {high:g}], got {value!r}")
        return float(value)

    def boolean(self, key: str) -> bool:
        value = self._required(key)
        if not isinstance(value, bool):
            self.fail(key, f"expected true or false, got {value!r}")
        return value

    def list(self, key: str, nonempty: bool = False) -> list:
        value = self._required(key)
        if not isinstance(value, list) or (nonempty and not value):
            self.fail(key, "expected a " + ("non-empty " if nonempty else "") + f"list, got {value!r}")
        return value

    def text_list(self, key: str) -> list[str]:
        values = self.list(key)
        for value in values:
            if not isinstance(value, str) or not re.fullmatch(r"[\w.+-]+", value):
                self.fail(key, f"{value!r} is not a file name")
        return values
