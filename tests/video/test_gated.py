"""GatedVideoText: Eq. D8, expert packing, the text-side mixture, the backbone contract."""

from __future__ import annotations

import pytest
import torch

from ncl.errors import ConfigError
from ncl.evaluation.similarity import sharded_similarity
from ncl.models.contracts import RetrievalBackbone
from ncl.models.gated import GatedEmbeddingUnit, GatedVideoText

VOCAB = 12


def make(fusion: str = "mixture", **kw: int) -> GatedVideoText:
    torch.manual_seed(0)
    args = dict(img_dim=5, num_regions=2, word_dim=4, text_dim=6, embed_size=8)
    args.update(kw)
    return GatedVideoText(VOCAB, fusion=fusion, **args).eval()


def captions(batch: int = 3, length: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    lengths = torch.randint(2, length + 1, (batch,), generator=gen)
    tokens = torch.randint(1, VOCAB, (batch, length), generator=gen)
    tokens[torch.arange(length)[None, :] >= lengths[:, None]] = 0  # zero padding
    return tokens, lengths


def test_unit_is_eq_d8_then_l2_normalised() -> None:
    torch.manual_seed(0)
    unit = GatedEmbeddingUnit(3, 4)
    x = torch.randn(2, 3)
    w1, b1, w2, b2 = unit.fc.weight, unit.fc.bias, unit.gate.weight, unit.gate.bias
    z = x @ w1.T + b1
    f = z * torch.sigmoid(z @ w2.T + b2)  # Eq. D8
    assert torch.allclose(unit(x), f / f.norm(dim=-1, keepdim=True), atol=1e-6)


def test_satisfies_backbone_contract_and_forward_is_similarity_of_encodings() -> None:
    net = make()
    assert isinstance(net, RetrievalBackbone)
    images = torch.randn(4, 2, 5)
    tokens, lengths = captions(3)
    direct = net(images, tokens, lengths)
    assert direct.shape == (4, 3)
    parts = net.similarity(net.encode_images(images), net.encode_captions(tokens, lengths), lengths)
    assert torch.allclose(direct, parts)
    # The sharded evaluation (shards smaller than the batch) gives the same matrix.
    sharded = sharded_similarity(net.similarity, net.encode_images(images),
                                 net.encode_captions(tokens, lengths), lengths, shard_size=2)
    assert torch.allclose(direct, sharded, atol=1e-6)


def test_mixture_score_is_text_weighted_cosine_over_experts() -> None:
    net = make()
    images = torch.randn(2, 2, 5)
    tokens, lengths = captions(2)
    img, cap = net.encode_images(images), net.encode_captions(tokens, lengths)
    e = net.embed_size
    weights = cap[:, 2 * e:]
    assert torch.allclose(weights.sum(-1), torch.ones(2))  # softmax over the 2 experts
    expected = torch.zeros(2, 2)
    for i in range(2):
        for j in range(2):
            for k in range(2):
                f = net.video_units[k](images[i, k])
                g = cap[j, k * e:(k + 1) * e]
                expected[i, j] += weights[j, k] * torch.dot(f, g)
    assert torch.allclose(net.similarity(img, cap), expected, atol=1e-6)


def test_missing_expert_renormalises_the_weights_over_present_experts() -> None:
    net = make()
    images = torch.randn(1, 2, 5)
    images[0, 1] = 0  # no motion expert for this clip
    tokens, lengths = captions(2)
    cap = net.encode_captions(tokens, lengths)
    score = net.similarity(net.encode_images(images), cap)
    e = net.embed_size
    appearance_only = net.video_units[0](images[0, 0]) @ cap[:, :e].T  # cosine of expert 0
    assert torch.allclose(score[0], appearance_only, atol=1e-6)


def test_zero_padded_columns_do_not_matter() -> None:
    net = make()
    images = torch.randn(3, 2, 5)
    images[:, 1, 3:] = 0  # expert 1 has 3 dims, padded to 5
    tokens, lengths = captions(3)
    before = net(images, tokens, lengths)
    with torch.no_grad():  # weights that only ever meet padding
        net.video_units[1].fc.weight[:, 3:] = torch.randn(8, 2) * 10
    assert torch.allclose(before, net(images, tokens, lengths), atol=1e-6)


def test_text_embedding_ignores_padding_beyond_lengths() -> None:
    net = make()
    tokens, lengths = captions(3, length=5)
    wider = torch.cat([tokens, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    assert torch.allclose(net.encode_captions(tokens, lengths), net.encode_captions(wider, lengths))


def test_concat_fusion_is_one_cosine_over_concatenated_experts() -> None:
    net = make("concat")
    assert net.n_units == 1 and net.mixture is None
    images = torch.randn(2, 2, 5)
    tokens, lengths = captions(2)
    cap = net.encode_captions(tokens, lengths)
    f = net.video_units[0](images.reshape(2, 10))
    expected = f @ cap[:, : net.embed_size].T
    assert torch.allclose(net(images, tokens, lengths), expected, atol=1e-6)


def test_gradients_reach_both_sides() -> None:
    net = make().train()
    images = torch.randn(4, 2, 5)
    tokens, lengths = captions(4)
    net(images, tokens, lengths).diagonal().sum().backward()
    assert net.video_units[1].fc.weight.grad.abs().sum() > 0
    assert net.embed.weight.grad.abs().sum() > 0
    assert net.mixture.weight.grad.abs().sum() > 0


def test_bad_inputs_and_options_raise_clear_errors() -> None:
    net = make()
    tokens, lengths = captions(2)
    with pytest.raises(ValueError, match="experts"):
        net.encode_images(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="image_lengths"):
        net.encode_images(torch.randn(2, 2, 5), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="vocab_size"):
        net.encode_captions(tokens + VOCAB, lengths)
    with pytest.raises(ConfigError, match="fusion"):
        make("average")
    with pytest.raises(ConfigError, match="embed_size"):
        make(embed_size=0)
