from pathlib import Path

import numpy as np

from ncl.data.datamodule import SyntheticDataModule
from ncl.data.precomp import load_split
from ncl.data.synthetic import generate, preset
from ncl.data.tokenize import tokenize
from ncl.data.vocab import load_vocabulary


def test_layout_and_determinism(tmp_path: Path) -> None:
    spec = preset("tiny")
    a = generate(tmp_path / "a", spec)
    b = generate(tmp_path / "b", spec)
    for name in ("train_ims.npy", "dev_caps.txt", "test_caps.txt"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    vocab = load_vocabulary(tmp_path / "a" / "vocab" / "synthetic_precomp_vocab.json")
    split = load_split(a, "train", vocab)
    assert split.features.shape == (spec.n_train, spec.num_regions, spec.feature_dim)
    assert split.im_div == spec.captions_per_image
    other = generate(tmp_path / "c", preset("tiny", seed=1))
    assert (other / "train_caps.txt").read_bytes() != (a / "train_caps.txt").read_bytes()


def test_caption_statistics_and_vocabulary_rule(tmp_path: Path) -> None:
    data = generate(tmp_path, preset("tiny", n_train=300))
    captions = (data / "train_caps.txt").read_text().splitlines()
    lengths = np.array([len(tokenize(c)) for c in captions])
    assert 5 <= lengths.mean() <= 14  # about 10-12 tokens, like F30K/COCO
    vocab = load_vocabulary(tmp_path / "vocab" / "synthetic_precomp_vocab.json")
    counts: dict[str, int] = {}
    for c in captions + (data / "dev_caps.txt").read_text().splitlines():
        for t in tokenize(c):
            counts[t] = counts.get(t, 0) + 1
    assert all(counts.get(w, 0) >= 4 for w in vocab.words[4:])
    assert {w for w, n in counts.items() if n >= 4} <= set(vocab.words)


def test_captions_are_grounded_in_image_regions(tmp_path: Path) -> None:
    """Images whose captions share more content words have more similar features.

    The planted signal: a concept word in a caption means its prototype is in some region,
    so mean-pooled features of two images correlate with their shared concepts.
    """
    data = generate(tmp_path, preset("tiny", n_train=120))
    feats = np.load(data / "train_ims.npy")
    caps = (data / "train_caps.txt").read_text().splitlines()
    function_words = set("a the one this in at on near with beside behind next to and , .".split())
    words = [set(tokenize(" ".join(caps[5 * i: 5 * i + 5]))) - function_words for i in range(len(feats))]
    pooled = feats.mean(axis=1)
    pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    sim = pooled @ pooled.T
    overlap = np.array([[len(words[i] & words[j]) for j in range(len(feats))] for i in range(len(feats))])
    off = ~np.eye(len(feats), dtype=bool)
    by_overlap = [sim[off & (overlap == k)].mean() for k in range(4)]
    assert all(b > a + 0.03 for a, b in zip(by_overlap, by_overlap[1:])), by_overlap


def test_synthetic_datamodule_caches(tmp_path: Path) -> None:
    dm = SyntheticDataModule(preset="tiny", cache_dir=str(tmp_path), batch_size=16)
    again = SyntheticDataModule(preset="tiny", cache_dir=str(tmp_path), batch_size=16)
    assert dm.data_dir == again.data_dir and len(list(tmp_path.iterdir())) == 1
    dm.setup("fit")
    assert dm.feature_shape() == (6, 16)
