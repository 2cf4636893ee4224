"""Every dividing method logs its noise detection in one schema, ``train/detection/*``
(:mod:`ncl.division.detection`), and the grid's records read only that (issue 37): on a tiny
run of each, the schema gives the detection the per-method keys gave, to the last digit."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncl.cli import main
from ncl.division.detection import (
    as_logged,
    mean_over_networks,
    precision_recall_f1,
    prefixed,
    three_way,
    zeroed_labels,
)
from ncl.reproduce.grid import ROWS
from ncl.reproduce.records import DIVIDERS, detection, detection_of_row
from tiny_runs import METHODS, method_config, metric_rows, run_folder


def test_the_summaries_are_the_readers_arithmetic_on_logged_values() -> None:
    third = 1 / 3  # not a float32: the summary uses the value the logs keep
    nets = {"division/A/precision": third, "division/A/recall": 1.0, "division/A/f1": 0.5,
            "division/B/precision": 0.25, "division/B/recall": 0.0, "division/B/f1": 0.0}
    got = mean_over_networks(nets, ("A", "B"))
    assert got["precision"] == (as_logged(third) + 0.25) / 2 != (third + 0.25) / 2
    assert got["recall"] == 0.5 and mean_over_networks({}, ("A", "B")) == {}
    assert prefixed({"decl/precision": third, "decl/recall": 0.5, "decl/f1": 0.4}, "decl/") == {
        "precision": as_logged(third), "recall": 0.5, "f1": as_logged(0.4)}
    assert prefixed({"decl/predicted_clean": 3.0}, "decl/") == {}
    crcl = {"labels/all/zero": 1033.0, "labels/noisy/zero": 865.0, "labels/noisy/count": 996.0}
    assert zeroed_labels(crcl) == precision_recall_f1(865, 1033, 996)
    assert zeroed_labels({"labels/noisy_precision": 0.0, "labels/noisy_recall": 0.0,
                          "labels/noisy_f1": 0.0}) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    recon = {"division/noisy": 80.0, "division/clean": 400.0, "division/local": 100.0,
             "division/clean_true_noisy": 10.0, "division/local_true_noisy": 20.0,
             "division/noisy_true_noisy": 70.0}
    got = three_way(recon)
    assert (got["precision"], got["recall"]) == (70 / 80, 70 / 100)
    assert (got["clean_noisy"], got["rough_clean_noisy"]) == (10 / 400, 30 / 500)
    assert precision_recall_f1(0, 0, 0) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_the_reader_reads_the_schema_only() -> None:
    row = {"epoch": "2", "train/detection/precision": "0.5", "train/detection/recall": "0.25",
           "train/detection/f1": "0.3333333333333333", "train/detection/clean_noisy": "0.1",
           "division/A/f1": "0.9"}
    assert detection_of_row(row) == {"precision": 0.5, "recall": 0.25, "f1": 1 / 3, "clean_noisy": 0.1}
    assert detection_of_row({"epoch": "2", "division/A/f1": "0.9", "decl/f1": "0.2"}) is None
    rows = [{**row, "epoch": "0"}, {"epoch": "1"}, {**row, "epoch": "3", "train/detection/f1": "1.0"}]
    got = detection(rows, 1)
    assert (got["after_warmup"]["epoch"], got["end"]["epoch"], got["end"]["f1"]) == (3, 3, 1.0)
    assert detection([{"epoch": "0"}], 0) == {}


#: Tiny runs of every dividing method: the declared tiny cases, and CRCL and ReCon (which
#: have none: their resume tests live in tests/methods/) with one warm-up / frozen epoch.
DIVIDING = {**{name: METHODS[name] for name in ("ncr", "lnc", "decl", "l2rm", "in2r")},
            "crcl": {"class_path": "ncl.methods.crcl.CRCL", "init_args": {"pieces": [3], "freeze_epochs": 1}},
            "recon": {"class_path": "ncl.methods.recon.ReCon", "init_args": {"warmup_epochs": 1}}}


#: The kinds of detection logged under per-method keys before the schema existed; a method
#: added since logs the schema only, so there is nothing older to compare it with (its own
#: tests check its detection: tests/methods/test_gsc.py).
LEGACY_KINDS = {"co-divide", "labels", "three-way", "prediction", "beta division"}


def test_every_dividing_row_with_older_keys_is_covered() -> None:
    legacy = {name for name, kind in DIVIDERS.items() if kind in LEGACY_KINDS}
    assert legacy - {"recon_no_im"} == set(DIVIDING)  # recon_no_im: ReCon's class


@pytest.mark.parametrize("name", sorted(DIVIDING))
def test_schema_gives_the_detection_the_method_keys_gave(tmp_path: Path, synthetic_cache: Path,
                                                          name: str) -> None:
    config = method_config(tmp_path, synthetic_cache, DIVIDING[name], max_epochs=3, steps=3)
    main(["fit", "--config", str(config)])
    metrics = metric_rows(run_folder(tmp_path))
    warmup = int(DIVIDING[name]["init_args"].get(ROWS[name].detection_after, 0))
    schema = detection(metrics, warmup)
    assert schema and schema["end"]["epoch"] == 2, schema
    # the per-method keys (still logged) read as the grid read them before issue 37
    assert schema == detection(metrics, warmup, DIVIDERS[name])
    if name == "recon":
        assert {"clean_noisy", "rough_clean_noisy"} <= set(schema["end"])
