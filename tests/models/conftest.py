"""Fixtures for the SGRAF tests: tiny models with non-trivial weights and inputs."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from ncl.models import SGRAF

TINY = {"img_dim": 10, "word_dim": 6, "embed_size": 12, "sim_dim": 8, "num_regions": 5}
VOCAB = 40


def randomize_(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give every parameter and BatchNorm running statistic a random, non-default value.

    Non-zero biases matter: the batched SGR path drops bias terms that cancel in a softmax,
    which only a test with biases can check.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
        for module in model.modules():
            if isinstance(module, nn.BatchNorm1d):
                module.running_mean.copy_(torch.randn(module.running_mean.shape, generator=gen))
                module.running_var.copy_(torch.rand(module.running_var.shape, generator=gen) + 0.5)
    return model


@pytest.fixture
def make_model() -> Callable[..., SGRAF]:
    """Factory for a tiny randomised SGRAF; keyword arguments override the defaults."""

    def factory(module_name: str = "SGR", seed: int = 0, **overrides: object) -> SGRAF:
        torch.manual_seed(seed)
        options = {**TINY, **overrides}
        return randomize_(SGRAF(VOCAB, module_name, **options), seed)

    return factory


@pytest.fixture
def embeddings() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random unit-norm region and word embeddings with variable, unsorted lengths.

    Returns ``img_emb (6, 5, 12)``, ``cap_emb (7, 9, 12)`` (junk beyond each length, which
    must be ignored) and ``lengths (7,)``.
    """
    gen = torch.Generator().manual_seed(1)
    img = torch.nn.functional.normalize(torch.randn(6, 5, 12, generator=gen), dim=-1)
    cap = torch.nn.functional.normalize(torch.randn(7, 9, 12, generator=gen), dim=-1)
    lengths = torch.tensor([3, 7, 2, 5, 7, 1, 4])
    return img, cap, lengths
