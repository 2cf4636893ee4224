"""SGRAF: parameter counts (spec 3.5), names (spec 3.4), encoders (3.1-3.2), interface."""

from __future__ import annotations

import math

import pytest
import torch

from ncl.models import SGRAF
from ncl.models.layers import l2norm

# Spec 3.5, "Totals" table: (vocabulary, add_mask_token) -> (SGR, SAF).
OFFICIAL_COUNTS = {
    (8481, False): (18_109_175, 17_517_306),
    (8481, True): (18_109_475, 17_517_606),
    (11353, False): (18_970_775, 18_378_906),
    (11353, True): (18_971_075, 18_379_206),
    (12072, False): (19_186_475, 18_594_606),
    (12072, True): (19_186_775, 18_594_906),
}


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("vocab", "mask"), sorted(OFFICIAL_COUNTS))
@pytest.mark.parametrize("module_name", ["SGR", "SAF"])
def test_parameter_counts_match_spec_table(vocab, mask, module_name):
    with torch.device("meta"):  # official sizes without allocating or initialising memory
        model = SGRAF(vocab, module_name, add_mask_token=mask)
    want = OFFICIAL_COUNTS[(vocab, mask)][module_name == "SAF"]
    assert _count(model) == want
    assert model.vocab_size == vocab + mask
    assert _count(model) - _count(model.txt_enc.embed) == (15_564_875 if module_name == "SGR"
                                                           else 14_973_006)


def test_state_dict_names_are_the_official_ones():
    """Spec 3.4: the names an official checkpoint uses, per submodule."""
    with torch.device("meta"):
        sgr, saf = SGRAF(10, "SGR"), SGRAF(10, "SAF")
    assert set(sgr.img_enc.state_dict()) == {"fc.weight", "fc.bias"}
    rnn = {f"cap_rnn.{kind}_{part}_l0{suffix}" for kind in ("weight", "bias")
           for part in ("ih", "hh") for suffix in ("", "_reverse")}
    assert set(sgr.txt_enc.state_dict()) == {"embed.weight"} | rnn
    bn = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
    lin = ("weight", "bias")
    common = {f"v_global_w.embedding_{p}.{i}.{n}" for p in ("local", "global")
              for i, names in ((0, lin), (1, bn)) for n in names}
    common |= {f"{w}.embedding_common.0.{n}" for w in ("v_global_w", "t_global_w") for n in lin}
    common |= {f"t_global_w.embedding_{p}.0.{n}" for p in ("local", "global") for n in lin}
    common |= {f"{w}.{n}" for w in ("sim_tranloc_w", "sim_tranglo_w", "sim_eval_w") for n in lin}
    sgr_head = {f"SGR_module.{s}.{w}.{n}" for s in range(3)
                for w in ("graph_query_w", "graph_key_w", "sim_graph_w") for n in lin}
    saf_head = {f"SAF_module.attn_sim_w.{n}" for n in lin} | {f"SAF_module.bn.{n}" for n in bn}
    assert set(sgr.sim_enc.state_dict()) == common | sgr_head
    assert set(saf.sim_enc.state_dict()) == common | saf_head


def test_initialisation_follows_spec():
    torch.manual_seed(0)
    model = SGRAF(50, "SGR", img_dim=64, word_dim=8, embed_size=32, sim_dim=16, num_regions=4)
    fc = model.img_enc.fc
    bound = math.sqrt(6 / (64 + 32))
    assert fc.weight.abs().max() <= bound and fc.weight.abs().max() > 0.95 * bound
    assert (fc.bias == 0).all()
    emb = model.txt_enc.embed.weight
    assert emb.abs().max() <= 0.1 and emb.abs().max() > 0.09
    for name, module in model.sim_enc.named_modules():
        if isinstance(module, torch.nn.Linear):
            bound = math.sqrt(6 / (module.in_features + module.out_features))
            assert module.weight.abs().max() <= bound, name
            assert module.weight.abs().max() > 0.8 * bound, name  # not PyTorch's default
            assert (module.bias == 0).all(), name
        elif isinstance(module, torch.nn.BatchNorm1d):
            assert (module.weight == 1).all() and (module.bias == 0).all(), name


def test_encode_images_l2norm_and_no_imgnorm(make_model):
    images = torch.randn(3, 5, 10)
    model = make_model()
    want = images @ model.img_enc.fc.weight.T + model.img_enc.fc.bias
    torch.testing.assert_close(model.encode_images(images), want / want.norm(dim=-1, keepdim=True))
    raw = make_model(no_imgnorm=True)
    torch.testing.assert_close(raw.encode_images(images), want)


@pytest.mark.parametrize("bi_gru", [True, False])
def test_encode_captions_matches_one_caption_at_a_time(make_model, bi_gru):
    """Unsorted batch with extra padding equals each caption run alone through the GRU."""
    model = make_model(bi_gru=bi_gru).eval()
    lengths = torch.tensor([3, 6, 1, 4])
    tokens = torch.randint(1, 40, (4, 8)) * (torch.arange(8) < lengths.unsqueeze(1))
    out = model.encode_captions(tokens, lengths)
    assert out.shape == (4, 8, 12)
    for b, n in enumerate(lengths.tolist()):
        words = model.txt_enc.embed(tokens[b:b + 1, :n])
        hidden, _ = model.txt_enc.cap_rnn(words)  # (1, n, 12 or 24)
        if bi_gru:
            hidden = (hidden[..., :12] + hidden[..., 12:]) / 2
        torch.testing.assert_close(out[b, :n], l2norm(hidden[0]), atol=1e-6, rtol=1e-5)
        assert (out[b, n:] == 0).all()


def test_forward_is_similarity_of_encodings(make_model):
    model = make_model("SAF").eval()
    images = torch.randn(4, 5, 10)
    lengths = torch.tensor([2, 5, 3, 4])
    tokens = torch.randint(1, 40, (4, 6)) * (torch.arange(6) < lengths.unsqueeze(1))
    with torch.no_grad():
        scores = model(images, tokens, lengths)
        logits = model.similarity_logits(model.encode_images(images),
                                         model.encode_captions(tokens, lengths), lengths)
    assert scores.shape == (4, 4)
    torch.testing.assert_close(scores, torch.sigmoid(logits))
    assert ((scores > 0) & (scores < 1)).all()


def test_mask_token_row_is_usable(make_model):
    model = make_model(add_mask_token=True)
    assert model.vocab_size == 41 and model.txt_enc.embed.num_embeddings == 41
    out = model.encode_captions(torch.tensor([[1, 40, 2]]), torch.tensor([3]))
    assert torch.isfinite(out).all()
    with pytest.raises(ValueError, match="tokens must lie in"):
        make_model().encode_captions(torch.tensor([[1, 40, 2]]), torch.tensor([3]))


def test_similarity_plan():
    with torch.device("meta"):
        auto = SGRAF(10, chunk_size=16)
        loop = SGRAF(10, similarity_strategy="loop")
    assert auto.similarity_plan(torch.device("cpu")) == ("chunked", 2)
    assert auto.similarity_plan(torch.device("cuda")) == ("chunked", 16)
    assert loop.similarity_plan(torch.device("cuda")) == ("loop", 32)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"module_name": "SGRAF"}, "module_name"),
    ({"similarity_strategy": "fast"}, "similarity_strategy"),
    ({"embed_size": 0}, "embed_size"),
    ({"chunk_size": 0}, "chunk_size"),
    ({"dropout": 1.0}, "dropout"),
])
def test_bad_config_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SGRAF(10, **kwargs)


def test_bad_caption_inputs_raise(make_model):
    model = make_model()
    with pytest.raises(ValueError, match="long tensor"):
        model.encode_captions(torch.zeros(2, 3), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="lengths must lie in"):
        model.encode_captions(torch.ones(2, 3, dtype=torch.long), torch.tensor([4, 2]))
    with pytest.raises(ValueError, match="images must have shape"):
        model.encode_images(torch.zeros(2, 5, 11))
