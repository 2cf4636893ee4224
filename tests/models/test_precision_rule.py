"""The precision rule of issue 28 (docs/precision.md): under bf16 autocast every backbone's
score is float32 (the matrix products before it run in bf16), and float32 runs are untouched.
Before issue 28 SGRAF's ``w_e . vec + b_e`` came out in bfloat16 under autocast (its
rounding, about 0.002-0.004, is 0.04-0.08 in ``S / tau`` at tau 0.05)."""

from __future__ import annotations

import pytest
import torch

from ncl.cli.input_checks import precision_note
from ncl.models.gated import GatedVideoText
from ncl.models.sgraf import SGRAF
from ncl.models.vse_infinity import VSEInfinity

VOCAB = 30


def batch(n: int = 4, regions: int = 6, dim: int = 16) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    lengths = torch.tensor([5, 3, 4, 2][:n])
    tokens = torch.randint(1, VOCAB, (n, 5), generator=gen) * (torch.arange(5) < lengths[:, None])
    return torch.randn(n, regions, dim, generator=gen), tokens, lengths


MODELS = {
    "sgr_chunked": lambda: SGRAF(VOCAB, "SGR", img_dim=16, num_regions=6, word_dim=8, embed_size=16,
                                 sim_dim=8, similarity_strategy="chunked"),
    "sgr_loop": lambda: SGRAF(VOCAB, "SGR", img_dim=16, num_regions=6, word_dim=8, embed_size=16,
                              sim_dim=8, similarity_strategy="loop"),
    "saf": lambda: SGRAF(VOCAB, "SAF", img_dim=16, num_regions=6, word_dim=8, embed_size=16,
                         sim_dim=8, similarity_strategy="chunked"),
    "vse_infinity": lambda: VSEInfinity(VOCAB, img_dim=16, word_dim=8, embed_size=16),
    "gated_video": lambda: GatedVideoText(VOCAB, img_dim=16, num_regions=6, word_dim=8,
                                          text_dim=16, embed_size=16),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_score_is_float32_under_bf16_autocast(name: str) -> None:
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    images, tokens, lengths = batch()
    with torch.no_grad():
        exact = model(images, tokens, lengths)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = model(images, tokens, lengths)
    assert exact.dtype == torch.float32 and mixed.dtype == torch.float32
    # bf16 matrix products upstream: close to float32, not equal (the test would not notice
    # autocast being off altogether otherwise)
    assert not torch.equal(mixed, exact)
    assert (mixed - exact).abs().max() < 0.05


@pytest.mark.parametrize("precision, device, native, warns", [
    ("bf16-mixed", "cpu", False, True), ("bf16-true", "cpu", False, True),
    ("bf16-mixed", "cpu", True, False), ("bf16-mixed", "cuda", False, False),
    ("32-true", "cpu", False, False), ("16-mixed", "cuda", False, False), (None, "cpu", False, False)])
def test_precision_note_only_for_emulated_bf16(precision: str | None, device: str, native: bool,
                                               warns: bool) -> None:
    note = precision_note(precision, device, native)
    assert (note is not None) == warns
    if warns:
        assert precision in note and "32-true" in note
