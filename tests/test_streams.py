"""Random-stream ids are declared once each (:mod:`ncl.streams`, issue 37).

To pick a free id for a new method: ``pytest tests/test_streams.py -rP`` prints the
taken ids and their owners.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import ncl
from ncl.streams import StreamTaken, declare_stream, taken

PACKAGE = Path(ncl.__file__).resolve().parent


def every_module() -> list[str]:
    """The dotted names of every module of ncl (``__main__`` modules aside: they run)."""
    names = [info.name for info in pkgutil.walk_packages([str(PACKAGE)], prefix="ncl.")]
    return sorted(n for n in names if not n.endswith("__main__"))


def stream_assignments() -> list[tuple[str, int, str, ast.expr]]:
    """``(file, line, name, value)`` of every module-level ``X_STREAM = ...`` in ncl."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    names = target.elts if isinstance(target, ast.Tuple) else [target]
                    found += [(str(path.relative_to(PACKAGE.parent)), node.lineno, n.id, node.value)
                              for n in names if isinstance(n, ast.Name) and n.id.endswith("_STREAM")]
    return found


def test_every_stream_constant_is_declared_and_ids_are_unique() -> None:
    for name in every_module():
        importlib.import_module(name)
    owners = taken()
    print("taken random-stream ids (pick a free one for a new method):")
    for stream, owner in owners.items():
        print(f"  {stream:3d}  {owner}")
    assignments = stream_assignments()
    assert len(assignments) >= 15  # plans 4, samplers 3, augment, CRCL 2, ReCon, DECL, L2RM 3
    for file, line, name, value in assignments:
        declared = (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                    and value.func.id == "declare_stream")
        assert declared, f"{file}:{line}: {name} must be declare_stream(<id>, <owner>)"
    # every imported *_STREAM constant holds a declared id, and no two owners share one
    for name in every_module():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if attr.endswith("_STREAM") and isinstance(value, int):
                assert value in owners, f"{name}.{attr} = {value} was never declared"
    assert len(owners) == len(set(owners.values()))


def test_the_published_ids_never_change() -> None:
    """Seeds (and every published number) depend on the ids."""
    from ncl.callbacks.self_refining import REINIT_STREAM
    from ncl.data.augment import AUGMENT_STREAM
    from ncl.data.samplers import GLOBAL_TORCH_STREAM, METHOD_STREAM, SHUFFLE_STREAM
    from ncl.methods import crcl, decl, l2rm, recon
    from ncl.training import plans

    assert (plans.WARMUP_STREAM, plans.LABELLED_STREAM, plans.UNLABELLED_STREAM,
            plans.DIVISION_STREAM) == (1, 2, 3, 4)
    assert (SHUFFLE_STREAM, GLOBAL_TORCH_STREAM, METHOD_STREAM, AUGMENT_STREAM) == (11, 12, 13, 14)
    assert (REINIT_STREAM, crcl.ESTIMATE_STREAM, recon.DIVISION_STREAM, decl.PREDICTION_STREAM) == (21, 22, 31, 41)
    assert (l2rm.DIVISION_STREAM, l2rm.QUEUE_STREAM, l2rm.KEY_STREAM) == (51, 52, 53)


def test_a_taken_id_fails_and_a_repeat_by_its_owner_does_not() -> None:
    assert declare_stream(1, "plans.warmup") == 1  # a module imported again
    with pytest.raises(StreamTaken, match="taken by 'l2rm.division'"):
        declare_stream(51, "newmethod.division")
    for bad in (0, -3, 2.0, True):
        with pytest.raises(ValueError, match="positive int"):
            declare_stream(bad, "newmethod.x")  # type: ignore[arg-type]
    assert "newmethod.division" not in taken().values()
