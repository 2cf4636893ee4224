"""The recomputing autograd Function for local similarity vectors (ncl.models.local_similarity)."""

from __future__ import annotations

import torch

from ncl.models.layers import l2norm
from ncl.models.local_similarity import local_similarity


def _inputs(dtype: torch.dtype = torch.float64, zero_image: bool = False):
    gen = torch.Generator().manual_seed(0)
    attn = torch.softmax(torch.randn(3, 4, 5, generator=gen, dtype=dtype), dim=-1)
    img = torch.randn(3, 5, 6, generator=gen, dtype=dtype)
    if zero_image:
        img[1] = 0.0  # attended context of exactly zero norm
    words = torch.randn(4, 6, generator=gen, dtype=dtype)
    weight = torch.randn(2, 6, generator=gen, dtype=dtype)
    bias = torch.randn(2, generator=gen, dtype=dtype)
    return [t.requires_grad_() for t in (attn, img, words, weight, bias)]


def _plain(attn, img, words, weight, bias):
    context = l2norm(torch.bmm(attn, img), dim=-1)
    return torch.nn.functional.linear((context - words).pow(2), weight, bias)


def test_forward_equals_plain_expression():
    inputs = _inputs(torch.float32)
    torch.testing.assert_close(local_similarity(*inputs), _plain(*inputs))


def test_gradcheck():
    assert torch.autograd.gradcheck(local_similarity, tuple(_inputs()))


def test_backward_equals_autograd_of_plain_expression_with_zero_context():
    ours, plain = _inputs(zero_image=True), _inputs(zero_image=True)
    grad = torch.randn(3, 4, 2, dtype=torch.float64)
    local_similarity(*ours).backward(grad)
    _plain(*plain).backward(grad)
    for mine, ref in zip(ours, plain):
        assert torch.isfinite(mine.grad).all()
        torch.testing.assert_close(mine.grad, ref.grad)


def test_no_grad_call_does_not_modify_inputs():
    inputs = [t.detach() for t in _inputs()]
    before = [t.clone() for t in inputs]
    with torch.no_grad():
        local_similarity(*inputs)
    for now, then in zip(inputs, before):
        assert torch.equal(now, then)


def test_bf16_autocast_on_cpu_runs_and_agrees_with_float32() -> None:
    """Under CPU autocast (``bf16-mixed``) forward and backward run (they used to raise: a
    CUDA-bound ``custom_bwd`` mixed bfloat16 and float32) and agree with float32 to bf16's
    precision: outputs and gradients within 3 % of their largest magnitude."""
    torch.manual_seed(0)
    base = [t.float().detach() for t in _inputs()]
    ref = [t.clone().requires_grad_() for t in base]
    low = [t.clone().requires_grad_() for t in base]
    grad = torch.randn(3, 4, 2)
    out_ref = local_similarity(*ref)
    out_ref.backward(grad)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out_low = local_similarity(*low)
    assert out_low.dtype == torch.bfloat16
    out_low.float().backward(grad)
    scale = out_ref.abs().max()
    assert (out_low.float() - out_ref).abs().max() <= 0.03 * scale
    for mine, exact in zip(low, ref):
        assert mine.grad is not None and mine.grad.dtype == torch.float32
        assert (mine.grad - exact.grad).abs().max() <= 0.03 * exact.grad.abs().max()
