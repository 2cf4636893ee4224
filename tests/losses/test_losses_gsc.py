"""GSC's losses against the official formulas, transcribed here with exp and explicit loops
(``info_nce_loss``: ``pos / (pos + sum of negatives)``; ``train_batch``'s weighting and
broadcasting), and its structure matrices against the official ``forward_topology`` written
out per anchor in this file."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.losses.contrastive import info_nce as one_info_nce
from ncl.losses.gsc import gsc_objective, structure_matrices, structure_scores
from ncl.models.gsc_structure import caption_structure, image_structure
from ncl.models.sgraf import SGRAF


def info_nce(sims: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GSC's row InfoNCE through the one InfoNCE: ``(-log p_ii, p_ii)``."""
    return one_info_nce(sims, temperature, directions="i2t")


def bidirectional_info_nce(sims: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GSC's ``L_cl`` (unweighted) and ``preds``: both directions averaged."""
    return one_info_nce(sims, temperature, combine="mean", logits="per_direction")


def structure_info_nce(a: torch.Tensor, b: torch.Tensor, temperature: float) -> torch.Tensor:
    """GSC's structure term (unweighted): the row InfoNCE of ``A B^T``."""
    return one_info_nce(a @ b.t(), temperature, directions="i2t").loss


def official_info_nce(s: list[list[float]], temp: float) -> tuple[list[float], list[float]]:
    """The official ``info_nce_loss`` on a list matrix: per row, positive over positive plus
    the sum of the off-diagonal exps."""
    losses, preds = [], []
    for i, row in enumerate(s):
        pos = math.exp(row[i] / temp)
        neg = sum(math.exp(v / temp) for j, v in enumerate(row) if j != i)
        losses.append(-math.log(pos / (pos + neg)))
        preds.append(pos / (pos + neg))
    return losses, preds


S = [[0.9, 0.2, 0.4], [0.3, 0.8, 0.1], [0.5, 0.6, 0.7]]


def test_info_nce_rows_by_hand() -> None:
    loss, p = info_nce(torch.tensor(S, dtype=torch.float64), 0.07)
    want_loss, want_p = official_info_nce(S, 0.07)
    assert loss.tolist() == pytest.approx(want_loss, rel=1e-12)
    assert p.tolist() == pytest.approx(want_p, rel=1e-12)
    # a 2 x 2 case in closed form: p_0 = 1 / (1 + exp((0.2 - 1.0) / 1))
    _, p2 = info_nce(torch.tensor([[1.0, 0.2], [0.0, 0.5]], dtype=torch.float64), 1.0)
    assert float(p2[0]) == pytest.approx(1 / (1 + math.exp(-0.8)))
    assert float(p2[1]) == pytest.approx(1 / (1 + math.exp(-0.5)))


def test_both_directions_are_averaged() -> None:
    loss, preds = bidirectional_info_nce(torch.tensor(S, dtype=torch.float64), 0.07)
    rows_l, rows_p = official_info_nce(S, 0.07)
    cols_l, cols_p = official_info_nce([list(c) for c in zip(*S)], 0.07)
    assert loss.tolist() == pytest.approx([(a + b) / 2 for a, b in zip(rows_l, cols_l)], rel=1e-12)
    assert preds.tolist() == pytest.approx([(a + b) / 2 for a, b in zip(rows_p, cols_p)], rel=1e-12)


def test_structure_matrices_scale_columns_and_score_rows() -> None:
    img = [[0.0, 1.0, -1.0], [2.0, 0.5, 0.0], [-0.5, 0.0, 1.5]]
    cap = [[1.0, 0.0, 0.0], [0.5, 1.0, -2.0], [0.0, 0.3, 0.2]]
    y = [1.0, 0.5, 0.0]
    sig = lambda v: 1 / (1 + math.exp(-v))
    a_want = [[sig(img[r][c]) * y[c] for c in range(3)] for r in range(3)]  # (B, B) * (B,): columns
    b_want = [[sig(cap[r][c]) * y[c] for c in range(3)] for r in range(3)]
    a, b = structure_matrices(torch.tensor(img, dtype=torch.float64), torch.tensor(cap, dtype=torch.float64),
                              torch.tensor(y, dtype=torch.float64))
    assert a.tolist() == [pytest.approx(r, rel=1e-12) for r in a_want]
    assert b.tolist() == [pytest.approx(r, rel=1e-12) for r in b_want]
    cos = [sum(x * z for x, z in zip(a_want[r], b_want[r]))
           / (math.sqrt(sum(x * x for x in a_want[r])) * math.sqrt(sum(z * z for z in b_want[r])))
           for r in range(3)]
    assert structure_scores(a, b).tolist() == pytest.approx(cos, rel=1e-12)
    topo = [[sum(a_want[r][k] * b_want[c][k] for k in range(3)) for c in range(3)] for r in range(3)]
    assert structure_info_nce(a, b, 1.0).tolist() == pytest.approx(official_info_nce(topo, 1.0)[0], rel=1e-12)


def test_objective_weights_and_means() -> None:
    sims = torch.tensor(S, dtype=torch.float64)
    img = torch.tensor([[0.1, -0.2, 0.3], [0.0, 0.4, -0.1], [0.2, 0.2, 0.2]], dtype=torch.float64)
    cap = torch.tensor([[0.5, 0.1, 0.0], [-0.3, 0.2, 0.1], [0.0, 0.0, 0.6]], dtype=torch.float64)
    y = [1.0, 0.25, 0.5]
    terms = gsc_objective(sims, img, cap, torch.tensor(y, dtype=torch.float64), temperature=0.07,
                          gamma=0.01)
    rows_l, _ = official_info_nce(S, 0.07)
    cols_l, _ = official_info_nce([list(c) for c in zip(*S)], 0.07)
    cl = sum((a + b) / 2 * w for a, b, w in zip(rows_l, cols_l, y)) / 3
    sig = lambda v: 1 / (1 + math.exp(-v))
    a = [[sig(float(img[r, c])) * y[c] for c in range(3)] for r in range(3)]
    b = [[sig(float(cap[r, c])) * y[c] for c in range(3)] for r in range(3)]
    topo = [[sum(a[r][k] * b[c][k] for k in range(3)) for c in range(3)] for r in range(3)]
    st = sum(l * w for l, w in zip(official_info_nce(topo, 1.0)[0], y)) / 3
    assert float(terms.contrastive) == pytest.approx(cl, rel=1e-12)
    assert float(terms.structure) == pytest.approx(st, rel=1e-12)
    assert float(terms.loss) == pytest.approx(cl + 0.01 * st, rel=1e-12)
    assert not terms.preds.requires_grad and terms.scores.shape == (3,)


def test_large_structure_products_stay_finite() -> None:
    """The official exp overflows float32 past 88; the log-softmax does not."""
    a = torch.ones(128, 128)
    loss = structure_info_nce(a, a * 0.99, 1.0)
    assert bool(torch.isfinite(loss).all())
    assert float(loss[0]) == pytest.approx(math.log(128), rel=1e-5)  # all logits equal


# ------------------------------------------------------------------ forward_topology
def l2(x: torch.Tensor) -> torch.Tensor:
    return x / (x.pow(2).sum(-1, keepdim=True).sqrt() + 1e-8)


def head(enc, nodes: torch.Tensor) -> torch.Tensor:
    if enc.module_name == "SGR":
        for step in enc.SGR_module:
            q, k = step.graph_query_w(nodes), step.graph_key_w(nodes)
            e = torch.softmax(q @ k.transpose(1, 2), dim=-1)
            nodes = torch.relu(step.sim_graph_w(e @ nodes))
        vec = nodes[:, 0]
    else:
        vec = enc.SAF_module(nodes)
    return enc.sim_eval_w(vec)  # (B, 1)


@pytest.mark.parametrize("module", ["SGR", "SAF"])
def test_structure_follows_forward_topology(module: str) -> None:
    torch.manual_seed(0)
    net = SGRAF(30, module_name=module, img_dim=12, num_regions=4, word_dim=6, embed_size=10,
                sim_dim=8).double().eval()
    enc = net.sim_enc
    img = net.encode_images(torch.randn(5, 4, 12, dtype=torch.float64))
    lens = [6, 3, 5, 2, 4]
    cap = net.encode_captions(torch.randint(1, 30, (5, 6)), torch.tensor(lens))
    # images, transcribed from the official loop (anchor i appends column i)
    glo_all = enc.v_global_w(img)
    cols = []
    for i in range(5):
        loc = l2(enc.sim_tranloc_w((img - img[i].unsqueeze(0).repeat(5, 1, 1)).pow(2) + 1e-6))
        glo = l2(enc.sim_tranglo_w((glo_all - glo_all[i].unsqueeze(0)).pow(2) + 1e-6))
        cols.append(head(enc, torch.cat([glo.unsqueeze(1), loc], 1)))
    assert torch.allclose(image_structure(enc, img), torch.cat(cols, 1), atol=1e-12)
    # captions: SCAN_attention(cap_i_expand, cap_emb + 1e-6, smooth=9.0, lens=cap_lens)
    cap_glo = torch.cat([enc.t_global_w(cap[i, :lens[i]].unsqueeze(0)) for i in range(5)], 0)
    cols = []
    for i in range(5):
        query = cap[i, :lens[i]].unsqueeze(0).repeat(5, 1, 1)
        context = cap + 1e-6
        attn = l2(torch.nn.functional.leaky_relu(context @ query.transpose(1, 2), 0.1))  # over query words
        for j in range(5):
            attn[j, lens[j]:] = -1e9
        attn = torch.softmax(attn.transpose(1, 2) * 9.0, dim=2)
        ctx = l2(attn @ context)
        loc = l2(enc.sim_tranloc_w((ctx - query).pow(2)))
        glo = l2(enc.sim_tranglo_w((cap_glo - cap_glo[i].unsqueeze(0)).pow(2) + 1e-6))
        cols.append(head(enc, torch.cat([glo.unsqueeze(1), loc], 1)))
    assert torch.allclose(caption_structure(enc, cap, lens), torch.cat(cols, 1), atol=1e-12)
