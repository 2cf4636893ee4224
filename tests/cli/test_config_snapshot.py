"""Every config resolves as it did before the layout step (issue 23) and before configs were
composed from fragments (issue 24), except the listed changes.

``tests/cli/config_snapshot/<name>.yaml`` is ``ncl fit --config configs/<name>.yaml
--print_config`` on 913863c (or, for a config added later, when it was added). A refactor keeps
resolved configs: a difference that is not in :data:`ALLOWED` fails here with the key and both
values. ``python scripts/config_snapshots.py`` writes the snapshot of every config that has
none, with this test's own ``--print_config`` (:data:`SNAPSHOTS`).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from config_paths import COVERED_BY, training_path

from ncl.runs.record import flatten  # the run record flattens configs the same way

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).parent / "config_snapshot"
ABSENT = "<absent>"
#: The command that writes the missing snapshots.
WRITE = "python scripts/config_snapshots.py"


def _snapshot_script() -> ModuleType:
    """``scripts/config_snapshots.py`` (not a package): what writes the snapshots is what the
    test compares with."""
    spec = importlib.util.spec_from_file_location("config_snapshots", REPO / "scripts" / "config_snapshots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SNAPSHOTS = _snapshot_script()

#: (flattened key, value before, value now) -> why it changed.
ALLOWED: dict[tuple[str, Any, Any], str] = {
    ("trainer.callbacks[0].init_args.monitor", "val/rsum", "val/rsum_selected"):
        "one model-selection mechanism: every method logs val/rsum_selected (-1 in epochs that "
        "may not be selected) and every config's best checkpoint monitors it",
    ("model.init_args.select_warmup", ABSENT, False):
        "select_warmup is a base option now (declared once); methods without warm-up epochs "
        "list it with its default, which changes nothing there",
    ("model.init_args.loss_figure", False, ABSENT):
        "NCR/LNC's own loss-histogram option is gone: the Figures callback (added to every fit) "
        "draws the same figure for every method",
    # issue 24: configs compose from fragments, trainer defaults in ncl/defaults.yaml
    ("trainer.log_every_n_steps", 50, None):
        "Lightning's default is 50: configs no longer restate a default (the same run)",
    ("model.init_args.backbone.class_path", "ncl.models.sgraf.SGRAF", "ncl.models.SGRAF"):
        "SGRAF's class path is spelled one way (the same class)",
    ("trainer.callbacks[2].class_path", ABSENT, "lightning.pytorch.callbacks.LearningRateMonitor"):
        "the synthetic configs take the default callbacks, so they log the learning rate too",
    ("trainer.callbacks[2].init_args.logging_interval", ABSENT, None): "(the same callback)",
    ("trainer.callbacks[2].init_args.log_momentum", ABSENT, False): "(the same callback)",
    ("trainer.callbacks[2].init_args.log_weight_decay", ABSENT, False): "(the same callback)",
    # issue 29: ncl test/validate need trained weights unless told otherwise
    ("allow_untrained", ABSENT, False):
        "a new top-level option of every subcommand (used by ncl test/validate); the run is the same",
    # issue 29 (run record): entries below this line
    ("override_run", ABSENT, False):
        "a new top-level option of every subcommand (ncl fit --ckpt_path: resume although model "
        "or data options differ from the run's, recorded in resumes.jsonl); the run is the same",

    # issue 28: mixed precision
    ("float32_matmul_precision", ABSENT, "highest"):
        "a new top-level option of every subcommand (TF32 on GPUs is opt-in); highest is "
        "torch's default, so the run is the same",

    # issue 29 (ReCon): entries below this line
    ("model.init_args.relation_rows", "mean", "sum"):
        "ReCon's m-KL is IAIS's, summed over rows: under the mean the paper's threshold e - 1 is "
        "never reached and D_l stays empty (docs/methods/recon.md, 'The scale of L_IM')",
    ("model.init_args.true_positive", ABSENT, True):
        "ReCon's explicit switch for the paper's ablation without 'Tru.'; true changes nothing",
    ("model.init_args.mask_filled_regions", ABSENT, True):
        "ReCon's relations leave out the regions the training augmentation filled with 1e-10",

    # issue 37: the package shows its layers (docs/design.md, "Layout")
    ("trainer.logger.class_path", "ncl.loggers.NclWandbLogger", "ncl.runs.loggers.NclWandbLogger"):
        "the loggers live with the run bookkeeping (ncl/runs/); the same class, so the same run",

    # issue 37 (the skeleton in the base): entries below this line
    ("model.init_args.diagnostics", ABSENT, True):
        "diagnostics is a base option now (declared once, the base attaches Diagnostics); "
        "methods that report nothing per epoch (RCL, the baselines) list it with its default, "
        "and their Diagnostics logs nothing",

    # issue 40 (fidelity pass): entries below this line
    ("data.init_args.noise_file", None, "coco_precomp_{noise_ratio}.npy"):
        "l2rm_{sgr,saf}_coco read L2RM's own COCO noise file, as its tarin_coco.sh does "
        "(noise_index/coco_precomp_0.2.npy, caption level; presumed RCL's COCO pairing, "
        "ncl.data.noise_registry) instead of NCR's caption shuffle from noise_seed 0, which "
        "L2RM's loader only draws when that file is missing; noise_type (caption), noise_ratio "
        "and noise_seed are unchanged, and the seed is unused when a file is read",
    ("model.init_args.prediction_precision", ABSENT, "float32"):
        "DECL's correspondence prediction computes its evidence in float32, as the official code "
        "(saturated scores tie and the first column wins); float64, the precision before, is "
        "the switch's other value (docs/methods/decl.md)",
    ("model.init_args.bmm_density_clamp", ABSENT, 1e-06):
        "L2RM's clamp of x in the Beta density, now an option; its default is the clamp the "
        "mixture always had (the pomegranate fork's x_eps), so the run is the same",
    # issue 40 item 6: ReCon's official model file (model/ReCon.py at 2a40dcf) behind switches;
    # every default is the paper reading the configs had, so the run is the same
    ("model.init_args.warmup_loss", ABSENT, "triplet"):
        "ReCon's warm-up: triplet (Eq. 12) as before; infonce is the official file's other branch",
    ("model.init_args.rank_loss", ABSENT, "paper"):
        "ReCon's rank loss: Eq. 13-15 per subset as before; official is train_batch's",
    ("model.init_args.relation_loss", ABSENT, "pair"):
        "ReCon's relation loss: Eq. 3-4 within each pair as before; batch is train_batch's",
    ("model.init_args.relation_text_proxy", ABSENT, "captions"):
        "read only with relation_loss batch (the caption rows' proxy, as the official file)",
    ("model.init_args.store_predictions", ABSENT, "pass"):
        "ReCon's p of Eq. 10 from the division pass as before; step is train_batch's",
    ("model.init_args.eval_autocast", ABSENT, False):
        "a new base option (the evaluation similarity under the trainer's autocast); off, the "
        "similarity is float32 as before, so the run is the same",

    # issue 47 (IN2R as its code runs it): entries below this line; the in2r_* snapshots were
    # re-recorded with them
    ("model.init_args.backbone.init_args.eval_batches", ABSENT, "pairs"):
        "IN2R's VSE centres every batch, at evaluation too: it is now evaluated in the official "
        "encode_data's batches of eval_batch_size pairs in caption order (before: separate image "
        "and caption loaders, still the value separate); validation numbers, and so the selected "
        "checkpoint, change, and no longer depend on the number of processes",
    ("model.init_args.division_augmentation", ABSENT, True):
        "IN2R's division pass reads augmented pairs, as the official eval_train iterates the "
        "augmenting training loader (before: the pairs as stored, still the value false); the "
        "division changes",
}


def resolved(config: Path) -> dict[str, Any]:
    """The config as ``ncl fit --print_config`` prints it, parsed (a fresh copy each call)."""
    return yaml.safe_load(_printed(config))


@functools.cache
def _printed(config: Path) -> str:
    """``ncl fit --config CONFIG --print_config``'s output, once per config in this process:
    the path test below reads the configs this file's first test resolved."""
    return SNAPSHOTS.print_config(config)


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    a, b = flatten(before), flatten(after)
    return [(k, a.get(k, ABSENT), b.get(k, ABSENT)) for k in sorted(set(a) | set(b))
            if a.get(k, ABSENT) != b.get(k, ABSENT)]


def test_flatten_and_differences() -> None:
    before = {"model": {"init_args": {"x": 1, "gone": True}}, "trainer": {"callbacks": [{"m": "a"}]}}
    after = {"model": {"init_args": {"x": 2, "new": [1, 2]}}, "trainer": {"callbacks": [{"m": "a"}]}}
    assert differences(before, after) == [("model.init_args.gone", True, ABSENT),
                                          ("model.init_args.new", ABSENT, [1, 2]),
                                          ("model.init_args.x", 1, 2)]


@pytest.mark.parametrize("name", sorted(p.stem for p in SNAPSHOT.glob("*.yaml")))
def test_config_resolves_as_before(name: str) -> None:
    config = REPO / "configs" / f"{name}.yaml"
    assert config.is_file(), f"configs/{name}.yaml is gone; remove its snapshot with a reason"
    before = yaml.safe_load((SNAPSHOT / f"{name}.yaml").read_text())
    unexpected = [d for d in differences(before, resolved(config)) if d not in ALLOWED]
    assert unexpected == []


@pytest.mark.parametrize("config", list(COVERED_BY), ids=[c.stem for c in COVERED_BY])
def test_config_resolves_onto_a_fitted_path(config: Path) -> None:
    """A config that is not fitted (tests/cli/test_configs.py fits one per training path)
    resolves through the CLI onto the training path of the config fitted for it: the switches
    and schedules its class defaults fill in do not set it apart."""
    assert training_path(resolved(config)) == training_path(resolved(COVERED_BY[config]))


def test_every_config_has_a_snapshot() -> None:
    configs = SNAPSHOTS.config_names(REPO / "configs")
    assert configs == sorted(p.stem for p in (REPO / "configs").glob("*.yaml"))
    snapshots = sorted(p.stem for p in SNAPSHOT.glob("*.yaml"))
    missing = sorted(set(configs) - set(snapshots))
    assert not missing, f"configs without a snapshot: {missing}; write them with `{WRITE}`"
    gone = sorted(set(snapshots) - set(configs))
    assert not gone, f"snapshots without a config: {gone}; remove them (with the reason in the commit)"


def test_the_snapshot_script_writes_what_the_test_compares_and_keeps_existing_ones(tmp_path: Path) -> None:
    assert SNAPSHOTS.SNAPSHOTS == SNAPSHOT and SNAPSHOTS.CONFIGS == REPO / "configs"
    kept = tmp_path / "ncr_sgr_f30k.yaml"
    kept.write_text("kept: true\n")
    written = SNAPSHOTS.write_snapshots(["rcl_sgr_f30k", "ncr_sgr_f30k"], tmp_path)
    assert written == [tmp_path / "rcl_sgr_f30k.yaml"] and kept.read_text() == "kept: true\n"
    fresh = yaml.safe_load(written[0].read_text())
    assert fresh["model"]["class_path"] == "ncl.methods.rcl.RCL"
    assert differences(fresh, resolved(REPO / "configs" / "rcl_sgr_f30k.yaml")) == []
    # the committed snapshot differs only by what ALLOWED lists (the comparison can fail)
    committed = yaml.safe_load((SNAPSHOT / "rcl_sgr_f30k.yaml").read_text())
    assert all(d in ALLOWED for d in differences(committed, fresh))
    assert differences({**fresh, "seed_everything": 1}, fresh) == [("seed_everything", 1, fresh["seed_everything"])]
    # --force writes an existing one again; nothing else is touched
    assert SNAPSHOTS.write_snapshots(["rcl_sgr_f30k", "ncr_sgr_f30k"], tmp_path,
                                     force={"ncr_sgr_f30k"}) == [kept]
    assert yaml.safe_load(kept.read_text())["model"]["class_path"] == "ncl.methods.ncr.NCR"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ncr_sgr_f30k.yaml", "rcl_sgr_f30k.yaml"]
