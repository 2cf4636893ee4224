"""The package's layout rules (docs/design.md, "Layout"), checked on the source: imports go
down the layers, no import cycles, Lightning only where it belongs, callbacks that never reach
into a method by name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ncl"
#: Where Lightning may be imported (docs/design.md, "Layout").
LIGHTNING_ALLOWED = ("ncl.methods", "ncl.callbacks", "ncl.data.datamodule", "ncl.cli",
                     "ncl.runs.record", "ncl.runs.loggers", "ncl.runs.checkpoints")

#: The layers of the package, lowest first (docs/design.md, "Layout"): a module may import
#: the modules of its own unit and those of units of a lower rank, never a higher or an equal
#: one (units of one rank are independent of each other). A unit is a sub-package; ``ncl``
#: stands for the modules at the package root, leaf helpers that every layer may use.
RANKS: dict[str, int] = {
    "ncl": 0,                                              # errors, io, progress, console, compose
    "ncl.metrics": 1, "ncl.transport": 1, "ncl.models": 1,  # pure maths and networks
    "ncl.numbers": 1,                                      # published/measured rows as data
    "ncl.data": 2,                                         # loading: splits, noise, DataModules
    "ncl.losses": 3, "ncl.training": 3,                    # losses; per-sample passes, plans
    "ncl.division": 4,                                     # GMM and the methods' divisions
    "ncl.evaluation": 5, "ncl.datatools": 5,               # retrieval evaluation; data tools
    "ncl.runs": 6,                                         # run folders, records, loggers
    "ncl.callbacks": 7,
    "ncl.methods": 8,
    "ncl.cli": 9, "ncl.reproduce": 9,                      # the applications
}


def modules() -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of the package."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports_with_lines(path: Path) -> list[tuple[str, int]]:
    """``(module, line)`` of every ``import`` / ``from ... import`` of the file naming an ncl
    module (at any depth, function-level imports included); ``from a import b`` gives ``a.b``
    as well (``b`` may be a module)."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
    return [(name, line) for name, line in found if name.split(".")[0] == "ncl"]


def unit(module: str) -> str:
    """The layer unit of a module: its sub-package (``ncl.data`` for ``ncl.data.noise``), or
    ``ncl`` for the package itself and the modules at its root."""
    parts = module.split(".")
    candidate = ".".join(parts[:2])
    return candidate if candidate in RANKS else "ncl"


def upward_imports(mods: dict[str, Path], root: Path) -> list[str]:
    """``file:line: importer (unit, rank r) imports target (unit, rank s)`` for every import
    of a module of a higher or equal rank in another unit."""
    names = set(mods)

    def owner(name: str) -> str | None:
        while name and name not in names:
            name = name.rpartition(".")[0]
        return name or None

    found = []
    for name, path in sorted(mods.items()):
        here = unit(name)
        targets = {(owner(target), line) for target, line in imports_with_lines(path)}
        for module, line in sorted(targets, key=lambda t: (t[1], t[0] or "")):
            if module is None:
                continue
            there = unit(module)
            if there != here and RANKS[there] >= RANKS[here]:
                found.append(f"{path.relative_to(root)}:{line}: {name} ({here}, rank {RANKS[here]}) "
                             f"imports {module} ({there}, rank {RANKS[there]})")
    return found


def imported(path: Path) -> set[str]:
    """Every module name an ``import`` or ``from ... import`` of the file names (at any depth,
    function-level imports included), with ``from a import b`` also giving ``a.b``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    """Edges module -> ncl module it imports (a package's own submodules left out)."""
    mods = modules()

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets = {owner(t) for t in imported(path) if t.split(".")[0] == "ncl"}
        graph[name] = {t for t in targets if t and t != name and not t.startswith(name + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_planted_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_every_sub_package_has_a_rank() -> None:
    """A new sub-package must be given its place among the layers (and in docs/design.md)."""
    packages = {".".join(p.relative_to(PACKAGE.parent).parts) for p in PACKAGE.iterdir()
                if (p / "__init__.py").is_file()}
    assert sorted(packages - set(RANKS)) == []
    assert sorted(set(RANKS) - packages - {"ncl"}) == []


def test_the_root_holds_leaf_helpers_only() -> None:
    """The modules at the package root are rank 0: they import nothing of ncl's sub-packages."""
    root = sorted(name for name in modules() if unit(name) == "ncl" and name != "ncl")
    assert root == ["ncl.compose", "ncl.console", "ncl.errors", "ncl.io", "ncl.progress", "ncl.streams"]


def test_upward_import_finder_names_the_file_and_line(tmp_path: Path) -> None:
    package = tmp_path / "ncl"
    (package / "data").mkdir(parents=True)
    (package / "cli").mkdir()
    (package / "data" / "loader.py").write_text("import os\n\nfrom ncl.cli.app import run\n")
    (package / "cli" / "app.py").write_text("from ncl.data.loader import x\n")
    mods = {"ncl.data.loader": package / "data" / "loader.py", "ncl.cli.app": package / "cli" / "app.py"}
    assert upward_imports(mods, tmp_path) == [
        "ncl/data/loader.py:3: ncl.data.loader (ncl.data, rank 2) imports ncl.cli.app (ncl.cli, rank 9)"]


def test_imports_go_down_the_layers() -> None:
    offenders = upward_imports(modules(), PACKAGE.parent)
    assert offenders == [], "imports from a layer above (docs/design.md, 'Layout'):\n" + "\n".join(offenders)


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    assert cycles(import_graph()) == []


def test_lightning_only_where_it_belongs() -> None:
    offenders = sorted(name for name, path in modules().items()
                       if not name.startswith(LIGHTNING_ALLOWED)
                       and any(t.split(".")[0] in ("lightning", "pytorch_lightning")
                               for t in imported(path)))
    assert offenders == []


@pytest.mark.parametrize("name", sorted(n for n in modules() if n.startswith("ncl.callbacks.")))
def test_callbacks_do_not_probe_methods(name: str) -> None:
    """A callback is written against a protocol (ncl/callbacks/protocols.py): no
    ``type: ignore[attr-defined]`` to reach a method's attribute, no ``getattr(pl_module, ...)``."""
    source = modules()[name].read_text()
    assert "ignore[attr-defined]" not in source
    assert "getattr(pl_module" not in source
