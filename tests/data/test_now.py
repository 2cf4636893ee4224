"""NoW's layout (ncl.data.now), its synthetic generator (ncl.data.now_synthetic) and its
``ncl data check`` (ncl.datatools.now_check)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ncl.cli import main
from ncl.data.facts import DATASETS
from ncl.data.now import NowDataModule
from ncl.data.now_synthetic import NowSyntheticDataModule, cached_now_dataset, pieces
from ncl.errors import ConfigError, DataError

TOKENIZERS = ("bpe", "bert", "jieba")


def write_now(root: Path, lines: dict[str, list[str]] | None = None) -> Path:
    """A hand-made NoW folder: 4 train / 2 dev / 2 test images of 3 regions x 5 dims; every
    tokenizer's vocabulary has 10 ids with ``<start>`` at 7 and ``<end>`` at 8 (not ncl's
    1 and 2: the ids must come from the file, as the official ``vocab("<start>")``)."""
    data_dir = root / "h5100k_precomp"
    data_dir.mkdir(parents=True)
    words = ["<pad>", "<unk>", "x2", "x3", "x4", "x5", "x6", "<start>", "<end>", "x9"]
    (root / "vocab").mkdir()
    for tok in TOKENIZERS:
        payload = {"word2idx": {w: i for i, w in enumerate(words)},
                   "idx2word": {str(i): w for i, w in enumerate(words)}, "idx": len(words)}
        (root / "vocab" / f"now100k_precomp_vocab_{tok}.json").write_text(json.dumps(payload))
    lines = lines or {"train": ["2,3,4", "5", "9,9", "6,2"], "dev": ["3", "4,5"], "test": ["6", "2,,3"]}
    for split, caps in lines.items():
        np.save(data_dir / f"{split}_ims.npy", np.ones((len(caps), 3, 5), dtype=np.float32))
        for tok in TOKENIZERS:
            (data_dir / f"{split}_caps_{tok}.txt").write_text("\n".join(caps) + "\n")
        (data_dir / f"{split}_ids.txt").write_text("".join(f"{i}\n" for i in range(len(caps))))
    return root


def test_ids_are_wrapped_in_the_vocabulary_s_start_and_end(tmp_path: Path) -> None:
    dm = NowDataModule(str(write_now(tmp_path)), tokenizer="jieba", batch_size=2)
    dm.setup("fit")
    dm.setup("test")
    train = dm.train_split
    assert [list(train.tokens(c)) for c in range(4)] == [[7, 2, 3, 4, 8], [7, 5, 8], [7, 9, 9, 8],
                                                          [7, 6, 2, 8]]
    assert list(dm.test_data.tokens(1)) == [7, 2, 3, 8]  # an empty piece is skipped
    assert dm.vocab_size == 10 and not dm.clean_mask_known  # real noise: no ground truth
    assert (train.im_div, dm.val_data.n_images, dm.val_data.n_captions) == (1, 2, 2)
    assert dm.feature_shape() == (3, 5)


def test_synthetic_now_in_the_released_layout(synthetic_cache: Path) -> None:
    """File names, (N, 36, 768) features, one caption per image and the three tokenizations."""
    root, _ = cached_now_dataset("tiny", str(synthetic_cache), n_train=12, n_dev=6, n_test=6,
                                 num_regions=36, feature_dim=768)
    data_dir = root / "h5100k_precomp"
    for split, n in (("train", 12), ("dev", 6), ("test", 6)):
        assert np.load(data_dir / f"{split}_ims.npy", mmap_mode="r").shape == (n, 36, 768)
        assert len((data_dir / f"{split}_ids.txt").read_text().split()) == n
        for tok in TOKENIZERS:
            lines = (data_dir / f"{split}_caps_{tok}.txt").read_text().splitlines()
            assert len(lines) == n and all(c.isdigit() for line in lines for c in line.split(","))
    vocabs = {tok: json.loads((root / "vocab" / f"now100k_precomp_vocab_{tok}.json").read_text())
              for tok in TOKENIZERS}
    assert vocabs["bert"]["word2idx"]["<start>"] == 1 and vocabs["bert"]["idx"] == len(vocabs["bert"]["word2idx"])
    assert any(w.startswith("##") for w in vocabs["bert"]["word2idx"])
    assert not any(w.startswith("##") for w in vocabs["bpe"]["word2idx"])
    # jieba keeps words whole: its first train caption has fewer ids than bert's
    first = {tok: (data_dir / f"train_caps_{tok}.txt").read_text().splitlines()[0].split(",")
             for tok in TOKENIZERS}
    assert len(first["jieba"]) < len(first["bert"]) == len(first["bpe"])
    dm = NowDataModule(str(root), tokenizer="bpe", batch_size=4)
    dm.setup("fit")
    words = [vocabs["bpe"]["idx2word"][i] for i in first["bpe"]]
    assert list(dm.train_split.tokens(0)) == [1, *map(int, first["bpe"]), 2] and "<unk>" not in words
    assert dm.feature_shape() == (36, 768)


def test_stand_in_tokenizers_by_hand() -> None:
    assert pieces("bakomi", "bert") == ["ba", "##ko", "##mi"]
    assert pieces("bakomi", "bpe") == ["ba", "ko", "mi"]
    assert pieces("bakomi", "jieba") == ["bakomi"]
    assert pieces("the", "bert") == ["the"] and pieces("near", "bpe") == ["near"]


def test_official_facts_and_protocol(tmp_path: Path) -> None:
    """98,000 / 1,000 / 1,000 pairs, one caption each, 36 x 768, real noise; dev keeps 1,000
    images and the test is the whole matrix, one caption per image (the official evalrank with
    per_captions 1): every test image and caption is encoded once."""
    facts = DATASETS["h5100k_precomp"]
    assert dict(facts.splits) == {"train": (98_000, 98_000), "dev": (1_000, 1_000),
                                  "test": (1_000, 1_000)}
    assert facts.real_noise and facts.feature_shape == (36, 768)
    dm = NowDataModule(str(write_now(tmp_path)), batch_size=2)
    assert (dm.tokenizer, dm.dev_max_images, dm.test_split, dm.test_protocols) == ("bert", 1000, "test", ["1k"])
    dm.setup("test")
    images, captions = dm.test_dataloader()
    assert (len(images.dataset), len(captions.dataset), dm.test_data.im_div) == (2, 2, 1)


def test_wrong_tokenizer_is_one_error_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"data.tokenizer must be one of bpe, bert, jieba.*'wordpiece'"):
        NowDataModule(str(write_now(tmp_path)), tokenizer="wordpiece")


def test_missing_vocabulary_names_the_file_and_option(tmp_path: Path) -> None:
    root = write_now(tmp_path)
    (root / "vocab" / "now100k_precomp_vocab_bpe.json").unlink()
    with pytest.raises(DataError, match=r"now100k_precomp_vocab_bpe.json \(from data.tokenizer='bpe'\)"):
        NowDataModule(str(root), tokenizer="bpe")


def test_ids_outside_the_vocabulary_name_the_file_and_line(tmp_path: Path) -> None:
    root = write_now(tmp_path, {"train": ["2", "3,10", "4", "5"], "dev": ["3", "4"],
                                "test": ["6", "2"]})
    dm = NowDataModule(str(root), tokenizer="bert", batch_size=2)
    with pytest.raises(DataError, match=r"train_caps_bert.txt, line 2: token id 10 is outside "
                                        r"the vocabulary \(ids 0..9\)"):
        dm.setup("fit")


def test_data_check_on_a_synthetic_now_folder(synthetic_cache: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture) -> None:
    root, _ = cached_now_dataset("tiny", str(synthetic_cache))
    main(["data", "check", "--data_root", str(root), "--dataset", "h5100k_precomp"])
    out, err = capsys.readouterr()
    assert [line.split()[:3] for line in out.splitlines()[2:5]] == [["train", "60", "60"],
                                                                    ["dev", "30", "30"],
                                                                    ["test", "30", "30"]]
    assert "the official h5100k_precomp train split has 98,000" in err
    assert "the official features are 36 x 768" in err
    broken = tmp_path / "broken"
    shutil.copytree(root, broken)
    (broken / "h5100k_precomp" / "dev_caps_jieba.txt").write_text("1\n" * 29 + "999999\n")
    with pytest.raises(SystemExit) as exit_:
        main(["data", "check", "--data_root", str(broken), "--dataset", "h5100k_precomp"])
    assert exit_.value.code == 2
    assert "dev_caps_jieba.txt, line 30: token id 999999 is outside the vocabulary" in capsys.readouterr().err


def test_synthetic_twin_is_learnable_data_with_clean_pairs(synthetic_cache: Path) -> None:
    dm = NowSyntheticDataModule(preset="tiny", cache_dir=str(synthetic_cache), batch_size=16)
    dm.setup("fit")
    assert dm.clean_mask_known and dm.train_split.features.shape == (60, 6, 16)
