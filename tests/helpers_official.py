"""Write checkpoints in the official format (spec 3.4) from small ncl SGRAF models."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ncl.models import SGRAF


def official_checkpoint(path: Path, nets: list[SGRAF], **opt: object) -> Path:
    """Save ``nets`` as RCL/CRCL (one net: ``model``) or NCR (two: ``model_A``/``model_B``)."""
    three = [[n.img_enc.state_dict(), n.txt_enc.state_dict(), n.sim_enc.state_dict()] for n in nets]
    payload: dict[str, object] = {"epoch": 3, "best_rsum": 123.4,
                                  "opt": argparse.Namespace(data_name="synthetic_precomp", **opt)}
    if len(three) == 1:
        payload["model"] = three[0]
    else:
        payload["model_A"], payload["model_B"] = three
    torch.save(payload, path)
    return path


DECL_OPT = {"lambda1": "0.8", "lambda2": "0.1", "mu": 5, "eta": "0.025", "tau": "0.1"}
"""``opt`` fields of a DECL checkpoint (spec 4.6.5; given on the command line, the untyped
ones are strings, spec 7.3)."""


def ncl_checkpoint(path: Path, nets: list[torch.nn.Module],
                   class_path: str = "ncl.methods.rcl.RCL") -> Path:
    """Save ``nets`` as an ncl Lightning checkpoint: network ``k`` under ``nets.<k>.``."""
    state = {f"nets.{k}.{name}": value for k, net in enumerate(nets)
             for name, value in net.state_dict().items()}
    torch.save({"epoch": 0, "global_step": 2, "pytorch-lightning_version": "2.6.0",
                "state_dict": state, "hyper_parameters": {"_class_path": class_path},
                "ncl_training_state": {"labels": torch.ones(4)}}, path)
    return path
