"""SGRAF backbones (SGR/SAF) and loading of official checkpoints (spec section 3)."""

from ncl.models.checkpoint import (
    load_official_into,
    official_options,
    official_state_dicts,
    read_official_checkpoint,
)
from ncl.models.encoders import EncoderImage, EncoderText
from ncl.models.gpo import GPO
from ncl.models.layers import l1norm, l2norm
from ncl.models.sgraf import SGRAF
from ncl.models.similarity import EncoderSimilarity
from ncl.models.vse_infinity import VSEInfinity

__all__ = [
    "SGRAF",
    "EncoderImage",
    "EncoderSimilarity",
    "EncoderText",
    "GPO",
    "VSEInfinity",
    "l1norm",
    "l2norm",
    "load_official_into",
    "official_options",
    "official_state_dicts",
    "read_official_checkpoint",
]
