"""The recomputing autograd Function for local similarity vectors (ncl.models.local_similarity)."""

from __future__ import annotations

import torch

from ncl.models.layers import l2norm
from ncl.models.local_similarity import LocalSimilarity, local_similarity


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
    assert torch.autograd.gradcheck(LocalSimilarity.apply, tuple(_inputs()))


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
