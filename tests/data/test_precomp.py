import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from ncl.data import precomp
from ncl.data.datamodule import PrecompDataModule
from ncl.data.datasets import PairDataset, collate
from ncl.data.precomp import load_split
from ncl.data.vocab import END, START, build_vocabulary, load_vocabulary
from ncl.errors import DataError, NclWarning

from helpers import write_split


@pytest.fixture
def vocab(tiny_root: Path):
    return load_vocabulary(tiny_root / "vocab" / "toy_precomp_vocab.json")


def test_split_is_memory_mapped_and_encoded(tiny_root: Path, vocab) -> None:
    split = load_split(tiny_root / "toy_precomp", "train", vocab)
    assert isinstance(split.features, np.memmap)
    assert (split.n_images, split.n_captions, split.im_div) == (20, 100, 5)
    assert (split.num_regions, split.feature_dim) == (4, 8)
    ids = split.tokens(3).tolist()
    assert ids[0] == START and ids[-1] == END and len(ids) == 2 + 8


def test_tokens_are_computed_once(tiny_root: Path, vocab, monkeypatch) -> None:
    split = load_split(tiny_root / "toy_precomp", "train", vocab)
    monkeypatch.setattr(precomp, "tokenize", lambda s: pytest.fail("re-tokenised per item"))
    batch = collate([PairDataset(split, np.arange(100) // 5)[i] for i in range(4)])
    assert batch["tokens"].shape[0] == 4 and batch["images"].shape == (4, 4, 8)


def test_dev_truncation(tiny_root: Path, vocab) -> None:
    split = load_split(tiny_root / "toy_precomp", "dev", vocab, max_images=4)
    assert (split.n_images, split.n_captions) == (4, 20)


def test_collate_pads_with_zero_and_keeps_index() -> None:
    items = [{"tokens": torch.tensor([1, 5, 2]), "index": 7}, {"tokens": torch.tensor([1, 2]), "index": 3}]
    batch = collate(items)
    assert batch["tokens"].tolist() == [[1, 5, 2], [1, 2, 0]]
    assert batch["lengths"].tolist() == [3, 2] and batch["index"].tolist() == [7, 3]


def test_cc152k_tsv_uses_csv_quoting(tmp_path: Path) -> None:
    data_dir = tmp_path / "cc_precomp"
    np.save(data_dir.mkdir() or data_dir / "test_ims.npy", np.zeros((3, 2, 4), np.float32))
    # The quoted field spans a tab, which a naive split('\t') would cut (spec 1.1).
    (data_dir / "test_caps.tsv").write_text(
        'a_1\tplain caption\n'
        'b_2\t"quoted\twith tab" here\n'
        'c_3\t"he said ""hi"""\n', encoding="utf-8")
    vocab = build_vocabulary([])
    split = load_split(data_dir, "test", vocab)
    assert split.captions == ["plain caption", 'quoted\twith tab here', 'he said "hi"']
    assert split.im_div == 1


def test_real_cc152k_captions_parse(shared_data: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "cc152k_precomp"
    data_dir.mkdir()
    text = (shared_data / "cc152k" / "test_caps_img_urls.csv").read_text(encoding="utf-8")
    (data_dir / "test_caps.tsv").write_text(text, encoding="utf-8")
    np.save(data_dir / "test_ims.npy", np.zeros((1000, 2, 4), np.float32))
    vocab = load_vocabulary(shared_data / "vocab" / "cc152k_precomp_vocab.json")
    split = load_split(data_dir, "test", vocab)
    assert split.n_captions == 1000 and split.captions[0].startswith("from the program :")
    unk_rate = float((split.token_ids == 3).mean())
    assert unk_rate < 0.05  # the official vocabulary covers its own test captions


# --------------------------------------------------------------- bad input, each one clear
def _expect(tmp_path: Path, message: str, split: str = "train") -> None:
    with pytest.raises(DataError, match=message) as err:
        load_split(tmp_path / "toy_precomp", split, build_vocabulary([]))
    return str(err.value)


def test_missing_split(tiny_root: Path) -> None:
    msg = _expect(tiny_root, "feature file not found", split="testall")
    assert "testall_ims.npy" in msg


def test_missing_captions(tiny_root: Path) -> None:
    (tiny_root / "toy_precomp" / "train_caps.txt").unlink()
    assert "train_caps.txt" in _expect(tiny_root, "caption file not found")


def test_unknown_split(tiny_root: Path) -> None:
    _expect(tiny_root, "unknown split", split="validation")


def test_wrong_rank(tiny_root: Path) -> None:
    np.save(tiny_root / "toy_precomp" / "train_ims.npy", np.zeros((20, 32), np.float32))
    assert "train_ims.npy" in _expect(tiny_root, "rank 2")


def test_wrong_dtype(tiny_root: Path) -> None:
    np.save(tiny_root / "toy_precomp" / "train_ims.npy", np.zeros((20, 4, 8), np.int32))
    _expect(tiny_root, "dtype int32")


def test_caption_count_not_multiple(tiny_root: Path) -> None:
    write_split(tiny_root / "toy_precomp", "train", 20, captions=["a dog"] * 99)
    _expect(tiny_root, "99 captions, which is not a whole multiple of the 20 images")


def test_non_utf8_captions(tiny_root: Path) -> None:
    path = tiny_root / "toy_precomp" / "train_caps.txt"
    path.write_bytes(b"a dog\n" * 3 + b"caf\xe9 latin-1\n" + b"a dog\n" * 96)
    msg = _expect(tiny_root, "not UTF-8")
    assert "line 4" in msg and "train_caps.txt" in msg


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_features(tiny_root: Path, bad: float) -> None:
    feats = np.zeros((20, 4, 8), np.float32)
    feats[19, 2, 3] = bad  # the last image is always among the sampled ones
    np.save(tiny_root / "toy_precomp" / "train_ims.npy", feats)
    _expect(tiny_root, "NaN or Inf .* image 19")


def test_empty_tsv_row(tmp_path: Path) -> None:
    data_dir = tmp_path / "toy_precomp"
    data_dir.mkdir()
    np.save(data_dir / "train_ims.npy", np.zeros((2, 2, 4), np.float32))
    (data_dir / "train_caps.tsv").write_text("id_1\tok\nno-tab-here\n", encoding="utf-8")
    _expect(tmp_path, "line 2: expected 'id<TAB>caption'")


# --------------------------------------------------------------- DataModule
def test_datamodule_noise_is_saved_with_hash(tiny_root: Path, tmp_path: Path) -> None:
    dm = PrecompDataModule(str(tiny_root), "toy_precomp", batch_size=8, noise_type="image",
                           noise_ratio=0.5, noise_seed=1)
    dm.setup("fit")
    assert dm.vocab_size == 10
    assert dm.noise.format == "image" and 0 < dm.noise.noise_rate <= 0.5
    assert dm.hparams["noise_sha256"] == dm.noise.sha256
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"images", "tokens", "lengths", "index"}  # no clean flag in batches
    images, captions = dm.val_dataloader()
    assert len(images.dataset) == 6 and len(captions.dataset) == 30
    assert dm.feature_shape() == (4, 8)


def test_datamodule_missing_dataset_message(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="dataset folder not found.*Preparing the datasets"):
        PrecompDataModule(str(tmp_path), "coco_precomp")


def test_datamodule_missing_vocab_message(tiny_root: Path) -> None:
    (tiny_root / "vocab" / "toy_precomp_vocab.json").unlink()
    with pytest.raises(DataError, match="vocabulary file not found"):
        PrecompDataModule(str(tiny_root), "toy_precomp")


def test_datamodule_drops_a_final_batch_of_one(tiny_root: Path) -> None:
    dm = PrecompDataModule(str(tiny_root), "toy_precomp", batch_size=33)  # 100 = 3*33 + 1
    dm.setup("fit")
    assert all(len(b["index"]) == 33 for b in dm.train_dataloader())


def test_datamodule_train_plan_hook(tiny_root: Path) -> None:
    dm = PrecompDataModule(str(tiny_root), "toy_precomp", batch_size=10)
    dm.setup("fit")
    seen = []
    dm.use_train_plan(lambda pairs: seen.append(len(pairs)) or ["planned batch"])
    assert dm.train_dataloader() == ["planned batch"] and seen == [100]  # the noisy pairs
    dm.use_train_plan(None)
    assert len(list(dm.train_dataloader())) == 10  # the default shuffled loader again


# --------------------------------------------------------------- full NaN/Inf scan (issue 9)
def _poison(tiny_root: Path, split: str, images: list[int], n_images: int = 20) -> Path:
    path = tiny_root / "toy_precomp" / f"{split}_ims.npy"
    feats = np.load(path)
    for i in images:
        feats[i, 1, 2] = np.nan if i % 2 else np.inf
    np.save(path, feats)
    return path


def test_full_scan_finds_what_the_sample_misses(tiny_root: Path, vocab, monkeypatch, capsys) -> None:
    path = _poison(tiny_root, "train", [3, 4, 7, 8, 11, 12, 13])
    load_split(tiny_root / "toy_precomp", "train", vocab, nan_check_samples=2)  # sees 0 and 19 only
    monkeypatch.setattr(precomp, "SCAN_CHUNK_BYTES", 3 * 4 * 8 * 4)  # 3 images a chunk
    with pytest.raises(DataError) as err:
        load_split(tiny_root / "toy_precomp", "train", vocab, nan_check_samples=2, nan_check="full")
    assert str(err.value) == (f"feature file {path} holds NaN or Inf values in 7 of 20 images: "
                              f"images 3, 4, 7, 8, 11 (and 2 more) (full scan)")
    assert "NaN/Inf scan of train_ims.npy" in capsys.readouterr().err  # the progress bar


def test_full_scan_of_dev_covers_the_used_images_only(tiny_root: Path, vocab) -> None:
    _poison(tiny_root, "dev", [5])
    split = load_split(tiny_root / "toy_precomp", "dev", vocab, max_images=4, nan_check="full",
                       progress=False)
    assert split.n_images == 4
    with pytest.raises(DataError, match=r"in 1 of 6 images: image 5 \(full scan\)"):
        load_split(tiny_root / "toy_precomp", "dev", vocab, nan_check="full", progress=False)


def test_nan_check_off_and_sample_option(tiny_root: Path, vocab) -> None:
    _poison(tiny_root, "train", [19])
    load_split(tiny_root / "toy_precomp", "train", vocab, nan_check="off")
    with pytest.raises(DataError, match="image 19"):
        load_split(tiny_root / "toy_precomp", "train", vocab, nan_check="sample")
    load_split(tiny_root / "toy_precomp", "train", vocab, nan_check_samples=0)  # the old "off"


def test_datamodule_nan_check_option(tiny_root: Path) -> None:
    path = _poison(tiny_root, "train", [5])
    dm = PrecompDataModule(str(tiny_root), "toy_precomp", batch_size=8, nan_check_samples=3)
    dm.setup("fit")  # the sample is images 0, 9 and 19
    dm = PrecompDataModule(str(tiny_root), "toy_precomp", batch_size=8, nan_check="full")
    with pytest.raises(DataError, match=f"{path}.*image 5 "):
        dm.setup("fit")


# --------------------------------------------------------------- empty captions (spec 7.2)
def test_empty_caption_lines_warn_and_are_kept(tiny_root: Path, vocab) -> None:
    caps = [f"a dog {i}" for i in range(100)]
    caps[2] = caps[6] = ""
    caps[50] = "   "
    write_split(tiny_root / "toy_precomp", "train", 20, captions=caps)
    with pytest.warns(NclWarning) as record:
        split = load_split(tiny_root / "toy_precomp", "train", vocab)
    assert len(record) == 1
    message = str(record[0].message)
    assert "train_caps.txt has 3 empty caption(s) (lines 3, 7, 51)" in message
    assert "\n" not in message
    assert split.n_captions == 100 and split.tokens(2).tolist() == [START, END]  # as official


def test_empty_tsv_captions_warn(tmp_path: Path) -> None:
    data_dir = tmp_path / "toy_precomp"
    data_dir.mkdir()
    np.save(data_dir / "train_ims.npy", np.zeros((3, 2, 4), np.float32))
    (data_dir / "train_caps.tsv").write_text('id_1\tok\nid_2\t\nid_3\t""\n', encoding="utf-8")
    with pytest.warns(NclWarning, match=r"train_caps.tsv has 2 empty caption\(s\) \(lines 2, 3\)"):
        split = load_split(data_dir, "train", build_vocabulary([]))
    assert split.captions == ["ok", "", ""]


def test_no_warning_without_empty_captions(tiny_root: Path, vocab) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", NclWarning)
        load_split(tiny_root / "toy_precomp", "train", vocab)


# --------------------------------------------------------------- logged noise provenance
def test_noise_provenance_reaches_the_logged_hyperparameters(tiny_root: Path, tmp_path: Path) -> None:
    noise_file = tmp_path / "noise.npy"
    np.save(noise_file, np.random.RandomState(0).permutation(20))  # image level, format B
    dm = PrecompDataModule(str(tiny_root), "toy_precomp", batch_size=8, noise_file=str(noise_file))
    assert "noise_sha256" not in dm.hparams_initial  # unknown before setup
    dm.setup("fit")
    # Lightning hands hparams_initial to every logger (CSV hparams.yaml, W&B config) after setup.
    logged = dm.hparams_initial
    assert logged["noise_sha256"] == dm.noise.sha256 == dm.hparams["noise_sha256"]
    assert logged["noise_format"] == "image" and 0 < logged["noise_rate"] <= 1
    assert str(noise_file) in logged["noise_source"]
    assert logged["batch_size"] == 8  # the constructor arguments are still there
