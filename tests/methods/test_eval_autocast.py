"""``model.eval_autocast`` on a method: off, the evaluation's matrices are bit-identical to the
float32 scorer's (what every run computed before the option); on, the similarity runs under
autocast in the trainer's low dtype and moves the scores a little, keeping nearly every top-1;
a ``32-true`` trainer refuses it at setup."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import Tensor, nn

from ncl.errors import ConfigError
from ncl.evaluation.metric import Embeddings, score_networks
from ncl.evaluation.nonfinite import EvalSite
from ncl.methods.rcl import RCL
from ncl.models import SGRAF

DIMS = {"img_dim": 16, "num_regions": 6, "word_dim": 8, "embed_size": 32, "sim_dim": 16}
SITE = EvalSite("test")


def method(eval_autocast: bool, precision: str) -> RCL:
    """A tiny RCL (eval mode) attached to a stand-in trainer of ``precision``."""
    torch.manual_seed(0)
    m = RCL(50, lambda vocab: SGRAF(vocab, **DIMS), eval_autocast=eval_autocast).eval()
    m._trainer = SimpleNamespace(precision=precision, datamodule=None)
    return m


def embeddings(net: nn.Module, n_img: int = 24, per_image: int = 5) -> Embeddings:
    """Encoded random images and captions of 4-9 tokens, as the evaluation stores them."""
    gen = torch.Generator().manual_seed(1)
    images = torch.randn(n_img, DIMS["num_regions"], DIMS["img_dim"], generator=gen)
    n_cap = n_img * per_image
    lengths = torch.randint(4, 10, (n_cap,), generator=gen)
    tokens = torch.randint(4, 50, (n_cap, 9), generator=gen) * (torch.arange(9) < lengths[:, None])
    with torch.no_grad():
        img, cap = net.encode_images(images).float(), net.encode_captions(tokens, lengths).float()
    return Embeddings(lambda k: img, lambda k: cap, lengths)


def float32_scores(m: RCL, emb: Embeddings) -> Tensor:
    """The scorer every run used before the option: ``score_networks`` outside any context."""
    return score_networks([("net", m.net.similarity)], emb, 1000, torch.device("cpu"), SITE)["net"]


@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
def test_off_is_bit_identical_to_the_float32_scorer(precision: str) -> None:
    m = method(False, precision)
    emb = embeddings(m.net)
    assert torch.equal(m.scored(emb, SITE)["net"], float32_scores(m, emb))


def test_on_computes_the_similarity_under_bf16_autocast() -> None:
    m = method(True, "bf16-mixed")
    emb = embeddings(m.net)
    seen: list[tuple[bool, torch.dtype]] = []
    similarity = m.net.similarity

    def spy(*args: Tensor) -> Tensor:
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return similarity(*args)

    m.net.similarity = spy
    on = m.scored(emb, SITE)["net"]
    m.net.similarity = similarity
    assert seen and all(state == (True, torch.bfloat16) for state in seen)
    assert on.dtype == torch.float32  # the score itself stays float32 (docs/precision.md)
    ref = float32_scores(m, emb)
    diff = (on - ref).abs().max().item()
    assert 0 < diff < 0.05  # bf16 products: moved, a little
    # Random weights leave near-ties, so a few top-1 change; only where float32's own score of
    # the new pick is within twice the largest score change of its best (a near-tie).
    for dim in (1, 0):  # i2t (rows), t2i (columns)
        assert (on.argmax(dim) == ref.argmax(dim)).double().mean() >= 0.75
        picked = ref.gather(dim, on.argmax(dim, keepdim=True))
        assert bool((ref.amax(dim, keepdim=True) - picked <= 2 * diff).all())


def test_on_under_32_true_is_refused_at_setup_not_at_predict() -> None:
    with pytest.raises(ConfigError, match=r"trainer.precision 32-true has none"):
        method(True, "32-true").setup("test")
    method(True, "32-true").setup("predict")  # predict computes no evaluation similarity
    method(True, "bf16-mixed").setup("fit")
    method(False, "32-true").setup("fit")


def test_not_stored_in_the_checkpoint_so_ncl_test_can_choose() -> None:
    """LightningCLI puts a checkpoint's stored hyperparameters over the command line's: a
    stored ``eval_autocast`` would decide every later ``ncl test`` of that checkpoint."""
    m = method(True, "bf16-mixed")
    assert m.eval_autocast is True and "eval_autocast" not in m.hparams

