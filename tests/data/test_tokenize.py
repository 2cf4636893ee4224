"""Tests for ncl.data.tokenize (spec 1.5): equivalence with nltk.word_tokenize(c.lower()).

Three kinds of evidence:

* hand-written cases whose expected tokens were written out by hand (and cross-checked
  against NLTK where it is installed);
* NLTK as an independent reference: its Treebank tokenizer, and its Punkt sentence splitter
  run with an explicit parameter set (the abbreviation list this module ships, everything
  else empty), which needs no downloaded model; on hand cases, seeded random strings and the
  1,000 real CC152K test captions;
* the full ``word_tokenize`` with the real Punkt model, only where that model is installed.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from ncl.data.tokenize import PUNKT_ABBREVIATIONS, split_sentences, tokenize, treebank_words

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
CC152K_TEST = SHARED_DATA / "cc152k" / "test_caps_img_urls.csv"

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


class Reference(NamedTuple):
    """NLTK-based reference tokenizers (no downloaded data needed)."""

    words: Callable[[str], list[str]]  # NLTKWordTokenizer on one sentence
    sentences: Callable[[str], list[str]]  # Punkt with this module's abbreviations
    full: Callable[[str], list[str]]  # word_tokenize(text.lower()) with that Punkt


@pytest.fixture(scope="module")
def reference() -> Reference:
    """NLTK's own code, configured to need no model file; skips if NLTK is absent."""
    pytest.importorskip("nltk")
    from nltk.tokenize.destructive import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    words = NLTKWordTokenizer().tokenize
    if words("'hello' x") != ["'", "hello", "'", "x"]:
        pytest.skip(
            "installed NLTK predates the opening-quote rule (NLTK PR #3687) that ncl follows; "
            "ncl.data.tokenize documents the differences of older releases"
        )
    params = PunktParameters()
    params.abbrev_types = set(PUNKT_ABBREVIATIONS)
    sentences = PunktSentenceTokenizer(params).tokenize

    def full(text: str) -> list[str]:
        return [token for sentence in sentences(text.lower()) for token in words(sentence)]

    return Reference(words, sentences, full)


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
def test_hand_written_words_agree_with_nltk(
    reference: Reference, caption: str, expected: str
) -> None:
    from nltk.tokenize import word_tokenize

    assert word_tokenize(caption.lower(), preserve_line=True) == expected.split()
    assert reference.full(caption) == expected.split()


@pytest.mark.parametrize("case", SENTENCE_CASES, ids=lambda c: c.text)
def test_hand_written_sentences_agree_with_nltk_punkt(
    reference: Reference, case: SentenceCase
) -> None:
    assert reference.sentences(case.text) == case.sentences
    assert reference.full(case.text) == case.tokens.split()


# --- seeded random strings against NLTK --------------------------------------------------

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


def test_random_strings_agree_with_nltk(reference: Reference) -> None:
    rng = random.Random(1234)
    for _ in range(1500):
        text = _random_text(rng)
        assert treebank_words(text) == reference.words(text), text
        assert split_sentences(text.lower()) == reference.sentences(text.lower()), text
        assert tokenize(text) == reference.full(text), text


# --- the 1,000 real CC152K test captions -------------------------------------------------


def test_cc152k_agrees_with_word_tokenize_preserve_line(reference: Reference) -> None:
    """Spec 1.5 equivalence on real captions, NLTK's word rules without sentence splitting."""
    from nltk.tokenize import word_tokenize

    rows = _read_cc152k_test()
    assert len(rows) == 1000
    differing = {
        cid
        for cid, caption in rows
        if tokenize(caption) != word_tokenize(caption.lower(), preserve_line=True)
    }
    assert differing == set(SENTENCE_SPLIT_EXCEPTIONS)
    for cid, caption in rows:
        if cid in SENTENCE_SPLIT_EXCEPTIONS:  # there, tokenize must be the sentence-split result
            assert tokenize(caption) == reference.full(caption)


def test_cc152k_agrees_with_nltk_punkt_procedure(reference: Reference) -> None:
    """Sentence splitting and words on real captions against NLTK's Punkt code."""
    rows = _read_cc152k_test()
    mismatches = [caption for _, caption in rows if tokenize(caption) != reference.full(caption)]
    assert mismatches == []


def test_cc152k_agrees_with_full_word_tokenize(reference: Reference) -> None:
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
