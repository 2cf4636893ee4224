"""VSE-infinity and GPO (spec 3.6): official names and counts, pooling, contract, loading."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from ncl.data.vocab import load_vocabulary
from ncl.errors import ConfigError
from ncl.models import GPO, VSEInfinity
from ncl.models.contracts import RetrievalBackbone
from ncl.models.gpo import positional_encoding

SHARED = Path(__file__).parents[2].parent / "shared"
TINY = {"img_dim": 10, "word_dim": 6, "embed_size": 12}
VOCAB = 40

IMG_KEYS = [
    "fc.weight", "fc.bias",
    "mlp.layers.0.weight", "mlp.layers.0.bias", "mlp.layers.1.weight", "mlp.layers.1.bias",
    *(f"mlp.bns.{i}.{n}" for i in (0, 1)
      for n in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")),
]
GRU_NAMES = [f"{w}_l0{s}" for s in ("", "_reverse")
             for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
GPO_KEYS = [f"gpool.gru.{n}" for n in GRU_NAMES] + ["gpool.linear.weight"]
TXT_KEYS = ["embed.weight", *(f"rnn.{n}" for n in GRU_NAMES), *GPO_KEYS]

#: Spec 3.6 (and 1.4 for the vocabulary sizes without <mask>).
IMAGE_SIDE, TEXT_SIDE_NO_EMBED = 3_688_352, 8_159_648
TOTALS = {"f30k": (8_481, 14_392_600), "coco": (11_353, 15_254_200),
          "cc152k": (12_072, 15_469_900)}


def count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def randomize_(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-default values for every parameter and BatchNorm statistic."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.3)
        for module in model.modules():
            if isinstance(module, nn.BatchNorm1d):
                module.running_mean.copy_(torch.randn(module.running_mean.shape, generator=gen))
                module.running_var.copy_(torch.rand(module.running_var.shape, generator=gen) + 0.5)
    return model


def tiny(seed: int = 0, **overrides: object) -> VSEInfinity:
    torch.manual_seed(seed)
    return randomize_(VSEInfinity(VOCAB, **{**TINY, **overrides}), seed).eval()


def padded_images(counts: list[int], regions: int, dim: int = 10, seed: int = 0) -> Tensor:
    """``(B, regions, dim)`` random features, zero beyond ``counts[b]``."""
    images = torch.randn(len(counts), regions, dim, generator=torch.Generator().manual_seed(seed))
    for b, n in enumerate(counts):
        images[b, n:] = 0
    return images


def captions(lengths: list[int], width: int | None = None, seed: int = 0) -> Tensor:
    """``(B, width)`` random ids in [1, VOCAB), zero beyond each length."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, VOCAB, (len(lengths), width or max(lengths)), generator=gen)
    for b, n in enumerate(lengths):
        tokens[b, n:] = 0
    return tokens


# ------------------------------------------------------------------ names and counts
def test_official_parameter_names() -> None:
    model = VSEInfinity(VOCAB, **TINY)
    assert list(model.img_enc.state_dict()) == IMG_KEYS + GPO_KEYS
    assert sorted(model.txt_enc.state_dict()) == sorted(TXT_KEYS)
    assert set(model.state_dict()) == ({f"img_enc.{k}" for k in IMG_KEYS + GPO_KEYS}
                                       | {f"txt_enc.{k}" for k in TXT_KEYS})


def test_side_counts_at_official_sizes() -> None:
    model = VSEInfinity(100)
    assert count(model.img_enc) == IMAGE_SIDE
    assert count(model.txt_enc) - model.txt_enc.embed.weight.numel() == TEXT_SIDE_NO_EMBED
    assert count(model.img_enc.gpool) == count(model.txt_enc.gpool) == 12_704
    assert count(model.img_enc.mlp.bns[1]) == 2_048  # the unused BatchNorm1d(1024)


@pytest.mark.parametrize("name", sorted(TOTALS))
def test_totals_with_mask_for_official_vocabularies(name: str) -> None:
    path = SHARED / "data" / "vocab" / f"{name}_precomp_vocab.json"
    if not path.is_file():
        pytest.skip(f"shared vocabulary not found at {path}")
    size, total = TOTALS[name]
    vocab_size = len(load_vocabulary(path))
    assert vocab_size == size
    model = VSEInfinity(vocab_size, add_mask_token=True)
    assert model.vocab_size == size + 1
    assert model.txt_enc.embed.weight.shape == (size + 1, 300)
    assert count(model) == total


# ------------------------------------------------------------------ configuration
@pytest.mark.parametrize("args, option", [
    ({"vocab_size": 0}, "vocab_size"),
    ({"vocab_size": VOCAB, "img_dim": -1}, "img_dim"),
    ({"vocab_size": VOCAB, "word_dim": 2.5}, "word_dim"),
    ({"vocab_size": VOCAB, "embed_size": 11}, "embed_size"),
])
def test_bad_options_raise_one_config_error(args: dict, option: str) -> None:
    with pytest.raises(ConfigError, match=option):
        VSEInfinity(**args)


def test_gpo_rejects_odd_encoding_size() -> None:
    with pytest.raises(ConfigError, match="d_pe"):
        GPO(d_pe=31)


def test_contract_and_attributes() -> None:
    model = VSEInfinity(VOCAB, add_mask_token=True, **TINY)
    assert isinstance(model, RetrievalBackbone)
    assert model.img_dim == 10 and model.vocab_size == VOCAB + 1
    # No fixed region count: the method's setup check must not pin one.
    assert not hasattr(model, "num_regions")


# ------------------------------------------------------------------ GPO
def test_positional_encoding_formula() -> None:
    pe = positional_encoding(5, 8)
    for p in range(5):
        for i in range(4):
            angle = p / 10000 ** (2 * i / 8)
            assert pe[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_encodings_are_cached_per_device_and_grown() -> None:
    gpo = GPO()
    first = gpo.encodings(4, torch.device("cpu"))
    table = gpo._pe_cache[torch.device("cpu")]
    assert gpo.encodings(3, torch.device("cpu")).data_ptr() == table.data_ptr()  # no copy
    longer = gpo.encodings(9, torch.device("cpu"))
    assert longer.shape == (9, 32) and torch.equal(longer[:4], first)
    assert "_pe_cache" not in dict(gpo.state_dict())  # never persisted


def reference_gpo(gpo: GPO, features: Tensor, lengths: Tensor) -> Tensor:
    """One sample at a time, without padding: GRU on the n encodings, softmax, sorted sum."""
    out = []
    for x, n in zip(features, lengths.tolist()):
        pe = positional_encoding(n, gpo.d_pe).unsqueeze(0)  # (1, n, d_pe)
        hidden, _ = gpo.gru(pe)
        hidden = (hidden[..., : gpo.d_hidden] + hidden[..., gpo.d_hidden:]) / 2
        weights = torch.softmax(gpo.linear(hidden)[0] / 0.1, dim=0)  # (n, 1)
        ranked = x[:n].sort(dim=0, descending=True).values  # (n, D)
        out.append((weights * ranked).sum(dim=0))
    return torch.stack(out)


def test_gpo_matches_per_sample_reference_with_unsorted_lengths() -> None:
    torch.manual_seed(0)
    gpo = randomize_(GPO())
    lengths = torch.tensor([3, 7, 1, 5])
    features = torch.randn(4, 9, 6)  # junk beyond each length must be ignored
    got = gpo(features, lengths)
    assert got.shape == (4, 6)
    torch.testing.assert_close(got, reference_gpo(gpo, features, lengths), atol=1e-5, rtol=1e-5)


def test_gpo_weights_sum_to_one_and_vanish_on_padding() -> None:
    torch.manual_seed(0)
    gpo = randomize_(GPO())
    weights = gpo.pool_weights(torch.tensor([2, 5, 4]), 5)[..., 0]  # (3, 5)
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(3))
    assert weights[0, 2:].abs().max() == 0 and weights[2, 4] == 0


def test_gpo_is_invariant_to_the_order_of_valid_positions() -> None:
    torch.manual_seed(0)
    gpo = randomize_(GPO())
    features = torch.randn(1, 6, 5)
    shuffled = features[:, torch.randperm(6)]
    torch.testing.assert_close(gpo(features, torch.tensor([6])), gpo(shuffled, torch.tensor([6])))


def test_gpo_with_one_valid_position_returns_it() -> None:
    gpo = randomize_(GPO())
    features = torch.randn(2, 4, 3)
    out = gpo(features, torch.tensor([1, 1]))
    torch.testing.assert_close(out, features[:, 0])


@pytest.mark.parametrize("lengths", [[0, 2], [2, 5]])
def test_gpo_rejects_lengths_outside_range(lengths: list[int]) -> None:
    with pytest.raises(ValueError, match="lengths"):
        GPO()(torch.randn(2, 4, 3), torch.tensor(lengths))


# ------------------------------------------------------------------ encoders vs references
def test_encoders_match_a_per_sample_reference() -> None:
    """Spec 3.6 composed by hand, one sample at a time, no padding or packing."""
    model = tiny()
    img_enc, txt_enc = model.img_enc, model.txt_enc
    counts, lengths = [4, 2, 6], [3, 7, 2]
    images, tokens = padded_images(counts, 6), captions(lengths)
    img = model.encode_images(images, torch.tensor(counts))
    cap = model.encode_captions(tokens, torch.tensor(lengths))
    for b, n in enumerate(counts):
        x = images[b, :n]  # (n, 10)
        bn = img_enc.mlp.bns[0]
        hidden = (img_enc.mlp.layers[0](x) - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps)
        hidden = torch.relu(hidden * bn.weight + bn.bias)  # eval-mode BatchNorm
        f = img_enc.fc(x) + img_enc.mlp.layers[1](hidden)  # (n, E)
        v = reference_gpo(img_enc.gpool, f[None], torch.tensor([n]))[0]
        torch.testing.assert_close(img[b], v / (v.norm() + 1e-8), atol=1e-6, rtol=1e-5)
    for b, n in enumerate(lengths):
        out, _ = txt_enc.rnn(txt_enc.embed(tokens[b:b + 1, :n]))  # (1, n, 2E)
        words = (out[..., :12] + out[..., 12:]) / 2  # directions averaged
        t = reference_gpo(txt_enc.gpool, words, torch.tensor([n]))[0]
        torch.testing.assert_close(cap[b], t / (t.norm() + 1e-8), atol=1e-6, rtol=1e-5)


# ------------------------------------------------------------------ image side
def test_zero_padding_and_image_lengths_give_the_unpadded_embedding() -> None:
    model = tiny()
    counts = [4, 2, 6]
    images = padded_images(counts, 9)
    batched = model.encode_images(images, torch.tensor(counts))  # (3, E)
    for b, n in enumerate(counts):
        alone = model.encode_images(images[b:b + 1, :n])  # no padding, no lengths
        torch.testing.assert_close(batched[b], alone[0], atol=1e-6, rtol=1e-5)


def test_image_embedding_is_invariant_to_region_order() -> None:
    model = tiny()
    images = padded_images([6], 6)
    shuffled = images[:, [5, 0, 3, 1, 4, 2]]
    torch.testing.assert_close(model.encode_images(images), model.encode_images(shuffled))


def test_train_mode_batchnorm_counts_padded_regions() -> None:
    """Spec 3.6: the MLP's BatchNorm statistics include the zero-padded rows (official)."""
    model = tiny().train()
    bn = model.img_enc.mlp.bns[0]
    bn.reset_running_stats()
    bn.momentum = 1.0  # running_mean becomes this batch's mean
    images = padded_images([2, 5], 5)
    model.encode_images(images, torch.tensor([2, 5]))
    hidden = model.img_enc.mlp.layers[0](images.reshape(10, -1))  # all 10 rows, padding included
    torch.testing.assert_close(bn.running_mean, hidden.mean(dim=0).detach())
    unused = model.img_enc.mlp.bns[1]
    assert int(unused.num_batches_tracked) == 0  # created, never applied


def test_image_lengths_beyond_regions_raise() -> None:
    with pytest.raises(ValueError, match="image_lengths"):
        tiny().encode_images(padded_images([3, 3], 3), torch.tensor([3, 4]))


def test_image_dim_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="10"):
        tiny().encode_images(torch.randn(2, 3, 7))


# ------------------------------------------------------------------ text side
def test_caption_embeddings_do_not_depend_on_batch_order_or_padding() -> None:
    model = tiny()
    lengths = [3, 7, 2, 5, 7]  # unsorted: the official packer would refuse it
    tokens = captions(lengths)
    base = model.encode_captions(tokens, torch.tensor(lengths))  # (5, E)
    perm = torch.tensor([4, 2, 0, 3, 1])
    permuted = model.encode_captions(tokens[perm], torch.tensor(lengths)[perm])
    torch.testing.assert_close(permuted, base[perm], atol=1e-6, rtol=1e-5)
    wider = torch.nn.functional.pad(tokens, (0, 4))  # extra <pad> columns
    torch.testing.assert_close(model.encode_captions(wider, torch.tensor(lengths)), base,
                               atol=1e-6, rtol=1e-5)
    for b, n in enumerate(lengths):  # each caption alone
        alone = model.encode_captions(tokens[b:b + 1, :n], torch.tensor([n]))
        torch.testing.assert_close(alone[0], base[b], atol=1e-6, rtol=1e-5)


def test_float_lengths_as_the_official_collate_gives_them() -> None:
    model = tiny()
    tokens = captions([4, 2])
    torch.testing.assert_close(model.encode_captions(tokens, torch.tensor([4.0, 2.0])),
                               model.encode_captions(tokens, torch.tensor([4, 2])))


def test_token_ids_beyond_the_vocabulary_raise() -> None:
    tokens = captions([3])
    tokens[0, 1] = VOCAB  # the <mask> id without add_mask_token
    with pytest.raises(ValueError, match="vocab_size"):
        tiny().encode_captions(tokens, torch.tensor([3]))
    with_mask = tiny(add_mask_token=True)
    assert with_mask.encode_captions(tokens, torch.tensor([3])).shape == (1, 12)


# ------------------------------------------------------------------ similarity
def test_similarity_is_the_cosine_and_forward_composes() -> None:
    model = tiny()
    counts, lengths = [4, 2, 6], [3, 7, 2]
    images, tokens = padded_images(counts, 6), captions(lengths)
    img = model.encode_images(images, torch.tensor(counts))
    cap = model.encode_captions(tokens, torch.tensor(lengths))
    torch.testing.assert_close(img.norm(dim=1), torch.ones(3))
    sims = model.similarity(img, cap, torch.tensor(lengths))
    assert sims.shape == (3, 3) and sims.abs().max() <= 1 + 1e-6
    expected = torch.nn.functional.cosine_similarity(img[:, None], cap[None], dim=-1)
    torch.testing.assert_close(sims, expected, atol=1e-6, rtol=1e-5)
    self_sims = model.similarity(img, img, torch.tensor(lengths))
    torch.testing.assert_close(self_sims.diagonal(), torch.ones(3))
    batch = model(images, tokens, torch.tensor(lengths), torch.tensor(counts))
    torch.testing.assert_close(batch, sims)


def test_similarity_refuses_unpooled_embeddings() -> None:
    with pytest.raises(ValueError, match="pooled"):
        tiny().similarity(torch.randn(2, 3, 12), torch.randn(2, 12), torch.tensor([1, 1]))


# ------------------------------------------------------------------ official checkpoints
def official(model: VSEInfinity) -> list[dict[str, Tensor]]:
    """What CRCL's ``VSEModel.state_dict()`` returns: ``[img_enc, txt_enc]``."""
    return [dict(model.img_enc.state_dict()), dict(model.txt_enc.state_dict())]


def test_load_official_state_round_trip() -> None:
    source, target = tiny(seed=1, add_mask_token=True), tiny(seed=2, add_mask_token=True)
    images, tokens, lengths = padded_images([4, 6], 6), captions([5, 3]), torch.tensor([5, 3])
    assert not torch.allclose(source(images, tokens, lengths), target(images, tokens, lengths))
    state = official(source)
    state[0] = {f"module.{k}": v for k, v in state[0].items()}  # DataParallel prefix
    target.load_official_state(state)
    torch.testing.assert_close(target(images, tokens, lengths), source(images, tokens, lengths))
    for key, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[key], value), key


def test_load_official_state_without_batch_counters() -> None:
    source, target = tiny(seed=1), tiny(seed=2)
    state = official(source)
    state[0] = {k: v for k, v in state[0].items() if not k.endswith("num_batches_tracked")}
    target.load_official_state(state)
    assert torch.equal(target.img_enc.fc.weight, source.img_enc.fc.weight)


def test_load_official_state_pads_a_missing_mask_row_with_a_warning() -> None:
    source, target = tiny(seed=1), tiny(seed=2, add_mask_token=True)
    mask_row = target.txt_enc.embed.weight[VOCAB].clone()
    with pytest.warns(UserWarning, match="<mask>"):
        target.load_official_state(official(source))
    assert torch.equal(target.txt_enc.embed.weight[:VOCAB], source.txt_enc.embed.weight)
    assert torch.equal(target.txt_enc.embed.weight[VOCAB], mask_row)


@pytest.mark.parametrize("break_it, message", [
    (lambda s: s[:1], "2 state dicts"),
    (lambda s: {"img_enc": s[0], "txt_enc": s[1]}, "2 state dicts"),
    (lambda s: [s[0], {k: v for k, v in s[1].items() if k != "rnn.weight_hh_l0"}],
     r"txt_enc.*missing keys \['rnn.weight_hh_l0'\]"),
    (lambda s: [{**s[0], "sim_enc.extra": torch.zeros(1)}, s[1]],
     r"img_enc.*unexpected keys \['sim_enc.extra'\]"),
    (lambda s: [{**s[0], "fc.weight": torch.zeros(12, 11)}, s[1]],
     r"img_enc.fc.weight.*\(12, 11\).*\(12, 10\)"),
    (lambda s: [s[0], {**s[1], "embed.weight": torch.zeros(VOCAB + 1, 6)}],
     "add_mask_token"),
])
def test_load_official_state_errors(break_it, message: str) -> None:  # noqa: ANN001
    target = tiny(seed=2)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(ConfigError, match=message):
        target.load_official_state(break_it(official(tiny(seed=1))))
    for key, value in target.state_dict().items():  # checked before anything was copied
        assert torch.equal(value, before[key]), key


def test_no_warning_when_shapes_match() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny(seed=2).load_official_state(official(tiny(seed=1)))
