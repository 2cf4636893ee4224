import json
from pathlib import Path

import pytest

from ncl.data.vocab import END, START, UNK, build_vocabulary, load_vocabulary
from ncl.errors import DataError

OFFICIAL_SIZES = {"f30k": 8481, "coco": 11353, "cc152k": 12072}


@pytest.mark.parametrize("name", sorted(OFFICIAL_SIZES))
def test_official_vocabularies_load(shared_data: Path, name: str) -> None:
    path = shared_data / "vocab" / f"{name}_precomp_vocab.json"
    vocab = load_vocabulary(path)
    raw = json.loads(path.read_text())
    assert len(vocab) == OFFICIAL_SIZES[name] == raw["idx"]
    # Ids are taken from the file as they are (order is not rebuildable, spec 1.4).
    for word, idx in list(raw["word2idx"].items())[:50]:
        assert vocab.word_id(word) == idx
    assert vocab.words[:4] == ("<pad>", "<start>", "<end>", "<unk>")


def test_f30k_known_ids(shared_data: Path) -> None:
    vocab = load_vocabulary(shared_data / "vocab" / "f30k_precomp_vocab.json")
    assert vocab.word_id("raining") == 4 and vocab.word_id("writings") == 5


def test_encode_wraps_and_maps_unknown() -> None:
    vocab = build_vocabulary([["a", "dog"]] * 4)
    assert vocab.encode(["a", "zebra", "dog"]) == [START, vocab.word_id("a"), UNK, vocab.word_id("dog"), END]
    assert vocab.encode([]) == [START, END]


def test_build_applies_min_count() -> None:
    vocab = build_vocabulary([["common"]] * 4 + [["rare"]] * 3)
    assert "common" in vocab and "rare" not in vocab


def test_roundtrip(tmp_path: Path) -> None:
    vocab = build_vocabulary([["x", "y"]] * 5)
    vocab.to_json(tmp_path / "v.json")
    assert load_vocabulary(tmp_path / "v.json") == vocab


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid UTF-8 JSON"),
    ('{"idx2word": {}}', "no 'word2idx'"),
    ('{"word2idx": {"<pad>": 0, "<start>": 1, "<end>": 2, "hello": 3}, "idx": 4}', "special token <unk>"),
    ('{"word2idx": {"<pad>": 0, "<start>": 1, "<end>": 2, "<unk>": 3}, "idx": 7}', "'idx' is 7"),
    ('{"word2idx": {"<pad>": 0, "<start>": 1, "<end>": 2, "<unk>": 5}}', "ids must be"),
])
def test_malformed_vocabulary_is_refused(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad_vocab.json"
    path.write_text(content)
    with pytest.raises(DataError, match=message) as err:
        load_vocabulary(path)
    assert str(path) in str(err.value)


def test_missing_vocabulary(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        load_vocabulary(tmp_path / "absent.json")
