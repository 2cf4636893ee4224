"""Tests for ncl.data.tokenize (spec 1.5): equivalence with nltk.word_tokenize(c.lower()).

ncl.data.tokenize is NLTK's word tokenizer plus a Punkt sentence tokenizer whose parameters
are set in code. The evidence:

* hand-written cases whose expected tokens were written out by hand, also checked against
  NLTK's public ``word_tokenize(..., preserve_line=True)`` for single sentences;
* frozen tokens and ids: what the standard-library reimplementation that ncl shipped before
  (issue 24) produced for the hand-written cases, 1,500 seeded random strings and the 1,000
  real CC152K test captions, under the three shipped vocabularies (tokenize_frozen_ids.json);
* that nothing is loaded from NLTK's data path, and that an NLTK with older word rules is
  refused;
* the full ``word_tokenize`` with the real Punkt model, only where that model is installed.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest

from ncl.data.tokenize import _tokenizers, split_sentences, tokenize, treebank_words

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
CC152K_TEST = SHARED_DATA / "cc152k" / "test_caps_img_urls.csv"
VOCABULARIES = {name: SHARED_DATA / "vocab" / f"{name}_precomp_vocab.json"
                for name in ("f30k", "coco", "cc152k")}
# Tokens and token ids recorded with the standard-library tokenizer that preceded the NLTK-based
# one (issue 24); written by running this file as a script (see _write_frozen).
FROZEN = Path(__file__).with_name("tokenize_frozen_ids.json")

# Captions on which tokenize() must differ from word_tokenize(..., preserve_line=True),
# because the full word_tokenize splits sentences first. Keyed by CC152K id.
SENTENCE_SPLIT_EXCEPTIONS: dict[str, str] = {
    "2075_1022889534": (
        "'... fluffy dog. :)': 'dog' is not a Punkt abbreviation and whitespace plus a token "
        "follow its period, so Punkt ends the sentence there and Treebank splits the now final "
        "period: 'dog', '.'; without sentence splitting the token stays 'dog.'"
    ),
}

# (caption, expected tokens joined by spaces) for single-sentence captions, by hand.
WORD_CASES: list[tuple[str, str]] = [
    ("", ""),
    ("   \t  ", ""),
    ("A man riding a horse.", "a man riding a horse ."),
    ("Two dogs play in the snow", "two dogs play in the snow"),
    ("a dog's toy", "a dog 's toy"),
    ("It can't fly", "it ca n't fly"),
    ("they're sure we'll win, i'm told", "they 're sure we 'll win , i 'm told"),
    ("you've got it, he'd say", "you 've got it , he 'd say"),
    ("I'M DONE", "i 'm done"),
    ("it's 5 o'clock", "it 's 5 o'clock"),
    ("I cannot wait", "i can not wait"),
    ("gonna gimme lemme gotta wanna go", "gon na gim me lem me got ta wan na go"),
    ("more'n enough, d'ye see", "more 'n enough , d 'ye see"),
    # The opening-quote rule runs first and pre-empts the 'tis split.
    ("'tis the season", "' tis the season"),
    ('he said "hello there" to me', "he said `` hello there '' to me"),
    ('"quoted" text', "`` quoted '' text"),
    ("the 'best' day", "the ' best ' day"),
    ("the dogs' bowls", "the dogs ' bowls"),
    ("o'clock rock'n'roll", "o'clock rock'n'roll"),
    ("`backtick' quote", "` backtick ' quote"),
    ("“smart quotes” here", "“ smart quotes ” here"),
    ("«bonjour» ‘hi’", "« bonjour » ‘ hi ’"),
    ('he said "stop."', "he said `` stop . ''"),
    ("3,000 people at 10:30, pay $3.50 each.", "3,000 people at 10:30 , pay $ 3.50 each ."),
    ("version 3.5 is out", "version 3.5 is out"),
    ("note: a,b and 1, 2", "note : a , b and 1 , 2"),
    ("wow! really? yes; ok...", "wow ! really ? yes ; ok ..."),
    ("wait...what", "wait ... what"),
    ("a (small) dog [left] {x} <y>", "a ( small ) dog [ left ] { x } < y >"),
    ("well--maybe not", "well -- maybe not"),
    ("a – b — c", "a – b — c"),
    ("a well-known t-shirt", "a well-known t-shirt"),
    ("@user #tag 50% & more*", "@ user # tag 50 % & more *"),
    ("Café naïve", "café naïve"),
    ("ÉCOLE ÜBER", "école über"),
    ("in the u.s.", "in the u.s ."),
    ("u.s. army men", "u.s. army men"),
    ("a man  with\ttabs\nand newline", "a man with tabs and newline"),
]


class SentenceCase(NamedTuple):
    """A lower-case text with its hand-written sentences and tokens (joined by spaces)."""

    text: str
    sentences: list[str]
    tokens: str


# Several sentences, abbreviations, initials, numbers and decimals; written by hand.
SENTENCE_CASES: list[SentenceCase] = [
    SentenceCase("dog. a cat", ["dog.", "a cat"], "dog . a cat"),
    SentenceCase(
        "the dog. the cat. the bird.",
        ["the dog.", "the cat.", "the bird."],
        "the dog . the cat . the bird .",
    ),
    SentenceCase("one. two. three", ["one.", "two.", "three"], "one . two . three"),
    SentenceCase("mr. smith walks", ["mr. smith walks"], "mr. smith walks"),
    SentenceCase("on st. patrick's day", ["on st. patrick's day"], "on st. patrick 's day"),
    SentenceCase(
        "mrs. jones and dr. who met at 5 p.m. today",
        ["mrs. jones and dr. who met at 5 p.m. today"],
        "mrs. jones and dr. who met at 5 p.m. today",
    ),
    SentenceCase(
        "it is 6 ft. tall vs. 5 ft.",
        ["it is 6 ft. tall vs. 5 ft."],
        "it is 6 ft. tall vs. 5 ft .",
    ),
    SentenceCase("the ex-gen. said", ["the ex-gen. said"], "the ex-gen. said"),
    SentenceCase("ok. sure", ["ok. sure"], "ok. sure"),
    SentenceCase("in the u.s. the sky", ["in the u.s. the sky"], "in the u.s. the sky"),
    # Not in the English model's abbreviation list, so they end a sentence.
    SentenceCase("dogs etc. are fun", ["dogs etc.", "are fun"], "dogs etc . are fun"),
    SentenceCase("no. 5 is here", ["no.", "5 is here"], "no . 5 is here"),
    SentenceCase("e.g. a dog", ["e.g.", "a dog"], "e.g . a dog"),
    SentenceCase("see fig. 3 here", ["see fig.", "3 here"], "see fig . 3 here"),
    # Initials and numbers: kept before a lower-case word, broken before a digit.
    SentenceCase("j. b. smith paints", ["j. b. smith paints"], "j. b. smith paints"),
    SentenceCase("x. y", ["x. y"], "x. y"),
    SentenceCase("i. 2 cats", ["i.", "2 cats"], "i . 2 cats"),
    SentenceCase("in 1990. the end", ["in 1990. the end"], "in 1990. the end"),
    SentenceCase("in 1990. 5 dogs", ["in 1990.", "5 dogs"], "in 1990 . 5 dogs"),
    SentenceCase("it costs 3.5. more", ["it costs 3.5. more"], "it costs 3.5. more"),
    SentenceCase(
        "pi is 3.14 exactly. it is",
        ["pi is 3.14 exactly.", "it is"],
        "pi is 3.14 exactly . it is",
    ),
    # Ellipses never end a sentence before a lower-case word.
    SentenceCase("wait... what", ["wait... what"], "wait ... what"),
    SentenceCase("hello! bye", ["hello!", "bye"], "hello ! bye"),
    SentenceCase("what?! no way", ["what?!", "no way"], "what ? ! no way"),
    SentenceCase("a dog!!! a cat", ["a dog!!!", "a cat"], "a dog ! ! ! a cat"),
    SentenceCase("a . b . c", ["a .", "b .", "c"], "a . b . c"),
    SentenceCase("a man.\na dog", ["a man.", "a dog"], "a man . a dog"),
    SentenceCase("the end.   ", ["the end."], "the end ."),
    # Closing brackets and quotes after the period stay with their sentence.
    SentenceCase("(a dog.) a cat", ["(a dog.)", "a cat"], "( a dog . ) a cat"),
    SentenceCase(
        'he said "go." then left',
        ['he said "go."', "then left"],
        "he said `` go . '' then left",
    ),
    SentenceCase('"stop." he said', ['"stop."', "he said"], "`` stop . '' he said"),
    SentenceCase(
        "a white fluffy dog. :)",
        ["a white fluffy dog.", ":)"],
        "a white fluffy dog . : )",
    ),
]


def _read_cc152k_test() -> list[tuple[str, str]]:
    """(id, caption) of the real CC152K test split, read as the official loader does (spec 1.1)."""
    if not CC152K_TEST.is_file():
        pytest.skip(f"shared data not available: {CC152K_TEST} is missing")
    with CC152K_TEST.open(encoding="utf-8", newline="") as f:
        return [(row[0], row[1].strip()) for row in csv.reader(f, delimiter="\t")]


# --- hand-written cases ------------------------------------------------------------------


@pytest.mark.parametrize(("caption", "expected"), WORD_CASES)
def test_tokenize_hand_written(caption: str, expected: str) -> None:
    assert tokenize(caption) == expected.split()


@pytest.mark.parametrize("case", SENTENCE_CASES, ids=lambda c: c.text)
def test_split_sentences_hand_written(case: SentenceCase) -> None:
    assert split_sentences(case.text) == case.sentences


@pytest.mark.parametrize("case", SENTENCE_CASES, ids=lambda c: c.text)
def test_tokenize_multi_sentence_hand_written(case: SentenceCase) -> None:
    assert tokenize(case.text) == case.tokens.split()


def test_treebank_words_keeps_case() -> None:
    assert treebank_words("Mr. Smith CAN'T come.") == ["Mr.", "Smith", "CA", "N'T", "come", "."]


def test_split_sentences_empty() -> None:
    assert split_sentences("") == []
    assert split_sentences(" \n ") == []


@pytest.mark.parametrize("bad", [None, b"a dog", 3, ["a", "dog"]])
def test_tokenize_rejects_non_str(bad: object) -> None:
    with pytest.raises(ValueError, match="caption must be a str"):
        tokenize(bad)  # type: ignore[arg-type]


# --- hand-written expectations double-checked against NLTK ------------------------------


@pytest.mark.parametrize(("caption", "expected"), WORD_CASES)
def test_hand_written_words_agree_with_nltk(caption: str, expected: str) -> None:
    """Single sentences: NLTK's public function, which needs no model without Punkt."""
    from nltk.tokenize import word_tokenize

    assert word_tokenize(caption.lower(), preserve_line=True) == expected.split()


# --- NLTK is used as shipped: no data files, no older rules -----------------------------


@pytest.fixture
def fresh_tokenizers() -> Iterable[None]:
    """Makes the next call rebuild NLTK's tokenizers, and restores them afterwards."""
    _tokenizers.cache_clear()
    yield
    _tokenizers.cache_clear()


def test_nothing_is_loaded_from_nltk_data(
    monkeypatch: pytest.MonkeyPatch, fresh_tokenizers: None
) -> None:
    import nltk

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"NLTK data looked up: {args}")

    # Punkt's model loaders import find/load from nltk.data when called, so patching the
    # module catches them; an empty search path catches any other lookup.
    for name in ("load", "find"):
        monkeypatch.setattr(nltk.data, name, refuse)
    monkeypatch.setattr(nltk.data, "path", [])
    monkeypatch.setattr(nltk, "download", refuse)
    case = SENTENCE_CASES[-1]
    assert tokenize(case.text) == case.tokens.split()


def _old_words() -> type:
    """NLTK < 3.10.1's word tokenizer: an opening quote stays on a word of two letters."""
    from nltk.tokenize.destructive import NLTKWordTokenizer

    class OldWords(NLTKWordTokenizer):
        def tokenize(self, text: str, *args: object, **kwargs: object) -> list[str]:
            return ["'hello", "'", "x"] if text == "'hello' x" else super().tokenize(text)

    return OldWords


def _old_sentences() -> type:
    """NLTK < 3.10.2's Punkt: a curly quote after a period does not end the sentence."""
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    class OldSentences(PunktSentenceTokenizer):
        def tokenize(self, text: str, *args: object, **kwargs: object) -> list[str]:
            return [text] if text == "a dog.\u201d a cat" else super().tokenize(text)

    return OldSentences


@pytest.mark.parametrize(
    ("module", "name", "old_class"),
    [("destructive", "NLTKWordTokenizer", _old_words),
     ("punkt", "PunktSentenceTokenizer", _old_sentences)],
    ids=["words<3.10.1", "punkt<3.10.2"],
)
def test_older_nltk_rules_are_refused(
    monkeypatch: pytest.MonkeyPatch, fresh_tokenizers: None,
    module: str, name: str, old_class: Callable[[], type],
) -> None:
    import importlib

    monkeypatch.setattr(importlib.import_module(f"nltk.tokenize.{module}"), name, old_class())
    with pytest.raises(ImportError, match=r"nltk>=3\.10\.2"):
        tokenize("a dog")


# --- seeded random strings (for the frozen tokens below) --------------------------------

_PIECES = (
    "a dog Dog mr st u.s e.g etc no ok ft t j x 3 1990 3.5 -2 3,000 10:30 cannot gonna "
    "wanna 'tis can't don't it's I'm we're you'll they've he'd o'clock ' '' \" `` ` . .. "
    "... , : ; ! ? !! ( ) [ ] { } < > - -- & @ # $ % * « » “ ” ‘ ’ „ – — café naïve "
    "x. a. ex-mr"
).split() + [". . .", "'hello'", '"quoted"', "(dog.)", 'end."', "the."]
_SEPARATORS = (" ", " ", " ", "", "  ", "\t", "\n", ". ", "! ", "? ", ".", ", ")


def _random_text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(0, 12)):
        parts.append(rng.choice(_PIECES))
        parts.append(rng.choice(_SEPARATORS))
    return "".join(parts)


def _random_texts() -> list[str]:
    """1,500 seeded random strings mixing words, abbreviations, quotes and punctuation."""
    rng = random.Random(1234)
    return [_random_text(rng) for _ in range(1500)]


# --- the 1,000 real CC152K test captions -------------------------------------------------


def test_cc152k_agrees_with_word_tokenize_preserve_line() -> None:
    """Spec 1.5 on real captions: only a real sentence split tells them from NLTK's words."""
    from nltk.tokenize import word_tokenize

    rows = _read_cc152k_test()
    assert len(rows) == 1000
    differing = {
        cid
        for cid, caption in rows
        if tokenize(caption) != word_tokenize(caption.lower(), preserve_line=True)
    }
    assert differing == set(SENTENCE_SPLIT_EXCEPTIONS)


def test_cc152k_agrees_with_full_word_tokenize() -> None:
    """Against the real Punkt model, which is only checked where it happens to be installed."""
    import nltk

    for resource in ("tokenizers/punkt_tab/english/", "tokenizers/punkt/english.pickle"):
        try:
            nltk.data.find(resource)
            break
        except LookupError:
            continue
    else:
        pytest.skip("NLTK's punkt/punkt_tab model is not installed (it cannot be downloaded here)")
    from nltk.tokenize import word_tokenize

    rows = _read_cc152k_test()
    mismatches = [c for _, c in rows if tokenize(c) != word_tokenize(c.lower())]
    assert mismatches == []


# --- frozen tokens and ids: the implementation may change, the ids may not ---------------
#
# FROZEN holds what the previous, standard-library tokenizer produced: the tokens of every
# hand-written case, a digest of the tokens of every random string and of every real CC152K
# caption, and the token ids of all of them under each shipped vocabulary. Per-item digests
# let a failure name the caption that changed; the per-vocabulary digests prove the ids.


def _digest(values: Iterable[object]) -> str:
    """First 16 hex digits of SHA-256 over ``values`` joined by newlines (never in a token)."""
    return hashlib.sha256("\n".join(map(str, values)).encode("utf-8")).hexdigest()[:16]


def _hand_written_texts() -> list[str]:
    """Every caption of the hand-written cases, in order, duplicates removed."""
    texts = [caption for caption, _ in WORD_CASES] + [case.text for case in SENTENCE_CASES]
    return list(dict.fromkeys(texts))


def _id_summary(token_lists: Iterable[Sequence[str]], vocab_path: Path) -> dict[str, object]:
    """Number of ids and SHA-256 of all ids, each caption encoded as the loaders do."""
    from ncl.data.vocab import load_vocabulary

    vocab = load_vocabulary(vocab_path)
    digest = hashlib.sha256()
    count = 0
    for tokens in token_lists:
        ids = vocab.encode(tokens)
        count += len(ids)
        digest.update((",".join(map(str, ids)) + "\n").encode("ascii"))
    return {"ids": count, "sha256": digest.hexdigest()}


def _cc152k_record(rows: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Caption id -> [digest of its tokens, digest of its ids under the CC152K vocabulary]."""
    from ncl.data.vocab import load_vocabulary

    vocab = load_vocabulary(VOCABULARIES["cc152k"])
    record = {}
    for cid, caption in rows:
        tokens = tokenize(caption)
        record[cid] = [_digest(tokens), _digest(vocab.encode(tokens))]
    return record


def _sources() -> dict[str, list[list[str]]]:
    """Token lists of every source whose ids are frozen; CC152K only where it is present."""
    sources = {
        "hand_written": [tokenize(t) for t in _hand_written_texts()],
        "random_strings": [tokenize(t) for t in _random_texts()],
    }
    if CC152K_TEST.is_file():
        sources["cc152k_test"] = [tokenize(c) for _, c in _read_cc152k_test()]
    return sources


def _write_frozen() -> None:
    """Records FROZEN with the tokenizer of this checkout.

    Done once, with the standard-library tokenizer, before ncl moved onto NLTK; recording
    again replaces that evidence with whatever the current code produces.
    """
    rows = _read_cc152k_test()
    sources = _sources()
    payload = {
        "about": "tokens/ids of ncl.data.tokenize.tokenize before it moved onto NLTK "
                 "(issue 24); see tests/data/test_tokenize.py",
        "hand_written": [[t, tokenize(t)] for t in _hand_written_texts()],
        "random_strings": [_digest(tokens) for tokens in sources["random_strings"]],
        "cc152k_test": {
            "file_sha256": hashlib.sha256(CC152K_TEST.read_bytes()).hexdigest(),
            "captions": _cc152k_record(rows),
        },
        "ids": {name: {source: _id_summary(lists, path) for source, lists in sources.items()}
                for name, path in VOCABULARIES.items()},
    }
    FROZEN.write_text(_one_entry_per_line(payload), encoding="utf-8")


def _one_entry_per_line(payload: dict) -> str:
    """JSON with one case, digest or caption per line, so that a diff of FROZEN reads well."""
    def dump(value: object, depth: int) -> str:
        if isinstance(value, dict) and depth < 3:
            items = [f"{json.dumps(k)}: {dump(v, depth + 1)}" for k, v in value.items()]
        elif isinstance(value, list) and depth < 2:
            items = [dump(v, depth + 1) for v in value]
        else:
            return json.dumps(value, ensure_ascii=False)
        pad = "\n" + " " * (depth + 1)
        brackets = "{}" if isinstance(value, dict) else "[]"
        return brackets[0] + pad + ("," + pad).join(items) + "\n" + " " * depth + brackets[1]

    return dump(payload, 0) + "\n"


@pytest.fixture(scope="module")
def frozen() -> dict:
    """The recorded tokens and ids (committed beside this file)."""
    return json.loads(FROZEN.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def sources() -> dict[str, list[list[str]]]:
    """The token lists of today's tokenizer, computed once for the three vocabularies."""
    return _sources()


def test_frozen_tokens_hand_written(frozen: dict) -> None:
    changed = [(text, tokens, tokenize(text)) for text, tokens in frozen["hand_written"]
               if tokenize(text) != tokens]
    assert changed == [], "(caption, frozen tokens, tokens now)"


def test_frozen_tokens_random_strings(frozen: dict) -> None:
    texts = _random_texts()
    assert len(texts) == len(frozen["random_strings"])
    changed = [(i, text, tokenize(text))
               for i, (text, expected) in enumerate(zip(texts, frozen["random_strings"]))
               if _digest(tokenize(text)) != expected]
    assert changed == [], "(index, string, tokens now)"


def test_frozen_cc152k_tokens_and_ids(frozen: dict) -> None:
    rows = _read_cc152k_test()
    recorded = frozen["cc152k_test"]
    assert hashlib.sha256(CC152K_TEST.read_bytes()).hexdigest() == recorded["file_sha256"], (
        f"{CC152K_TEST} is not the file the ids were recorded from")
    now = _cc152k_record(rows)
    assert list(now) == list(recorded["captions"])
    changed = [(cid, caption, tokenize(caption)) for cid, caption in rows
               if now[cid] != recorded["captions"][cid]]
    assert changed == [], "(caption id, caption, tokens now)"


@pytest.mark.parametrize("vocab_name", list(VOCABULARIES))
def test_frozen_ids_under_each_vocabulary(
    frozen: dict, sources: dict[str, list[list[str]]], vocab_name: str
) -> None:
    """Ids (with <start>/<end>) of every source as the loaders encode them, per vocabulary."""
    path = VOCABULARIES[vocab_name]
    if not path.is_file():
        pytest.skip(f"shared data not available: {path} is missing")
    now = {source: _id_summary(lists, path) for source, lists in sources.items()}
    assert now == {source: frozen["ids"][vocab_name][source] for source in now}


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--record"]:
        sys.exit(f"usage: python {sys.argv[0]} --record  (rewrites {FROZEN.name})")
    _write_frozen()
