"""The low-memory (chunked) synthetic writer produces the same files as the in-RAM one."""

from pathlib import Path

import numpy as np
import pytest

from ncl.data.synthetic import generate, preset

FILES = ("train_ims.npy", "dev_ims.npy", "test_ims.npy", "train_caps.txt", "dev_caps.txt",
         "test_caps.txt")


@pytest.mark.parametrize("chunk_images", [1, 7, 1000])
def test_chunked_writer_is_byte_identical(tmp_path: Path, chunk_images: int) -> None:
    spec = preset("tiny", n_train=40, n_dev=9, n_test=8)
    plain = generate(tmp_path / "plain", spec)
    chunked = generate(tmp_path / "chunked", spec, chunk_images=chunk_images)
    for name in FILES:
        assert (plain / name).read_bytes() == (chunked / name).read_bytes(), name
    vocab = Path("vocab") / "synthetic_precomp_vocab.json"
    assert (tmp_path / "plain" / vocab).read_bytes() == (tmp_path / "chunked" / vocab).read_bytes()
    # Nothing but the dataset is left behind (the scratch file is removed).
    assert sorted(p.name for p in chunked.iterdir()) == sorted([*FILES, "spec.json"])
    feats = np.load(chunked / "train_ims.npy", mmap_mode="r")
    assert feats.shape == (40, spec.num_regions, spec.feature_dim) and feats.dtype == np.float32
    assert len(np.unique(feats.reshape(40, -1), axis=0)) == 40  # rows are really shuffled images


def test_negative_chunk_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="chunk_images"):
        generate(tmp_path, preset("tiny"), chunk_images=-1)
