"""The package's layout rules (docs/design.md), checked on the source: no import cycles,
Lightning only where it belongs, callbacks that never reach into a method by name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ncl"
#: Where Lightning may be imported (docs/design.md, "Layout").
LIGHTNING_ALLOWED = ("ncl.methods", "ncl.callbacks", "ncl.data.datamodule", "ncl.cli.app", "ncl.cli",
                     "ncl.cli.parser", "ncl.runs.record", "ncl.runs.loggers", "ncl.runs.checkpoints")


def modules() -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of the package."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


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
