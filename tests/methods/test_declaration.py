"""Method declarations (``spec: ClassVar[MethodSpec]``, issue 37): discovery, unique names, and
that what each declares exists (configs, docs pages, recorded regression values)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ncl.methods.declaration import (
    Declared,
    MethodSpec,
    RegressionCase,
    Row,
    _check_unique,
    declarations,
    doc_pages,
    regression_cases,
    rows,
    tiny_cases,
)

REPO = Path(__file__).resolve().parents[2]


def test_discovery_finds_every_method_class_once() -> None:
    found = [d.class_path for d in declarations()]
    assert found == sorted(set(found), key=found.index)  # no class twice
    assert {"ncl.methods.ncr.NCR", "ncl.methods.rcl.RCL", "ncl.methods.crcl.CRCL", "ncl.methods.recon.ReCon",
            "ncl.methods.decl.DECL", "ncl.methods.l2rm.L2RM", "ncl.methods.baselines.Triplet",
            "ncl.methods.baselines.InfoNCE", "ncl.methods.gsc.GSC"} == set(found)


def test_rows_keep_the_benchmark_order() -> None:
    assert list(rows()) == ["rcl", "triplet", "triplet_sum", "triplet_warmup", "infonce", "ncr", "lnc",
                            "crcl", "recon", "recon_no_im", "decl", "l2rm", "gsc", "clean", "clean_sum"]


def test_a_name_declared_twice_fails() -> None:
    one = Declared("a.A", MethodSpec(rows=(Row("x", "X-{}", 1),), tiny={"t": {}}))
    with pytest.raises(ValueError, match=r"row names declared twice.*\['x'\]"):
        _check_unique([one, Declared("b.B", MethodSpec(rows=(Row("x", "Y-{}", 2),)))])
    with pytest.raises(ValueError, match="tiny case"):
        _check_unique([one, Declared("b.B", MethodSpec(tiny={"t": {"a": 1}}))])
    with pytest.raises(ValueError, match="regression case"):
        case = {"r": RegressionCase("c.yaml")}
        _check_unique([Declared("a.A", MethodSpec(regression=case)),
                       Declared("b.B", MethodSpec(regression=case))])


def test_declared_configs_pages_and_regression_values_exist() -> None:
    configs = {p.stem for p in (REPO / "configs").glob("*.yaml")}
    for name, row in rows().items():
        if row.paper_config:
            assert row.paper_config.format(bb="sgr", ds="f30k") in configs, name
        assert "{}" in row.label, name
    recorded = json.loads((REPO / "docs" / "regression" / "layout_rsum.json").read_text())
    for name, case in regression_cases().items():
        assert (REPO / "configs" / case.config).is_file(), name
        assert name in recorded, f"record {name}: scripts/layout_regression.py --cases {name} --write"
    for page, prefixes in doc_pages().items():
        assert (REPO / "docs" / "methods" / page).is_file() and prefixes, page


def test_tiny_cases_are_fresh_copies() -> None:
    first = tiny_cases()
    first["rcl"]["init_args"]["negative_ratio"] = 0.9
    assert tiny_cases()["rcl"] == {"class_path": "ncl.methods.rcl.RCL", "init_args": {"negative_ratio": 0.5}}
