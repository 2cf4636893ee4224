"""The chunked path's grouped region-word products (``score_groups``) change no number."""

from __future__ import annotations

import pytest
import torch

from ncl.models import similarity
from ncl.models.similarity import score_groups


def test_score_groups_respects_budget_and_order():
    counts = [30, 28, 28, 20, 10, 4]
    groups = score_groups(counts, n_rows=10, budget_bytes=10 * 4 * 60)  # 60 columns per group
    assert [i for g in groups for i in g] == list(range(len(counts)))  # all, in order
    assert groups == [[0, 1], [2, 3, 4], [5]]
    assert all(sum(counts[i] for i in g) <= 60 for g in groups)
    # A chunk wider than the budget still gets a group of its own.
    assert score_groups([100, 5], n_rows=10, budget_bytes=40) == [[0], [1]]


@pytest.mark.parametrize("module_name", ["SGR", "SAF"])
@pytest.mark.parametrize("budget_columns", [1, 7, 10_000])  # one chunk per product .. all
def test_grouped_products_equal_loop_with_input_gradients(make_model, embeddings, monkeypatch,
                                                          module_name, budget_columns):
    """Train mode without dropout, float64: scores and the gradients of the parameters *and of
    the image and caption embeddings* (which flow back through the split product) agree."""
    img, cap, lengths = (x.double() if x.is_floating_point() else x for x in embeddings)
    rows = img.shape[0] * img.shape[1]
    monkeypatch.setattr(similarity, "SCORE_BUDGET_BYTES", rows * 4 * budget_columns)
    results = []
    for strategy in ("loop", "chunked"):
        model = make_model(module_name, dropout=0.0).double().train()
        img_in, cap_in = img.clone().requires_grad_(), cap.clone().requires_grad_()
        scores = model.sim_enc(img_in, cap_in, lengths, strategy, 2)
        weights = torch.linspace(-1, 1, scores.numel(), dtype=scores.dtype).view_as(scores)
        (scores * weights).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.sim_enc.named_parameters()}
        results.append((scores.detach(), img_in.grad, cap_in.grad, grads))
    (s_loop, gi_loop, gc_loop, g_loop), (s_chunk, gi_chunk, gc_chunk, g_chunk) = results
    torch.testing.assert_close(s_chunk, s_loop, rtol=0, atol=1e-10)
    assert gi_loop.abs().max() > 0 and gc_loop.abs().max() > 0
    torch.testing.assert_close(gi_chunk, gi_loop, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(gc_chunk, gc_loop, rtol=1e-8, atol=1e-10)
    for name in g_loop:
        torch.testing.assert_close(g_chunk[name], g_loop[name], rtol=1e-8, atol=1e-10,
                                   msg=f"gradient of {name}")
