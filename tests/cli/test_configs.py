"""Every YAML in configs/ parses through the real CLI; one config per training code path
trains for a couple of steps.

The shipped configs point at the official datasets, which CI does not have; a second
``--config`` swaps in a tiny synthetic DataModule and small backbone dimensions, exactly as a
user would override them, so everything else in each config (method, loss options, logger,
callbacks, optimiser) is exercised as shipped.

Configs that differ only in numbers the training code does not branch on (learning rates,
margins, the dataset they name, noise ratios) take the same path through the code: one of
them (the first by name) is fitted, and the others are resolved with the same override
through the CLI (``--print_config``) and checked to be on that path. What each config
resolves to, key by key, is tests/cli/test_config_snapshot.py's check.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml
from config_override import CONFIGS, TINY_BACKBONE, tiny_override

from ncl.cli import main
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


def test_grouping_separates_what_changes_the_training_code() -> None:
    """A switch, a warm-up in the first epoch or another head is another path; a number is not."""
    base = {"model": {"class_path": "M", "init_args": {
        "margin": 0.2, "warmup_epochs": 0, "backbone": {"class_path": "B", "init_args": {"module_name": "SGR"}}}},
        "data": {"class_path": "D", "init_args": {"noise_ratio": 0.2}}}

    def changed(**model_args: Any) -> dict[str, Any]:
        out = {"model": {**base["model"], "init_args": {**base["model"]["init_args"], **model_args}},
               "data": base["data"]}
        return out

    assert training_path(changed(margin=0.5)) == training_path(base)
    assert training_path(changed(warmup_epochs=1)) != training_path(base)
    assert training_path(changed(clean_only=True)) != training_path(base)
    assert training_path(changed(negatives="sum")) != training_path(base)
    assert training_path(changed(backbone={"class_path": "B", "init_args": {"module_name": "SAF"}})) \
        != training_path(base)
    augmented = {**base, "data": {"class_path": "D", "init_args": {"augment": {"class_path": "A"}}}}
    assert training_path(augmented) != training_path(base)
    assert sorted(FITTED + list(COVERED_BY)) == sorted(TRAIN_CONFIGS)  # every config is one or the other


def resolved_with_override(config: Path, override: Path) -> dict[str, Any]:
    """``ncl fit --config CONFIG --config OVERRIDE --print_config``, parsed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        main(["fit", "--config", str(config), "--config", str(override), "--print_config"])
    assert stop.value.code in (None, 0), stop.value.code
    return yaml.safe_load(out.getvalue())


@pytest.mark.parametrize("config", EVAL_CONFIGS, ids=[c.stem for c in EVAL_CONFIGS])
def test_evaluation_config_tests_official_checkpoints(config: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       synthetic_cache: Path) -> None:
    """Official-format checkpoints written here are evaluated by ``ncl test``."""
    from helpers_official import official_checkpoint

    from ncl.data.datamodule import SyntheticDataModule
    from ncl.models import SGRAF

    monkeypatch.chdir(tmp_path)
    vocab = SyntheticDataModule(preset="tiny", cache_dir=str(synthetic_cache)).vocab_size
    init_args = merged(config)["model"]["init_args"]
    original = init_args["backbones"]
    backbones, paths = [], []
    for k, entry in enumerate(original):
        args = {**entry["init_args"], **TINY_BACKBONE}
        net = SGRAF(vocab, **args)
        paths.append(str(official_checkpoint(tmp_path / f"net{k}_model_best.pth.tar", [net])))
        backbones.append({"class_path": entry["class_path"], "init_args": args})
    override = tiny_override(tmp_path, synthetic_cache, config)
    extra = yaml.safe_load(override.read_text())
    extra["model"] = {"init_args": {"backbones": backbones, "checkpoints": paths}}
    override.write_text(yaml.safe_dump(extra))
    main(["test", "--config", str(config), "--config", str(override)])
    results = json.loads(next(tmp_path.rglob("test_results.json")).read_text())
    # rows: each network (named by model.names or the file names), then the ensemble
    names = init_args.get("names") or [f"net{k}_model_best" for k in range(len(original))]
    ensemble = init_args.get("ensemble_name") or "+".join(names)
    assert list(results) == [*names, ensemble]
    protocols = merged(config)["data"]["init_args"].get("test_protocols", ["1k"])  # class default
    for by_protocol in results.values():  # the config's protocols (COCO: 5fold1k and 5k)
        assert list(by_protocol) == protocols
        assert all(0 <= m["rsum"] <= 600 for m in by_protocol.values())


@pytest.mark.parametrize("config", list(COVERED_BY), ids=[c.stem for c in COVERED_BY])
def test_config_resolves_onto_a_fitted_path(config: Path, tmp_path: Path, synthetic_cache: Path) -> None:
    """The config with the tiny override resolves through the CLI and is on the training path
    of the config fitted for it (test_config_fits_on_tiny_data[<that config>])."""
    twin = COVERED_BY[config]
    mine = resolved_with_override(config, tiny_override(tmp_path, synthetic_cache, config))
    assert mine["model"]["class_path"] == merged(config)["model"]["class_path"]
    assert mine["data"]["class_path"].endswith("SyntheticDataModule")  # the override applies
    assert training_path(mine) == fitted_path(twin, synthetic_cache)


@functools.cache
def fitted_path(config: Path, cache: Path) -> tuple:
    """:func:`training_path` of a fitted config as the CLI resolves it with the tiny override
    (once per config: several configs share it)."""
    with tempfile.TemporaryDirectory() as folder:
        return training_path(resolved_with_override(config, tiny_override(Path(folder), cache, config)))


@pytest.mark.parametrize("config", FITTED, ids=[c.stem for c in FITTED])
def test_config_fits_on_tiny_data(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  synthetic_cache: Path) -> None:
    monkeypatch.chdir(tmp_path)
    override = tiny_override(tmp_path, synthetic_cache, config)
    main(["fit", "--config", str(config), "--config", str(override)])
    saved = list(tmp_path.rglob("config.yaml"))
    assert saved, "the resolved config is saved in the run directory"
    resolved = yaml.safe_load(saved[0].read_text())
    assert resolved["model"]["class_path"] == merged(config)["model"]["class_path"]
    assert list(tmp_path.rglob("*.ckpt")), "a checkpoint was written"
    noise = list(tmp_path.rglob("noise.json"))
    assert noise and list(tmp_path.rglob("noise_index.npy"))
