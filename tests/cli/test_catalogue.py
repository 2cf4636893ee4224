"""``ncl fit --help`` lists every method and every DataModule ncl ships (issue 37): the
catalogue finds them wherever they are defined in :mod:`ncl.methods` and :mod:`ncl.data`
(the video DataModules of :mod:`ncl.data.video` included), not only in one module."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import pkgutil

import lightning as L
import pytest

import ncl.data
import ncl.methods
from ncl.cli import main
from ncl.cli.parser import catalogue
from ncl.methods.base import RetrievalMethod


def defined_in(package: object, base: type) -> set[str]:
    """``module.Class`` of every public subclass of ``base`` defined in a module of ``package``,
    found by reading each module (independently of how the catalogue finds them)."""
    found = set()
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if (cls.__module__ == module.__name__ and issubclass(cls, base) and cls is not base
                    and not name.startswith("_")):
                found.add(f"{module.__name__}.{name}")
    return found


def listed(text: str, heading: str) -> set[str]:
    """The class paths of one section of the catalogue (two-space indented lines)."""
    section = text.split(heading, 1)[1].split("\n\n", 1)[0]
    return {line.strip() for line in section.splitlines() if line.startswith("  ncl.")}


def test_the_catalogue_lists_every_method_and_every_datamodule() -> None:
    text = catalogue()
    methods = defined_in(ncl.methods, RetrievalMethod)
    datamodules = defined_in(ncl.data, L.LightningDataModule)
    assert {"ncl.methods.rcl.RCL", "ncl.methods.ncr.NCR", "ncl.methods.l2rm.L2RM"} <= methods
    assert {"ncl.data.video.VideoDataModule", "ncl.data.video.VideoSyntheticDataModule",
            "ncl.data.datamodule.SyntheticDataModule"} <= datamodules
    assert listed(text, "methods (--model") == methods
    assert listed(text, "DataModules (--data):") == datamodules


@pytest.mark.parametrize("subcommand", ["fit", "predict"])
def test_help_shows_the_catalogue(subcommand: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        main([subcommand, "--help"])
    assert exit_.value.code == 0
    shown = listed(out.getvalue(), "DataModules (--data):")
    assert {"ncl.data.video.VideoDataModule", "ncl.data.video.VideoSyntheticDataModule",
            "ncl.data.datamodule.PrecompDataModule"} <= shown
