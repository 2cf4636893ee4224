"""Contracts: SGRAF is a :class:`RetrievalBackbone`; the DataModule is :class:`RetrievalData`."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from ncl.data.contracts import RetrievalData, missing_members, retrieval_data
from ncl.data.datamodule import PrecompDataModule
from ncl.errors import ConfigError
from ncl.evaluation.similarity import sharded_similarity
from ncl.models import SGRAF
from ncl.models.contracts import RetrievalBackbone

METHODS = ("encode_images", "encode_captions", "similarity", "forward")


def incompatibilities(impl: object, protocol: type, optional: bool = True) -> list[str]:
    """Where ``impl``'s methods cannot be called as ``protocol`` declares them: its
    positional-only parameters by position and (with ``optional``) its keyword defaults by name."""
    problems = []
    for name in METHODS:
        want = list(inspect.signature(getattr(protocol, name)).parameters.values())[1:]  # no self
        have = inspect.signature(getattr(impl, name)).parameters.values()
        if any(p.kind is p.VAR_POSITIONAL for p in have):
            n_positional = len(want)
        else:
            n_positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in have)
        required = sum(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                       for p in have)
        n_want = sum(p.kind is p.POSITIONAL_ONLY for p in want)
        if not required <= n_want <= n_positional:
            problems.append(f"{name}: takes {required}..{n_positional} positional, protocol passes {n_want}")
        names = {p.name for p in have if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        var_kw = any(p.kind is p.VAR_KEYWORD for p in have)
        for p in want:
            if optional and p.kind is not p.POSITIONAL_ONLY and p.name not in names and not var_kw:
                problems.append(f"{name}: no keyword {p.name}")
    return problems


@pytest.mark.parametrize("module_name", ["SGR", "SAF"])
def test_sgraf_is_a_retrieval_backbone(make_model: Callable[..., SGRAF], module_name: str) -> None:
    net = make_model(module_name).eval()
    assert isinstance(net, RetrievalBackbone)
    assert not isinstance(nn.Linear(2, 2), RetrievalBackbone)
    assert incompatibilities(net, RetrievalBackbone, optional=False) == []
    # The shapes the protocol documents, through the evaluation path.
    b, r, length = 3, net.num_regions, 7
    images = torch.randn(b, r, net.img_dim)
    tokens = torch.randint(1, net.vocab_size, (b, length))
    lengths = torch.tensor([7, 4, 2])
    img, cap = net.encode_images(images), net.encode_captions(tokens, lengths)
    assert img.shape[:2] == (b, r) and cap.shape[:2] == (b, length) and img.shape[-1] == cap.shape[-1]
    sims = sharded_similarity(net.similarity, img, cap, lengths, shard_size=2)
    assert sims.shape == (b, b)
    torch.testing.assert_close(net(images, tokens, lengths), sims)


def test_sgraf_accepts_optional_image_lengths(make_model: Callable[..., SGRAF]) -> None:
    model = make_model()
    assert incompatibilities(model, RetrievalBackbone) == []
    images = torch.randn(2, model.num_regions, model.img_dim)
    full = torch.full((2,), model.num_regions)
    assert torch.equal(model.encode_images(images, full), model.encode_images(images))
    with pytest.raises(ValueError, match="same region count"):  # SGR/SAF have no region mask
        model.encode_images(images, torch.tensor([model.num_regions, 2]))


def test_datamodule_satisfies_retrieval_data(tiny_root: Path) -> None:
    dm = PrecompDataModule(str(tiny_root), "toy_precomp", batch_size=8)
    assert isinstance(dm, RetrievalData)  # before setup: clean_mask is not evaluated
    assert missing_members(dm, RetrievalData) == []
    dm.setup("fit")
    assert isinstance(dm, RetrievalData) and retrieval_data(SimpleNamespace(datamodule=dm)) is dm
    assert dm.clean_mask.shape == (len(dm.train_pairs()),)


def test_retrieval_data_names_what_is_missing() -> None:
    class Partial:
        batch_size, num_workers = 8, 0

        def train_pairs(self) -> list:
            return []

    with pytest.raises(ConfigError, match=r"NCR/LNC needs an ncl DataModule .* got Partial, which "
                                          r"lacks clean_mask, data_dir, feature_shape"):
        retrieval_data(SimpleNamespace(datamodule=Partial()), "NCR/LNC")
    with pytest.raises(ConfigError, match="got no DataModule"):
        retrieval_data(SimpleNamespace(datamodule=None))
    assert not isinstance(Partial(), RetrievalData)
