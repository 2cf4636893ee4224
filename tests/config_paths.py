"""Which configs in configs/ take the same path through the training code (shared by
tests/cli/test_configs.py, which fits one config per path, and tests/cli/test_config_snapshot.py,
which checks that every other config resolves onto the path of the one fitted for it)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from config_override import CONFIGS

from ncl.compose import merged


def is_evaluation_only(config: Path) -> bool:
    return merged(config)["model"]["class_path"].endswith("Pretrained")


def training_path(resolved: dict[str, Any]) -> tuple:
    """What decides which training code a config runs on tiny data for one epoch: the method,
    backbone (and SGRAF's head) and DataModule classes, the augmentation, the method's
    switches (booleans and strings) and, for each ``*_epochs`` count, whether it is above 0
    (a warm-up or a schedule that starts in the only epoch, or not)."""
    model = resolved["model"]
    args = model.get("init_args", {})
    backbone = args.get("backbone") or {}
    augment = (resolved["data"].get("init_args", {}).get("augment") or {})
    switches = sorted((k, v) for k, v in args.items() if isinstance(v, (bool, str)))
    schedules = sorted((k, v > 0) for k, v in args.items()
                       if k.endswith("_epochs") and isinstance(v, int) and not isinstance(v, bool))
    return (model["class_path"], backbone.get("class_path"),
            (backbone.get("init_args") or {}).get("module_name"), resolved["data"]["class_path"],
            augment.get("class_path") if isinstance(augment, dict) else augment,
            tuple(switches), tuple(schedules))


def by_training_path(configs: list[Path]) -> dict[tuple, list[Path]]:
    """The configs grouped by :func:`training_path` of their shipped (merged) form, in name order."""
    groups: dict[tuple, list[Path]] = defaultdict(list)
    for config in configs:
        groups[training_path(merged(config))].append(config)
    return dict(groups)


TRAIN_CONFIGS = [c for c in CONFIGS if not is_evaluation_only(c)]
EVAL_CONFIGS = [c for c in CONFIGS if is_evaluation_only(c)]
PATHS = by_training_path(TRAIN_CONFIGS)
#: One config per training path is fitted; each other config names the one fitted for it.
FITTED = [group[0] for group in PATHS.values()]
COVERED_BY = {c: group[0] for group in PATHS.values() for c in group[1:]}
