from functools import partial
from pathlib import Path

import pytest
import torch

from helpers_official import official_checkpoint
from ncl.errors import ConfigError
from ncl.methods.pretrained import Pretrained
from ncl.models import SGRAF

DIMS = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 16, "sim_dim": 8}


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(5, 6, 16, generator=g), torch.randint(4, 30, (5, 7), generator=g),
            torch.tensor([7, 5, 3, 6, 2]))


def test_ncr_checkpoint_gives_two_identical_networks(tmp_path: Path) -> None:
    a, b = SGRAF(30, **DIMS).eval(), SGRAF(30, module_name="SGR", **DIMS).eval()
    path = official_checkpoint(tmp_path / "ncr_best.pth.tar", [a, b], module_name="SGR")
    method = Pretrained(30, [partial(SGRAF, **DIMS)], [str(path)]).eval()
    assert method.network_names == ("ncr_best_A", "ncr_best_B")
    images, tokens, lengths = _batch()
    with torch.no_grad():
        for ours, theirs in zip(method.nets, (a, b)):
            torch.testing.assert_close(ours(images, tokens, lengths), theirs(images, tokens, lengths))


def test_checkpoint_without_mask_row_loads_into_mask_model(tmp_path: Path) -> None:
    net = SGRAF(30, **DIMS)
    path = official_checkpoint(tmp_path / "ncr.pth.tar", [net])
    with pytest.warns(UserWarning):
        method = Pretrained(30, [partial(SGRAF, add_mask_token=True, **DIMS)], [str(path)])
    assert method.net.txt_enc.embed.weight.shape[0] == 31


def test_mismatch_names_the_tensor(tmp_path: Path) -> None:
    path = official_checkpoint(tmp_path / "saf.pth.tar", [SGRAF(30, **DIMS)])
    wider = {**DIMS, "embed_size": 32}
    with pytest.raises(ConfigError, match=r"saf.pth.tar.*img_enc\.fc\.weight"):
        Pretrained(30, [partial(SGRAF, **wider)], [str(path)])


def test_lists_must_match(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="equal length"):
        Pretrained(30, [partial(SGRAF, **DIMS)], [])
