"""IN2R's VSE network: batch centring (training and evaluation), the text head, dropout only
in training, and the GloVe path refused in one line."""

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
                                                         ("dropout", 1.0, "dropout")])
def test_bad_options_are_one_line_naming_the_option(option: str, value: object, words: str) -> None:
    with pytest.raises(ConfigError, match=f"model.backbone.init_args.{option}") as err:
        In2rVSE(20, **DIMS, **{option: value})
    assert words in str(err.value) and "\n" not in str(err.value)
