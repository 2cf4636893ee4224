"""IN2R's VSE network: batch centring (training and evaluation), the text head, dropout only
in training, and GloVe vectors from a local file (the official initialisation) on a small GloVe
file written here."""

from __future__ import annotations

import pytest
import torch

from ncl.errors import ConfigError
from ncl.models.in2r_vse import In2rVSE, center
from ncl.models.vse_infinity import VSEInfinity

DIMS = {"img_dim": 8, "word_dim": 6, "embed_size": 8}


def batch(n: int = 4, generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
    g = generator or torch.Generator().manual_seed(0)
    images = torch.randn(n, 5, 8, generator=g)
    tokens = torch.randint(1, 20, (n, 6), generator=g)
    lengths = torch.tensor([6, 5, 4, 6, 3, 2][:n])
    return images, tokens, lengths


def test_center_subtracts_the_batch_mean_and_normalises() -> None:
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    mean = x.mean(dim=0)
    want = torch.stack([(r - mean) / (r - mean).norm() for r in x])
    assert torch.allclose(center(x), want, atol=1e-6)
    one = torch.tensor([[0.6, 0.8]])
    assert torch.equal(center(one), one)  # a batch of one would become the zero vector


def test_embeddings_are_centred_in_train_and_eval() -> None:
    torch.manual_seed(0)
    net = In2rVSE(20, **DIMS).eval()
    images, tokens, lengths = batch()
    img, cap = net.encode_images(images), net.encode_captions(tokens, lengths)
    plain = In2rVSE(20, **DIMS, batch_center=False).eval()
    plain.load_state_dict(net.state_dict())
    assert torch.allclose(img, center(plain.encode_images(images)), atol=1e-6)
    assert torch.allclose(cap, center(plain.encode_captions(tokens, lengths)), atol=1e-6)
    assert torch.allclose(img.norm(dim=1), torch.ones(4), atol=1e-5)
    # a batch's embedding depends on its batch mates (official forward_emb at evaluation too)
    assert not torch.allclose(net.encode_images(images[:2])[0], img[0], atol=1e-4)


def test_text_head_and_dropout_in_training_only() -> None:
    torch.manual_seed(0)
    net = In2rVSE(20, **DIMS)
    assert isinstance(net, VSEInfinity)  # the evaluation and division contracts hold
    assert net.txt_enc.fc is not None and net.txt_enc.mlp is not None
    assert In2rVSE(20, **DIMS, text_head=False).txt_enc.fc is None
    images, tokens, lengths = batch()
    net.eval()
    assert torch.equal(net.encode_images(images), net.encode_images(images))
    net.train()
    assert not torch.equal(net.encode_images(images), net.encode_images(images))  # dropout 0.3
    assert not torch.equal(net.encode_captions(tokens, lengths), net.encode_captions(tokens, lengths))
    assert net.vocab_size == 21  # <mask> added (the official vocab.add_word('<mask>'))


@pytest.mark.parametrize(("option", "value", "words"), [("glove_path", "glove.840B.300d.txt", "GloVe"),
                                                         ("dropout", 1.0, "dropout"),
                                                         ("eval_batches", "images", "pairs")])
def test_bad_options_are_one_line_naming_the_option(option: str, value: object, words: str) -> None:
    with pytest.raises(ConfigError, match=f"model.backbone.init_args.{option}") as err:
        In2rVSE(20, **DIMS, **{option: value})
    assert words in str(err.value) and "\n" not in str(err.value)


#: A GloVe file in the standard text format (word, then 6 floats); ". . ." is one of the 840B
#: release's words with spaces in it, "dogs" the fallback key of "dog's", "red" of "red/blue".
GLOVE = """the 0.1 0.2 0.3 0.4 0.5 0.6
dog 1 2 3 4 5 6
. . . 9 9 9 9 9 9
dogs -1 -2 -3 -4 -5 -6
red 0.5 0.5 0.5 0.5 0.5 0.5
grass 7 7 7 7 7 7
"""
VOCAB = ["<pad>", "<start>", "<end>", "<unk>", "dog", "dog's", "red/blue", ".", "the", "cat", "<mask>"]


def glove_file(tmp_path, text: str = GLOVE, name: str = "glove.6d.txt"):
    path = tmp_path / name
    if name.endswith(".gz"):
        import gzip
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["glove.6d.txt", "glove.6d.txt.gz"])
def test_glove_vectors_replace_the_rows_of_the_words_the_file_holds(tmp_path, name: str) -> None:
    torch.manual_seed(0)
    net = In2rVSE(10, **DIMS, glove_path=str(glove_file(tmp_path, name=name)))
    before = net.txt_enc.embed.weight.detach().clone()
    assert net.vocab_size == len(VOCAB)  # 10 words + <mask>
    assert net.load_glove(VOCAB) == 4  # dog, dog's (as dogs), red/blue (as red), the
    after = net.txt_enc.embed.weight.detach()
    assert torch.equal(after[4], torch.arange(1.0, 7.0))
    assert torch.equal(after[5], -torch.arange(1.0, 7.0))  # "dog's" -> "dogs" (official fallback)
    assert torch.equal(after[6], torch.full((6,), 0.5))  # "red/blue" -> "red"
    assert torch.allclose(after[8], torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]))
    kept = [0, 1, 2, 3, 7, 9, 10]  # specials, ".", "cat", <mask>: their U(-0.1, 0.1) rows
    assert torch.equal(after[kept], before[kept])  # "." is not the word ". . ."
    torch.manual_seed(0)  # the initial draw is the same with and without GloVe
    plain = In2rVSE(10, **DIMS)
    assert torch.equal(plain.txt_enc.embed.weight[kept], before[kept])
    assert all(torch.equal(a, b) for (n, a), (_, b) in zip(plain.state_dict().items(), net.state_dict().items())
               if n != "txt_enc.embed.weight")


def test_glove_errors_are_one_line_naming_the_option(tmp_path) -> None:
    with pytest.raises(ConfigError, match="model.backbone.init_args.glove_path.*no GloVe file"):
        In2rVSE(10, **DIMS, glove_path=str(tmp_path / "missing.txt"))
    with pytest.raises(ConfigError, match="6 values.*word_dim=5") as err:
        In2rVSE(10, **{**DIMS, "word_dim": 5}, glove_path=str(glove_file(tmp_path)))
    assert "\n" not in str(err.value)
    broken = glove_file(tmp_path, GLOVE + "the_end 1 2 x\ncat 1 2 3\n", "broken.txt")
    net = In2rVSE(10, **DIMS, glove_path=str(broken))  # the first line is well-formed
    with pytest.raises(ConfigError, match="line 8.*'cat'.*6 numbers"):
        net.load_glove(VOCAB)


def test_the_method_loads_glove_into_both_networks_or_warns(tmp_path) -> None:
    from ncl.data.vocab import Vocabulary
    from ncl.errors import NclWarning
    from ncl.methods.in2r_support import load_word_vectors

    vocab = Vocabulary(tuple(VOCAB[:-1]))  # the file's words; <mask> is the embeddings' extra row
    path = str(glove_file(tmp_path))
    nets = torch.nn.ModuleList([In2rVSE(10, **DIMS, glove_path=path) for _ in range(2)])
    assert load_word_vectors(nets, vocab) == 4
    assert all(torch.equal(net.txt_enc.embed.weight[4], torch.arange(1.0, 7.0)) for net in nets)
    with pytest.warns(NclWarning, match="GloVe 840B"):
        assert load_word_vectors(torch.nn.ModuleList([In2rVSE(10, **DIMS)]), vocab) is None
