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


def declared_classes_by_hand() -> set[str]:
    """Every class of a module of ``ncl.methods`` that sets ``spec`` itself, found without
    :func:`declarations` (a method added later needs no edit here)."""
    import importlib
    import inspect
    import pkgutil

    import ncl.methods

    found = set()
    for info in pkgutil.iter_modules(ncl.methods.__path__, prefix="ncl.methods."):
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and "spec" in vars(cls):
                found.add(f"{cls.__module__}.{name}")
    return found


def test_discovery_finds_every_method_class_once() -> None:
    found = [d.class_path for d in declarations()]
    assert found == sorted(set(found), key=found.index)  # no class twice
    assert set(found) == declared_classes_by_hand()
    # the methods ncl had when declarations came in are all still declared
    assert {"ncl.methods.ncr.NCR", "ncl.methods.rcl.RCL", "ncl.methods.crcl.CRCL", "ncl.methods.recon.ReCon",
            "ncl.methods.decl.DECL", "ncl.methods.l2rm.L2RM", "ncl.methods.baselines.Triplet",
            "ncl.methods.baselines.InfoNCE"} <= set(found)


def test_rows_keep_the_benchmark_order() -> None:
    """Rows come in their declared ``order``; the rows of the measured benchmark keep the order
    of its tables (a new method's rows may fall anywhere between them)."""
    names = list(rows())
    orders = [rows()[n].order for n in names]
    assert orders == sorted(orders)
    measured = ["rcl", "triplet", "triplet_sum", "triplet_warmup", "infonce", "ncr", "lnc",
                "crcl", "recon", "recon_no_im", "decl", "l2rm", "clean", "clean_sum"]
    assert [n for n in names if n in measured] == measured


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
