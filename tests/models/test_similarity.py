"""EncoderSimilarity: the loop against a naive per-pair reference; chunked against the loop."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from ncl.models.layers import l1norm, l2norm
from ncl.models.similarity import EncoderSimilarity

# Biases whose only effect is a constant shift of softmax logits (spec 3.3 formulas).
SHIFT_ONLY_BIASES = ("embedding_common.0.bias", "graph_key_w.bias")


def _linear(layer: nn.Linear, x: Tensor) -> Tensor:
    return x @ layer.weight.T + layer.bias


def _bn_eval(bn: nn.BatchNorm1d, x: Tensor, channel_dim: int) -> Tensor:
    shape = [1] * x.dim()
    shape[channel_dim] = -1
    mean, var = bn.running_mean.view(shape), bn.running_var.view(shape)
    return (x - mean) / torch.sqrt(var + bn.eps) * bn.weight.view(shape) + bn.bias.view(shape)


def _norm(x: Tensor) -> Tensor:
    """Spec's l2norm written out: x / (sqrt(sum x^2) + 1e-8)."""
    return x / (x.pow(2).sum(-1, keepdim=True).sqrt() + 1e-8)


def naive_pair_score(sim: EncoderSimilarity, v: Tensor, t: Tensor) -> Tensor:
    """Score of one image ``v (R, E)`` and one caption ``t (L, E)``, eval mode (spec 3.3)."""
    vsa, tsa = sim.v_global_w, sim.t_global_w
    a = torch.tanh(_bn_eval(vsa.embedding_local[1], _linear(vsa.embedding_local[0], v), 0))
    g = torch.tanh(_bn_eval(vsa.embedding_global[1],
                            _linear(vsa.embedding_global[0], v.mean(0)), 0))
    w = torch.softmax(_linear(vsa.embedding_common[0], a * g).squeeze(-1), dim=0)
    v_glo = _norm((w[:, None] * v).sum(0))
    a = torch.tanh(_linear(tsa.embedding_local[0], t))
    g = torch.tanh(_linear(tsa.embedding_global[0], t.mean(0)))
    w = torch.softmax(_linear(tsa.embedding_common[0], a * g).squeeze(-1), dim=0)
    t_glo = _norm((w[:, None] * t).sum(0))
    s = torch.nn.functional.leaky_relu(v @ t.T, 0.1)  # (R, L)
    s = s / (s.pow(2).sum(1, keepdim=True).sqrt() + 1e-8)  # over words, per region
    alpha = torch.softmax(9.0 * s, dim=0)  # over regions, per word
    nodes = [_norm(_linear(sim.sim_tranglo_w, (v_glo - t_glo) ** 2))]
    for k in range(t.shape[0]):
        context = _norm((alpha[:, k:k + 1] * v).sum(0))
        nodes.append(_norm(_linear(sim.sim_tranloc_w, (context - t[k]) ** 2)))
    u = torch.stack(nodes)  # (L + 1, S)
    if sim.module_name == "SGR":
        for step in sim.SGR_module:
            q, k = _linear(step.graph_query_w, u), _linear(step.graph_key_w, u)
            edges = torch.softmax(q @ k.T, dim=1)
            u = torch.relu(_linear(step.sim_graph_w, edges @ u))
        vec = u[0]
    else:
        head = sim.SAF_module
        logits = _bn_eval(head.bn, _linear(head.attn_sim_w, u).T, 0)  # (1, L + 1)
        attn = torch.sigmoid(logits)
        attn = attn / (attn.abs().sum() + 1e-8)
        vec = _norm((attn.T * u).sum(0))
    return _linear(sim.sim_eval_w, vec).squeeze()


@pytest.mark.parametrize("module_name", ["SGR", "SAF"])
def test_loop_matches_naive_reference(make_model, embeddings, module_name):
    model = make_model(module_name).double().eval()
    img, cap, lengths = (x.double() if x.is_floating_point() else x for x in embeddings)
    with torch.no_grad():
        got = model.sim_enc(img, cap, lengths, "loop")
        want = torch.stack([torch.stack([
            naive_pair_score(model.sim_enc, img[i], cap[j, :int(lengths[j])])
            for j in range(cap.shape[0])]) for i in range(img.shape[0])])
    assert got.shape == (6, 7)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("module_name", ["SGR", "SAF"])
@pytest.mark.parametrize("chunk_size", [1, 3, 32])
def test_chunked_equals_loop_eval(make_model, embeddings, module_name, chunk_size):
    model = make_model(module_name).eval()
    img, cap, lengths = embeddings
    with torch.no_grad():
        loop = model.sim_enc(img, cap, lengths, "loop")
        chunked = model.sim_enc(img, cap, lengths, "chunked", chunk_size)
    assert (chunked - loop).abs().max() < 1e-5
    assert loop.std() > 0.01  # the comparison is not between constants


@pytest.mark.parametrize("sgr_step", [1, 2])
def test_chunked_equals_loop_other_sgr_depths(make_model, embeddings, sgr_step):
    model = make_model("SGR", sgr_step=sgr_step).eval()
    img, cap, lengths = embeddings
    with torch.no_grad():
        loop = model.sim_enc(img, cap, lengths, "loop")
        chunked = model.sim_enc(img, cap, lengths, "chunked", 4)
    assert (chunked - loop).abs().max() < 1e-5


@pytest.mark.parametrize("module_name", ["SGR", "SAF"])
def test_chunked_equals_loop_train_outputs_grads_and_running_stats(make_model, embeddings,
                                                                   module_name):
    """Train mode without dropout: same scores, same gradients, same BatchNorm statistics."""
    img, cap, lengths = (x.double() if x.is_floating_point() else x for x in embeddings)
    results = []
    for strategy in ("loop", "chunked"):
        model = make_model(module_name, dropout=0.0).double().train()
        scores = model.sim_enc(img, cap, lengths, strategy, 3)
        (scores * torch.linspace(-1, 1, scores.numel()).view_as(scores).double()).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.sim_enc.named_parameters()}
        results.append((scores.detach(), grads, model.sim_enc.state_dict()))
    (s_loop, g_loop, b_loop), (s_chunk, g_chunk, b_chunk) = results
    torch.testing.assert_close(s_chunk, s_loop, rtol=0, atol=1e-10)
    assert g_loop.keys() == g_chunk.keys()
    for name in g_loop:
        torch.testing.assert_close(g_chunk[name], g_loop[name], rtol=1e-8, atol=1e-10,
                                   msg=f"gradient of {name}")
    for name in b_loop:
        torch.testing.assert_close(b_chunk[name], b_loop[name], rtol=0, atol=1e-10,
                                   msg=f"buffer {name}")
    if module_name == "SAF":  # one running-statistic update per caption, as in the loop
        assert int(b_chunk["SAF_module.bn.num_batches_tracked"]) == cap.shape[0]


@pytest.mark.parametrize("strategy", ["loop", "chunked"])
def test_gradients_flow_to_every_parameter_and_input(make_model, embeddings, strategy):
    model = make_model("SGR").train()
    img, cap, lengths = embeddings
    img, cap = img.clone().requires_grad_(), cap.clone().requires_grad_()
    model.sim_enc(img, cap, lengths, strategy, 2).sum().backward()
    for name, param in model.sim_enc.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
        if name.endswith(SHIFT_ONLY_BIASES):  # shift a softmax: zero gradient by design
            assert param.grad.abs().max() < 1e-5, name
        else:
            assert param.grad.abs().sum() > 0, name
    assert torch.isfinite(cap.grad).all() and torch.isfinite(img.grad).all()
    beyond = torch.arange(cap.shape[1]) >= lengths.unsqueeze(1)  # (B, L) padded positions
    assert cap.grad[beyond].abs().max() == 0


@pytest.mark.parametrize("strategy", ["loop", "chunked"])
def test_positions_beyond_length_are_ignored(make_model, embeddings, strategy):
    model = make_model("SAF").eval()
    img, cap, lengths = embeddings
    zeroed = cap * (torch.arange(cap.shape[1]) < lengths.unsqueeze(1)).unsqueeze(-1)
    with torch.no_grad():
        torch.testing.assert_close(model.sim_enc(img, cap, lengths, strategy),
                                   model.sim_enc(img, zeroed, lengths, strategy))


def test_columns_follow_caption_order(make_model, embeddings):
    """Chunked sorts captions by length internally; columns must come back in input order."""
    model = make_model("SGR").eval()
    img, cap, lengths = embeddings
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    with torch.no_grad():
        full = model.sim_enc(img, cap, lengths, "chunked", 2)
        permuted = model.sim_enc(img, cap[perm], lengths[perm], "chunked", 2)
    torch.testing.assert_close(permuted, full[:, perm])


def test_empty_caption_batch(make_model, embeddings):
    model = make_model("SGR").eval()
    img, cap, _ = embeddings
    out = model.sim_enc(img, cap[:0], torch.zeros(0, dtype=torch.long), "chunked")
    assert out.shape == (6, 0)


@pytest.mark.parametrize(("bad", "match"), [
    ("regions", "img_emb must have shape"),
    ("dim", "cap_emb must have shape"),
    ("lengths_shape", "lengths must have shape"),
    ("too_long", "lengths must lie in"),
    ("zero", "lengths must lie in"),
    ("strategy", "strategy must be"),
])
def test_bad_inputs_raise(make_model, embeddings, bad, match):
    model = make_model("SGR").eval()
    img, cap, lengths = embeddings
    strategy = "loop"
    if bad == "regions":
        img = img[:, :4]
    elif bad == "dim":
        cap = cap[..., :5]
    elif bad == "lengths_shape":
        lengths = lengths[:3]
    elif bad == "too_long":
        lengths = lengths.clone().fill_(10)
    elif bad == "zero":
        lengths = lengths.clone().fill_(0)
    else:
        strategy = "fast"
    with pytest.raises(ValueError, match=match):
        model.sim_enc(img, cap, lengths, strategy)


def test_norm_helpers_match_spec_formulas():
    x = torch.tensor([[3.0, -4.0, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(l2norm(x), torch.tensor([[3.0, -4.0, 0.0], [0, 0, 0]])
                               / torch.tensor([[5.0 + 1e-8], [1e-8]]))
    torch.testing.assert_close(l1norm(x), x / torch.tensor([[7.0 + 1e-8], [1e-8]]))
    tiny = torch.tensor([1e-9, 0.0], dtype=torch.float64)  # eps outside the square root
    assert float(l2norm(tiny)[0]) == pytest.approx(1e-9 / (1e-9 + 1e-8), rel=1e-12)
    zero = torch.zeros(4, requires_grad=True)
    l2norm(zero).sum().backward()
    assert torch.isfinite(zero.grad).all()
