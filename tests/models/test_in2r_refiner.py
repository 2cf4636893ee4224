"""IN2R's GraphRefiner: shapes, parameters (no unused edge network), and forwards computed by
hand from the official ``GraphRefiner.forward`` (attention over the neighbours, residual,
layer norm, mean, l2 norm)."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.models.in2r_refiner import GraphRefiner


def set_linear(layer: torch.nn.Linear, weight: torch.Tensor | float, bias: float = 0.0) -> None:
    with torch.no_grad():
        if isinstance(weight, torch.Tensor):
            layer.weight.copy_(weight)
        else:
            layer.weight.fill_(weight)
        layer.bias.fill_(bias)


def layer_norm(x: list[float], eps: float = 1e-5) -> list[float]:
    mean = sum(x) / len(x)
    var = sum((v - mean) ** 2 for v in x) / len(x)
    return [(v - mean) / math.sqrt(var + eps) for v in x]


def test_shapes_unit_output_and_parameters() -> None:
    refiner = GraphRefiner(16, heads=4).eval()
    out = refiner(torch.randn(5, 3, 16))
    assert out.shape == (5, 16)
    assert torch.allclose(out.norm(dim=1), torch.ones(5), atol=1e-6)
    # q, k, v, output: 4 x (E^2 + E); layer norm 2E; the official unused edge_nn is not built
    assert sum(p.numel() for p in refiner.parameters()) == 4 * (16 * 16 + 16) + 2 * 16
    assert refiner(torch.randn(2, 1, 16)).shape == (2, 16)  # k = 1 (the parser's default)


def test_heads_must_divide_the_dimension() -> None:
    with pytest.raises(ValueError, match="heads"):
        GraphRefiner(10, heads=4)


def test_one_head_forward_by_hand() -> None:
    """E 3, one head, k 2: Q = K = V = N (identity projections), output identity, no dropout.

    Neighbours n1 = (1, 0, 0.5), n2 = (0, 2, 1): scores n_i . n_j / sqrt(3), row softmax a,
    context_i = sum_j a_ij n_j, node_i = LN(n_i + context_i), out = mean over i, l2 normalised."""
    refiner = GraphRefiner(3, heads=1, dropout=0.0).double().eval()
    eye = torch.eye(3, dtype=torch.float64)
    for layer in (refiner.q_proj, refiner.k_proj, refiner.v_proj, refiner.output_layer):
        set_linear(layer, eye)
    n = [[1.0, 0.0, 0.5], [0.0, 2.0, 1.0]]
    dot = [[sum(a * b for a, b in zip(x, y)) for y in n] for x in n]  # [[1.25, 0.5], [0.5, 5]]
    scores = [[v / math.sqrt(3) for v in row] for row in dot]
    attn = [[math.exp(s) / sum(math.exp(t) for t in row) for s in row] for row in scores]
    context = [[sum(attn[i][j] * n[j][d] for j in range(2)) for d in range(3)] for i in range(2)]
    nodes = [layer_norm([n[i][d] + context[i][d] for d in range(3)]) for i in range(2)]
    mean = [(nodes[0][d] + nodes[1][d]) / 2 for d in range(3)]
    norm = math.sqrt(sum(v * v for v in mean))
    got = refiner(torch.tensor([n], dtype=torch.float64))
    assert got[0].tolist() == pytest.approx([v / norm for v in mean], abs=1e-9)


def test_uniform_attention_by_hand() -> None:
    """Zero query/key projections: every attention weight is 1/k, so each node gets the mean of
    the (identity-projected) neighbours: node_i = LN(n_i + mean_j n_j)."""
    refiner = GraphRefiner(4, heads=2, dropout=0.0).double().eval()
    set_linear(refiner.q_proj, 0.0)
    set_linear(refiner.k_proj, 0.0)
    set_linear(refiner.v_proj, torch.eye(4, dtype=torch.float64))
    set_linear(refiner.output_layer, torch.eye(4, dtype=torch.float64))
    n = [[1.0, 2.0, 0.0, -1.0], [0.0, 1.0, 3.0, 1.0], [2.0, 0.0, 1.0, 0.0]]
    mean_n = [sum(row[d] for row in n) / 3 for d in range(4)]
    nodes = [layer_norm([row[d] + mean_n[d] for d in range(4)]) for row in n]
    mean = [sum(node[d] for node in nodes) / 3 for d in range(4)]
    norm = math.sqrt(sum(v * v for v in mean))
    got = refiner(torch.tensor([n], dtype=torch.float64))
    assert got[0].tolist() == pytest.approx([v / norm for v in mean], abs=1e-9)
