"""MSCN's meta network and the similarity vectors it scores (ncl.models.mscn_meta)."""

from __future__ import annotations

import pytest
import torch

from ncl.models.layers import float32_linear
from ncl.models.mscn_meta import (MetaSimilarity, corrected_batch, corrected_pairs, pair_vectors,
                                  similarity_vectors)


@pytest.mark.parametrize("module_name", ["SGR", "SAF"])
def test_vectors_through_sgrafs_last_layer_are_its_scores(make_model, embeddings, module_name) -> None:
    model = make_model(module_name).eval()
    img, cap, lengths = embeddings
    with torch.no_grad():
        vec = similarity_vectors(model.sim_enc, img, cap, lengths.tolist())  # (6, 7, S)
        assert vec.shape == (6, 7, 8)
        want = model.sim_enc(img, cap, lengths, "loop")  # (6, 7) logits
        torch.testing.assert_close(float32_linear(vec, model.sim_enc.sim_eval_w).squeeze(-1), want,
                                   rtol=0, atol=1e-6)


@pytest.mark.parametrize("module_name", ["SGR", "SAF"])
def test_pair_vectors_are_the_diagonal_in_eval_mode(make_model, embeddings, module_name) -> None:
    model = make_model(module_name).eval()
    img, cap, lengths = embeddings
    img = img[:6]
    cap, lengths = cap[:6], lengths[:6]
    with torch.no_grad():
        full = similarity_vectors(model.sim_enc, img, cap, lengths.tolist())
        pairs = pair_vectors(model.sim_enc, img, cap, lengths.tolist())
    torch.testing.assert_close(pairs, full.diagonal(dim1=0, dim2=1).t(), rtol=0, atol=1e-6)


def test_meta_similarity_by_hand() -> None:
    torch.manual_seed(0)
    meta = MetaSimilarity(4, 3)
    x = torch.randn(2, 5, 4)
    h = torch.relu(x @ meta.hidden.weight.t() + meta.hidden.bias)
    want = torch.sigmoid(h @ meta.out.weight.t() + meta.out.bias).squeeze(-1)
    torch.testing.assert_close(meta(x), want)
    assert meta(x).shape == (2, 5)


def test_corrected_batch_and_pairs_agree(make_model) -> None:
    model = make_model("SGR").eval()
    meta = MetaSimilarity(8, 4).eval()
    gen = torch.Generator().manual_seed(3)
    batch = {"images": torch.randn(4, 5, 10, generator=gen),
             "tokens": torch.randint(1, 40, (4, 6), generator=gen),
             "lengths": torch.tensor([6, 3, 4, 2])}
    with torch.no_grad():
        full, pairs = corrected_batch(model, meta, batch), corrected_pairs(model, meta, batch)
    assert full.shape == (4, 4) and ((full > 0) & (full < 1)).all()
    torch.testing.assert_close(pairs, full.diagonal(), rtol=0, atol=1e-6)


def test_corrected_scores_are_the_meta_network_of_the_vectors(make_model, embeddings) -> None:
    from ncl.models.mscn_meta import corrected_scores

    model = make_model("SAF").eval()
    meta = MetaSimilarity(8, 4).eval()
    img, cap, lengths = embeddings
    with torch.no_grad():
        got = corrected_scores(model.sim_enc, meta, img, cap, lengths.tolist())
        want = meta(similarity_vectors(model.sim_enc, img, cap, lengths.tolist()))
    assert got.shape == (6, 7)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
