"""Configs that compose: a config may name the fragments it builds on.

A paper-row config (``configs/rcl_sgr_coco.yaml``) states only what differs from its
fragments, listed under a top-level ``compose`` key, paths relative to the config's folder::

    compose: [methods/rcl.yaml, backbones/sgr.yaml, data/coco_rcl_noise.yaml]
    trainer: {max_epochs: 20}

Before the command line reaches LightningCLI, ``--config row.yaml`` becomes
``--config methods/rcl.yaml --config backbones/sgr.yaml --config data/coco_rcl_noise.yaml
--config <row without compose>``: jsonargparse applies them in that order, later values
overriding earlier ones and a ``model:``/``data:`` mapping without ``class_path`` merging into
the class already chosen. Fragments may compose fragments (depth-first, each file once per
expansion). The resolved config (``--print_config``, a run's ``config.yaml``) holds the merged
values and no ``compose`` key, so a saved config never depends on the fragments.
Trainer defaults that every run shares live in ``ncl/defaults.yaml`` (:data:`TRAINER_DEFAULTS`),
loaded before any ``--config``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ncl.errors import ConfigError

COMPOSE_KEY = "compose"
CONFIG_FLAGS = ("-c", "--config")
#: The trainer defaults of every ``fit``/``validate``/``test``/``predict`` (LightningCLI's
#: ``default_config_files``): checkpoints, LR monitor, logger.
TRAINER_DEFAULTS = Path(__file__).resolve().parent / "defaults.yaml"


def _read(path: Path) -> dict[str, Any]:
    """A config file's top-level mapping; one clear error when it is not one."""
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        content = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(yaml_error_line(path, err)) from None
    if content is None:
        raise ConfigError(f"config file {path} is empty (or holds only comments); give it "
                          f"options, or leave the --config out")
    if not isinstance(content, dict):
        raise ConfigError(f"config file {path} must hold a mapping of options, not a "
                          f"{type(content).__name__}")
    return content


def yaml_error_line(path: Path, err: yaml.YAMLError) -> str:
    """One line for a YAML syntax error: the file, the line and column, what is wrong.

    PyYAML's own message spans 4-7 lines and names ``"<unicode string>"`` instead of the file.
    """
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    context, start = getattr(err, "context", None), getattr(err, "context_mark", None)
    if context and start is not None and start is not mark:
        problem += f" ({context} that starts at line {start.line + 1})"
    return f"config file {path} is not valid YAML{where}: {' '.join(problem.split())}"


def _fragments(path: Path, content: dict[str, Any]) -> list[Path]:
    """The ``compose`` list of ``path``, resolved against its folder."""
    listed = content.get(COMPOSE_KEY) or []
    if isinstance(listed, str):
        listed = [listed]
    if not isinstance(listed, list) or not all(isinstance(item, str) for item in listed):
        raise ConfigError(f"{path}: '{COMPOSE_KEY}' must be a list of config paths relative to "
                          f"{path.parent}, got {listed!r}")
    return [path.parent / item for item in listed]


def expand(path: Path, chain: tuple[Path, ...] = ()) -> list[str]:
    """``--config`` values, in order, that together mean ``path``: its fragments' expansions,
    then ``path`` itself (as a YAML string without ``compose`` when it has one)."""
    resolved = path.resolve()
    if resolved in chain:
        cycle = " -> ".join(str(p) for p in (*chain, resolved))
        raise ConfigError(f"config fragments compose each other in a cycle: {cycle}")
    content = _read(path)
    fragments = _fragments(path, content)
    if not fragments:
        return [str(path)]
    values: list[str] = []
    for fragment in fragments:
        values.extend(expand(fragment, (*chain, resolved)))
    rest = {key: value for key, value in content.items() if key != COMPOSE_KEY}
    if rest:
        values.append(yaml.safe_dump(rest, sort_keys=False))
    return values


def expand_configs(args: Sequence[str]) -> list[str]:
    """A command line with every ``--config FILE`` (or ``--config=FILE``) that composes
    fragments replaced by the ``--config`` values of :func:`expand`; other words unchanged."""
    out: list[str] = []
    words = list(args)
    i = 0
    while i < len(words):
        word = words[i]
        flag, value = word, None
        if word in CONFIG_FLAGS and i + 1 < len(words):
            value, i = words[i + 1], i + 1
        elif word.startswith("--config="):
            flag, value = "--config", word.split("=", 1)[1]
        if value is not None and Path(value).is_dir():
            raise ConfigError(f"--config {value} is a folder; give a YAML config file")
        if value is None or not _is_file_path(value):
            out.append(word if value is None else f"{flag}={value}")
        else:
            for item in expand(Path(value)):
                out.extend([flag, item])
        i += 1
    return out


def _is_file_path(value: str) -> bool:
    """Whether a ``--config`` value names a file (it may also be an inline YAML string)."""
    return "\n" not in value and not value.lstrip().startswith("{") and Path(value).suffix in (
        ".yaml", ".yml", ".json")


def merge(base: Any, top: Any) -> Any:
    """``top`` applied over ``base`` as jsonargparse applies a later config: mappings merge key
    by key, anything else replaces; a mapping naming another ``class_path`` replaces the node."""
    if not (isinstance(base, dict) and isinstance(top, dict)):
        return top
    if "class_path" in top and base.get("class_path") not in (None, top["class_path"]):
        return top
    out = dict(base)
    for key, value in top.items():
        out[key] = merge(out[key], value) if key in out else value
    return out


def merged(path: Path, with_defaults: bool = False) -> dict[str, Any]:
    """The options a config states, its fragments merged in (and, with ``with_defaults``, the
    trainer defaults under them): what the CLI parses, before class defaults are filled in.
    For reading a config's values; ``ncl fit --print_config`` gives the fully resolved one."""
    out: dict[str, Any] = _read(TRAINER_DEFAULTS) if with_defaults else {}
    for value in expand(Path(path)):
        content = _read(Path(value)) if _is_file_path(value) else yaml.safe_load(value)
        out = merge(out, content or {})
    return out
