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
