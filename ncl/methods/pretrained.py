"""Evaluate official pretrained checkpoints (NCR, RCL, CRCL, DECL ``.pth.tar``) with ncl.

``ncl test --config configs/eval_official_f30k.yaml`` loads each checkpoint into an SGRAF
built from the matching backbone entry, evaluates every network alone and, when there are
several (NCR's A and B, or separately trained SGR and SAF: "SGRAF"), their averaged
similarity matrix (spec 4.2.9, 4.3.5, 5.4). The official code does not need to be installed.
"""

from __future__ import annotations

from pathlib import Path

from torch import Tensor, nn

from ncl.errors import ConfigError
from ncl.methods.base import BackboneFactory, RetrievalMethod
from ncl.models.checkpoint import load_official_into, official_state_dicts, read_official_checkpoint


class Pretrained(RetrievalMethod):
    """Evaluation-only method over official checkpoints.

    Args:
        vocab_size: linked from the DataModule.
        backbones: one backbone factory per checkpoint (e.g. an SGR and an SAF SGRAF).
        checkpoints: official ``.pth.tar`` files, in the same order as ``backbones``. An NCR
            checkpoint contributes two networks (``model_A``, ``model_B``).
        eval_shard_size: images/captions per block of the similarity computation.
    """

    def __init__(self, vocab_size: int, backbones: list[BackboneFactory], checkpoints: list[str],
                 eval_shard_size: int = 1000) -> None:
        if not checkpoints or len(backbones) != len(checkpoints):
            raise ConfigError(f"model.backbones ({len(backbones)}) and model.checkpoints "
                              f"({len(checkpoints)}) must be non-empty lists of equal length")
        super().__init__(vocab_size, backbones[0], eval_shard_size=eval_shard_size)
        nets, names = [], []
        for factory, path in zip(backbones, checkpoints):
            try:
                networks = official_state_dicts(read_official_checkpoint(path))
                for k, three in enumerate(networks):
                    net = factory(vocab_size)
                    load_official_into(net, three)
                    nets.append(net)
                    names.append(Path(path).name.split(".")[0] + (f"_{'AB'[k]}" if len(networks) > 1 else ""))
            except (ValueError, FileNotFoundError) as err:
                raise ConfigError(f"model.checkpoints: cannot load {path}: {err}") from None
        self.nets = nn.ModuleList(nets)
        self.network_names = tuple(names)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        raise ConfigError("ncl.methods.pretrained.Pretrained only evaluates: use `ncl test` or "
                          "`ncl validate`")

    def configure_optimizers(self) -> None:
        return None
