"""Every YAML in configs/ parses through the real CLI; one config per training code path
trains for a couple of steps.

The shipped configs point at the official datasets, which CI does not have; a second
``--config`` swaps in a tiny synthetic DataModule and small backbone dimensions, exactly as a
user would override them, so everything else in each config (method, loss options, logger,
callbacks, optimiser) is exercised as shipped.

Configs that differ only in numbers the training code does not branch on (learning rates,
margins, the dataset they name, noise ratios) take the same path through the code: one of
them (the first by name) is fitted, and each other one is resolved through the CLI as shipped
(``--print_config``) and checked to be on that config's path by tests/cli/test_config_snapshot.py,
which resolves every config for its key-by-key check anyway (the tiny override swaps the same
DataModule and backbone sizes into both, so it cannot set them apart); the grouping is
tests/config_paths.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from config_override import TINY_BACKBONE, tiny_override
from config_paths import COVERED_BY, EVAL_CONFIGS, FITTED, TRAIN_CONFIGS, training_path

from ncl.cli import main
from ncl.compose import merged


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
