"""Networks built from checkpoint files of either format (an ncl ``.ckpt`` of any method or an
official ``.pth.tar``), as :class:`~ncl.methods.pretrained.Pretrained` evaluates them: the
format is detected per file (:mod:`ncl.models.checkpoint`), each network goes into a new
backbone made by the given factory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from torch import nn

from ncl.errors import ConfigError
from ncl.models.checkpoint import (
    DECL_TAU,
    checkpoint_format,
    decl_tau,
    is_decl_checkpoint,
    load_ncl_into,
    load_official_into,
    ncl_state_dicts,
    official_state_dicts,
    read_checkpoint_file,
)

#: ``vocab_size -> backbone`` (a method's ``backbone`` option).
NetworkFactory = Callable[[int], nn.Module]


@dataclass
class LoadedModel:
    """One checkpoint file, loaded: its networks and what its ensemble rule needs."""

    nets: list[nn.Module]
    is_decl: bool
    tau: float  # DECL evidence temperature (its opt.tau, else 0.1)


def load_checkpoint(factory: NetworkFactory, path: str, vocab_size: int) -> LoadedModel:
    """Read ``path`` (either format) and load each of its networks into a new backbone.

    Raises:
        ConfigError: unreadable file, unknown layout, or weights that do not fit the
            backbone (the file, the tensor and both shapes named).
    """
    try:
        ckpt = read_checkpoint_file(path)
        decl = is_decl_checkpoint(ckpt)
        nets = (ncl_networks(factory, ckpt, vocab_size) if checkpoint_format(ckpt) == "ncl"
                else official_networks(factory, ckpt, vocab_size))
        return LoadedModel(nets, decl, decl_tau(ckpt) if decl else DECL_TAU)
    except (ValueError, FileNotFoundError) as err:  # ConfigError is a ValueError
        raise ConfigError(f"model.checkpoints: cannot load {path}: {err}") from None


def ncl_networks(factory: NetworkFactory, ckpt: Mapping, vocab_size: int) -> list[nn.Module]:
    """An ncl checkpoint's ``nets.<k>``, each in a backbone of its own."""
    nets = []
    for k, state in enumerate(ncl_state_dicts(ckpt)):
        net = factory(vocab_size)
        load_ncl_into(net, state, prefix=f"nets.{k}.")
        nets.append(net)
    return nets


def official_networks(factory: NetworkFactory, ckpt: Mapping, vocab_size: int) -> list[nn.Module]:
    """An official checkpoint's networks. A backbone with ``load_official_state`` (e.g.
    VSE-infinity, whose files are not SGRAF's three state dicts) reads its own layout."""
    nets = []
    probe = factory(vocab_size)
    custom = hasattr(probe, "load_official_state")
    for k, state_dicts in enumerate(official_state_dicts(ckpt, parts=None if custom else 3)):
        net = probe if k == 0 else factory(vocab_size)
        if custom:
            net.load_official_state(state_dicts)
        else:
            load_official_into(net, state_dicts)
        nets.append(net)
    return nets
