"""Evaluation batches of a backbone whose embeddings depend on their batch (IN2R's centred VSE):
the official pair batches (``encode_data``: pairs in caption order, the image kept from its
first caption's batch), the whole-split centring, today's separate loaders, and that the
choice comes from the backbone's declaration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import write_split, write_vocab

from ncl.data.datamodule import PrecompDataModule
from ncl.data.eval_batches import PairBatches
from ncl.data.precomp import load_split
from ncl.data.vocab import load_vocabulary
from ncl.errors import ConfigError
from ncl.evaluation.batching import networks_batching, with_split_statistics
from ncl.methods.base import RetrievalMethod
from ncl.models.contracts import eval_batching
from ncl.models.in2r_vse import In2rVSE, center
from ncl.models.vse_infinity import VSEInfinity

WORDS = ["a", "dog", "runs", "on", "the", "grass", "cat", "sits", "red", "ball"]
DIMS = {"img_dim": 8, "word_dim": 6, "embed_size": 8}


@pytest.fixture
def split(tmp_path: Path):
    """11 images x 5 captions of varied words and lengths (55 pairs)."""
    rng = np.random.default_rng(0)
    captions = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 7)))) for _ in range(55)]
    write_split(tmp_path / "toy_precomp", "dev", 11, captions=captions, seed=3)
    write_vocab(tmp_path / "vocab.json", WORDS)
    return load_split(tmp_path / "toy_precomp", "dev", load_vocabulary(tmp_path / "vocab.json"))


def method(eval_batches: str, n: int = 1) -> RetrievalMethod:
    torch.manual_seed(0)
    m = RetrievalMethod(len(WORDS) + 4, lambda v: In2rVSE(v, **DIMS, eval_batches=eval_batches),
                        n_networks=n)
    return m.eval()


def test_pair_batches_are_caption_order_with_each_image_kept_from_its_first_caption(split) -> None:
    batches = PairBatches(split, 16)
    assert [len(b) for b in batches.batches] == [16, 16, 16, 7]
    second = batches[1]  # captions 16..31: images 3..6, image 4 first at caption 20
    assert second["index"].tolist() == list(range(16, 32))
    assert second["images"].shape == (16, 4, 8)
    assert torch.equal(second["images"][0], torch.from_numpy(np.array(split.features[3])))
    want = [-1, -1, -1, -1, 4, -1, -1, -1, -1, 5, -1, -1, -1, -1, 6, -1]
    assert second["image_index"].tolist() == want
    assert [len(b) for b in PairBatches(split, 27).batches] == [27, 28]  # a last pair alone joins


def encoded(m: RetrievalMethod, loaders: list) -> tuple[torch.Tensor, torch.Tensor]:
    m.evaluation.reset()
    with torch.no_grad():
        for idx, loader in enumerate(loaders):
            for batch in loader:
                m.validation_step(batch, 0, idx)
    emb = m.evaluation.embeddings(5)
    emb = with_split_statistics(emb, m.nets)
    return emb.image(0), emb.caption(0)


def loaders_of(split, pairs: bool) -> list:
    dm = PrecompDataModule.__new__(PrecompDataModule)  # only the loaders: no files read
    dm.eval_batch_size, dm.num_workers, dm.eval_pairs = 16, 0, pairs
    return dm.eval_loaders(split)


def test_pairs_centre_each_official_batch(split) -> None:
    m = method("pairs")
    img, cap = encoded(m, loaders_of(split, pairs=True))
    net = m.nets[0]
    # by hand, as the official encode_data: every batch of 16 pairs encoded and centred whole
    want_img, want_cap = torch.zeros(11, 8), torch.zeros(55, 8)
    with torch.no_grad(), net.batch_free():
        for start in range(0, 55, 16):
            c = np.arange(start, min(start + 16, 55))
            pb = PairBatches(split, 16)[start // 16]
            i_raw = net.encode_images(pb["images"])
            c_raw = net.encode_captions(pb["tokens"], pb["lengths"])
            want_cap[c] = center(c_raw)
            first = c % 5 == 0
            want_img[c[first] // 5] = center(i_raw)[torch.from_numpy(first)]
    assert torch.allclose(cap, want_cap, atol=1e-6)
    assert torch.allclose(img, want_img, atol=1e-6)


def test_split_centres_over_the_whole_split_and_separate_keeps_todays_loaders(split) -> None:
    m = method("split")
    img, cap = encoded(m, loaders_of(split, pairs=False))
    net = m.nets[0]
    with torch.no_grad(), net.batch_free():
        pb = PairBatches(split, 64)[0]  # every pair at once
        raw_img = net.encode_images(torch.from_numpy(np.array(split.features)))
        raw_cap = net.encode_captions(pb["tokens"], pb["lengths"])
    assert torch.allclose(img, center(raw_img), atol=1e-6)
    assert torch.allclose(cap, center(raw_cap), atol=1e-6)

    sep = method("separate")
    sep_img, sep_cap = encoded(sep, loaders_of(split, pairs=False))
    with torch.no_grad():  # images in batches of 16 images, captions of 16 captions
        want = torch.cat([sep.nets[0].encode_images(torch.from_numpy(np.array(split.features[s:s + 16])))
                          for s in range(0, 11, 16)])
    assert torch.allclose(sep_img, want, atol=1e-6)
    assert torch.allclose(sep_img, img, atol=1e-6)  # 11 images: one batch, the whole split
    assert not torch.allclose(sep_cap, cap, atol=1e-3)  # 55 captions in 4 batches: not the split's


def test_the_backbone_declares_its_batching() -> None:
    assert eval_batching(In2rVSE(14, **DIMS)) == "pairs"  # the official default
    assert eval_batching(In2rVSE(14, **DIMS, eval_batches="split")) == "split"
    # no centring: nothing depends on the batch, each sample is encoded once
    assert eval_batching(In2rVSE(14, **DIMS, batch_center=False)) == "separate"
    assert eval_batching(VSEInfinity(14, **DIMS)) == "separate"
    with pytest.raises(ConfigError, match="eval_batches"):
        networks_batching([In2rVSE(14, **DIMS), In2rVSE(14, **DIMS, eval_batches="split")])
    with pytest.raises(ConfigError, match="model.backbone.init_args.eval_batches"):
        In2rVSE(14, **DIMS, eval_batches="batches")
