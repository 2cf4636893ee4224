"""A method declares itself: what the test matrix, the grid, the docs check and the layout
regression need to know about it, on the method class (issue 37).

A method class sets ``spec: ClassVar[MethodSpec]`` right after its docstring. Nothing else
lists methods: :func:`declarations` imports every module of :mod:`ncl.methods` and collects the
specs, and these read them:

* ``ncl.reproduce.cells.METHODS`` / ``ncl.reproduce.grid.LABELS`` / ``PAPER_CONFIGS``, every
  preset's rows (``grid.config_rows`` for the config presets) and the ``synthetic-small``
  preset's overrides: :class:`Row` (one grid row, e.g. ``lnc``);
* ``ncl.reproduce.records.DIVIDERS``: :attr:`Row.divides`;
* ``tests/tiny_runs.py`` ``METHODS`` (SIGKILL-resume, two-process DDP and bf16 tests):
  :attr:`MethodSpec.tiny`;
* ``scripts/layout_regression.py`` ``CASES``: :attr:`MethodSpec.regression` (each case's
  record is ``docs/regression/<case>.json``);
* ``tests/test_docs_configs.py`` ``PAGES``: :attr:`MethodSpec.page` and
  :attr:`MethodSpec.config_prefixes`.

:func:`check_declarations` refuses what would clash silently: a name or a row ``order``
declared twice. This module imports no Lightning and no torch (the method modules it imports do).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

#: Warm-up epochs of the 14-epoch synthetic benchmark of docs/results.md (SGR*, NCR/LNC, ReCon,
#: DECL, L2RM): the rows' quickstart overrides name it (``ncl.reproduce.cells.WARMUP``).
BENCHMARK_WARMUP = 5

# --- pieces of the layout-regression cases (scripts/layout_regression.py) -----------------------
#: A tiny SGRAF for the ``tiny`` synthetic preset (6 regions x 16 dims).
TINY_SGRAF_ARGS = ("--model.backbone.init_args.img_dim=16", "--model.backbone.init_args.num_regions=6",
                   "--model.backbone.init_args.word_dim=8", "--model.backbone.init_args.embed_size=16",
                   "--model.backbone.init_args.sim_dim=8")
#: The ``tiny`` synthetic preset with 40 % caption noise drawn from seed 0.
TINY_DATA_ARGS = ("--data=ncl.data.datamodule.SyntheticDataModule", "--data.preset=tiny",
                  "--data.batch_size=16", "--data.noise_type=caption", "--data.noise_ratio=0.4",
                  "--data.noise_seed=0", "--data.noise_file=null")
#: Adam at 2e-3 (the configs' rates are for 100 times more data).
TINY_ADAM_ARGS = ("--model.optimizer=torch.optim.Adam", "--model.optimizer.lr=0.002")
#: The usual start of a case on an SGRAF config: tiny backbone, tiny data, Adam 2e-3.
TINY_RUN_ARGS = (*TINY_SGRAF_ARGS, *TINY_DATA_ARGS, *TINY_ADAM_ARGS)


#: The backbones the ``paper`` preset tries a row on unless the row says otherwise (SGRAF's two).
PAPER_BACKBONES = ("sgr", "saf")


@dataclass(frozen=True)
class Row:
    """One row of the grid (``python -m ncl.reproduce``): a method with its switches.

    Attributes:
        name: the row's name (``--methods``, the cells' ids), unique over all methods.
        label: the table label as in the papers; ``{}`` is the backbone (``"NCR-{}"``).
        order: where the row stands among every method's rows (the ``benchmark`` preset's
            order and ``cells.METHODS``'s), unique over all rows; ``None``: after every row
            that declares one, in the order of discovery.
        overrides: CLI overrides on top of ``configs/quickstart.yaml`` (the synthetic
            benchmark); empty for the quickstart's own method.
        warmup: the row has a warm-up the presets set (``--model.warmup_epochs``: 1 in
            ``tiny``, 3 in ``synthetic-small``).
        small: ``synthetic-small``'s further overrides (after its warm-up).
        small_backbones: the backbones the ``synthetic-small`` grid runs the row on
            (``("SGR",)``); empty: the row is not in that grid. The grid's rows follow
            :attr:`order`.
        paper_config: the config stem in ``configs/`` of the ``paper`` presets, ``{bb}`` the
            backbone and ``{ds}`` the dataset (``"ncr_{bb}_{ds}"``); ``None``: none.
        paper_backbones: the backbones (``{bb}``) the ``paper`` preset may run the row on; it
            runs those with a config in ``configs/`` (``ncl.reproduce.grid.paper_rows``). A
            :attr:`paper_config` without ``{bb}`` names one backbone here (IN2R's ``("vse",)``).
        divides: the row's noise detection the grid records (a name for the tables, e.g.
            ``"co-divide"``); ``None`` for a method that does not divide the data.
        detection_after: the ``model.init_args`` option counting the epochs before the first
            detection the grid records (``"warmup_epochs"``; CRCL's ``"freeze_epochs"``).
    """

    name: str
    label: str
    order: int | None = None
    overrides: tuple[str, ...] = ()
    warmup: bool = False
    small: tuple[str, ...] = ()
    small_backbones: tuple[str, ...] = ()
    paper_config: str | None = None
    paper_backbones: tuple[str, ...] = PAPER_BACKBONES
    divides: str | None = None
    detection_after: str = "warmup_epochs"


@dataclass(frozen=True)
class RegressionCase:
    """A four-epoch tiny run of ``scripts/layout_regression.py``: a shipped config in
    ``configs/`` and the ``ncl fit`` arguments on top of it (usually :data:`TINY_RUN_ARGS`
    first)."""

    config: str
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class MethodSpec:
    """What one method class declares (``spec: ClassVar[MethodSpec]``).

    Attributes:
        rows: its grid rows (NCR's class serves ``ncr`` and ``lnc``).
        tiny: tiny test cases, name -> ``model.init_args`` (with the class's ``class_path``,
            ``tests/tiny_runs.py`` ``METHODS``: SIGKILL-resume, two-process DDP and bf16).
            Names are unique over all methods.
        regression: layout-regression cases, name -> case; unique over all methods.
        page: its page in ``docs/methods/`` (``"ncr_lnc.md"``), ``None`` if it has none.
        config_prefixes: the config names in ``configs/`` the page must name (``"ncr_"``).
    """

    rows: tuple[Row, ...] = ()
    tiny: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    regression: Mapping[str, RegressionCase] = field(default_factory=dict)
    page: str | None = None
    config_prefixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Declared:
    """A method class's spec with the class's ``class_path`` (``ncl.methods.ncr.NCR``)."""

    class_path: str
    spec: MethodSpec


def method_modules() -> list[ModuleType]:
    """Every module of :mod:`ncl.methods`, imported, in name order."""
    import ncl.methods

    names = sorted(info.name for info in pkgutil.iter_modules(ncl.methods.__path__))
    return [importlib.import_module(f"ncl.methods.{name}") for name in names]


def declarations() -> list[Declared]:
    """The specs of every method class in :mod:`ncl.methods`, by module name and then in the
    order the module defines its classes.

    Only a spec set on the class itself counts (``vars(cls)``): a subclass that declares
    nothing does not repeat its parent's rows.

    Raises:
        ValueError: what :func:`check_declarations` finds.
    """
    found: list[Declared] = []
    for module in method_modules():
        for obj in vars(module).values():  # definition order
            spec = vars(obj).get("spec") if isinstance(obj, type) else None
            if isinstance(spec, MethodSpec) and obj.__module__ == module.__name__:
                found.append(Declared(f"{module.__name__}.{obj.__qualname__}", spec))
    check_declarations(found)
    return found


def check_declarations(declared: list[Declared]) -> None:
    """Raise one ValueError naming every clash between ``declared``'s declarations.

    It names: a row, tiny case or regression case name declared twice; two rows with the same
    :attr:`Row.order` (both rows, with their classes); a :attr:`Row.paper_config` without
    ``{bb}`` that does not name exactly one :attr:`Row.paper_backbones`. (A random-stream id
    declared twice fails earlier, when the second module is imported: :mod:`ncl.streams`.)
    """
    problems: list[str] = []
    for kind, names in (("row", [r.name for d in declared for r in d.spec.rows]),
                        ("tiny case", [n for d in declared for n in d.spec.tiny]),
                        ("regression case", [n for d in declared for n in d.spec.regression])):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            problems.append(f"{kind} names declared twice in ncl.methods: {twice}")
    by_order: dict[int, list[str]] = {}
    for d in declared:
        for r in d.spec.rows:
            if r.order is not None:
                by_order.setdefault(r.order, []).append(f"{r.name!r} ({d.class_path})")
    problems += [f"rows {' and '.join(names)} both declare order {order}: orders are unique "
                 "(or leave order out: the row then follows every declared one)"
                 for order, names in sorted(by_order.items()) if len(names) > 1]
    problems += [f"row {r.name!r} ({d.class_path}): paper_config {r.paper_config!r} names no "
                 f"{{bb}}, so paper_backbones names its one backbone (got {r.paper_backbones})"
                 for d in declared for r in d.spec.rows
                 if r.paper_config and "{bb}" not in r.paper_config and len(r.paper_backbones) != 1]
    if problems:
        raise ValueError("; ".join(problems))


def rows() -> dict[str, Row]:
    """Every grid row, name -> row, in :attr:`Row.order`; rows without one follow, in the
    order of discovery."""
    every = [r for d in declarations() for r in d.spec.rows]
    ordered = sorted(every, key=lambda r: (r.order is None, r.order or 0))  # stable: discovery
    return {r.name: r for r in ordered}


def tiny_cases() -> dict[str, dict[str, Any]]:
    """Every tiny test case, name -> ``{"class_path", "init_args"}`` (fresh copies)."""
    return {name: {"class_path": d.class_path, "init_args": dict(init_args)}
            for d in declarations() for name, init_args in d.spec.tiny.items()}


def regression_cases() -> dict[str, RegressionCase]:
    """Every layout-regression case, name -> case."""
    return {name: case for d in declarations() for name, case in d.spec.regression.items()}


def doc_pages() -> dict[str, tuple[str, ...]]:
    """``docs/methods/`` page -> the config-name prefixes it documents."""
    return {d.spec.page: d.spec.config_prefixes for d in declarations() if d.spec.page}
