"""The datasets' declarations (ncl/data/dataset_facts/*.json, read by ncl.data.facts)."""

from __future__ import annotations

import json

import pytest

from ncl.data import facts


def test_the_official_tables_read_from_the_declarations():
    """The counts, noise and feature shapes of spec 1.2, written out by hand."""
    assert facts.SPLIT_COUNTS["f30k_precomp"] == {"train": (29_000, 145_000), "dev": (1_014, 5_070),
                                                  "test": (1_000, 5_000)}
    assert facts.SPLIT_COUNTS["coco_precomp"] == {"train": (113_287, 566_435),
                                                  "dev": (5_000, 25_000),
                                                  "testall": (5_000, 25_000)}
    assert facts.TRAIN_COUNTS["cc152k_precomp"] == (150_000, 150_000)
    assert [name for name, f in facts.DATASETS.items() if f.real_noise][0] == "cc152k_precomp"
    assert facts.DATASETS["f30k_precomp"].feature_shape == (36, 2048)
    assert list(facts.DATASETS)[:3] == ["f30k_precomp", "coco_precomp", "cc152k_precomp"]
    assert facts.real_noise_default("CC152K_precomp") and not facts.real_noise_default("f30k_precomp")


def test_every_declaration_is_named_after_its_dataset_and_has_its_own_order():
    orders = []
    for path in sorted(facts.FACTS_DIR.glob("*.json")):
        name, order, declared = facts.read_facts(path)
        assert name == path.stem and "train" in declared.splits
        orders.append(order)
    assert len(set(orders)) == len(orders)


def test_a_misnamed_declaration_is_refused(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"name": "mine_precomp", "splits": {"train": [2, 2]}}))
    with pytest.raises(ValueError, match="named <name>.json"):
        facts.read_facts(path)
