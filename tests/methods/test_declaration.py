"""Method declarations (``spec: ClassVar[MethodSpec]``, issue 37): discovery, unique names, and
that what each declares exists (configs, docs pages, recorded regression values)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncl.methods.declaration import (
    Declared,
    MethodSpec,
    RegressionCase,
    Row,
    check_declarations,
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
    declared = [o for o in orders if o is not None]
    assert orders[:len(declared)] == sorted(declared)  # rows without an order come last
    measured = ["rcl", "triplet", "triplet_sum", "triplet_warmup", "infonce", "ncr", "lnc",
                "crcl", "recon", "recon_no_im", "decl", "l2rm", "clean", "clean_sum"]
    assert [n for n in names if n in measured] == measured


def test_a_name_declared_twice_fails() -> None:
    one = Declared("a.A", MethodSpec(rows=(Row("x", "X-{}", 1),), tiny={"t": {}}))
    with pytest.raises(ValueError, match=r"row names declared twice.*\['x'\]"):
        check_declarations([one, Declared("b.B", MethodSpec(rows=(Row("x", "Y-{}", 2),)))])
    with pytest.raises(ValueError, match="tiny case"):
        check_declarations([one, Declared("b.B", MethodSpec(tiny={"t": {"a": 1}}))])
    with pytest.raises(ValueError, match="regression case"):
        case = {"r": RegressionCase("c.yaml")}
        check_declarations([Declared("a.A", MethodSpec(regression=case)),
                            Declared("b.B", MethodSpec(regression=case))])
    check_declarations([one, Declared("b.B", MethodSpec(rows=(Row("y", "Y-{}", 2),), tiny={"u": {}}))])


def test_two_rows_with_one_order_fail_naming_both() -> None:
    first = Declared("a.A", MethodSpec(rows=(Row("x", "X-{}", 130), Row("x2", "X2-{}", 10))))
    second = Declared("b.B", MethodSpec(rows=(Row("y", "Y-{}", 130),)))
    with pytest.raises(ValueError, match=r"rows 'x' \(a\.A\) and 'y' \(b\.B\) both declare order 130"):
        check_declarations([first, second])
    # within one class as well; rows without an order never clash
    with pytest.raises(ValueError, match=r"'x' \(a\.A\) and 'x3' \(a\.A\) both declare order 130"):
        check_declarations([Declared("a.A", MethodSpec(rows=(Row("x", "X-{}", 130), Row("x3", "X-{}", 130))))])
    check_declarations([first, Declared("b.B", MethodSpec(rows=(Row("y", "Y-{}"), Row("z", "Z-{}"))))])


def test_a_paper_config_without_a_backbone_names_one() -> None:
    def declared(row: Row) -> list[Declared]:
        return [Declared("a.A", MethodSpec(rows=(row,)))]

    with pytest.raises(ValueError, match=r"row 'x' \(a\.A\): paper_config 'x_vse_\{ds\}' names no \{bb\}"):
        check_declarations(declared(Row("x", "X-{}", 1, paper_config="x_vse_{ds}")))  # sgr and saf
    check_declarations(declared(Row("x", "X-{}", 1, paper_config="x_vse_{ds}", paper_backbones=("vse",))))
    check_declarations(declared(Row("x", "X-{}", 1, paper_config="x_{bb}_{ds}")))


def test_rows_without_an_order_follow_the_declared_ones_in_discovery_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import ncl.methods.declaration as declaration

    fake = [Declared("a.A", MethodSpec(rows=(Row("late", "L-{}"), Row("second", "S-{}", 20)))),
            Declared("b.B", MethodSpec(rows=(Row("later", "M-{}"), Row("first", "F-{}", 10))))]
    monkeypatch.setattr(declaration, "declarations", lambda: fake)
    assert list(declaration.rows()) == ["first", "second", "late", "later"]


def test_a_stream_id_taken_twice_fails_at_import() -> None:
    """The check of random streams is :mod:`ncl.streams`'s: a method module that declares a
    taken id fails when it is imported (so before any declaration is read)."""
    import ncl.methods.l2rm  # noqa: F401  (declares 51-53)
    from ncl.streams import StreamTaken, declare_stream

    with pytest.raises(StreamTaken, match="random stream 51 of 'fake.division' is taken"):
        declare_stream(51, "fake.division")  # L2RM's


def test_declared_configs_pages_and_regression_values_exist() -> None:
    configs = {p.stem for p in (REPO / "configs").glob("*.yaml")}
    for name, row in rows().items():
        if row.paper_config:
            assert any(row.paper_config.format(bb=bb, ds="f30k") in configs for bb in row.paper_backbones), name
        assert "{}" in row.label, name
    for name, case in regression_cases().items():
        assert (REPO / "configs" / case.config).is_file(), name
        assert (REPO / "docs" / "regression" / f"{name}.json").is_file(), \
            f"record {name}: python scripts/layout_regression.py --cases {name} --record"
    for page, prefixes in doc_pages().items():
        assert (REPO / "docs" / "methods" / page).is_file() and prefixes, page


def test_tiny_cases_are_fresh_copies() -> None:
    first = tiny_cases()
    first["rcl"]["init_args"]["negative_ratio"] = 0.9
    assert tiny_cases()["rcl"] == {"class_path": "ncl.methods.rcl.RCL", "init_args": {"negative_ratio": 0.5}}
