"""Caption tokenizer: ``nltk.word_tokenize(caption.lower())`` with Punkt set in code (spec 1.5).

The official loaders lower-case a caption and call ``nltk.tokenize.word_tokenize``, which
splits the text into sentences with Punkt's English model and applies NLTK's improved
Treebank tokenizer (``NLTKWordTokenizer``) to each sentence. ``word_tokenize`` loads that
model from ``nltk_data``, a download that is impossible on the machines ncl runs on, so ncl
builds the same pipeline from NLTK's own classes and nothing is ever loaded from disk:

* words: ``nltk.tokenize.destructive.NLTKWordTokenizer``, unchanged;
* sentences: ``nltk.tokenize.punkt.PunktSentenceTokenizer`` built from a
  ``PunktParameters`` whose only non-empty field is the abbreviation list
  (:data:`PUNKT_ABBREVIATIONS`, the English model's, written out below).

What ncl adds is only what NLTK lacks: that parameter set, lower-casing, a type check and a
check that the installed NLTK has the word rules ncl's ids were recorded with.

**Parameters left empty.** The model's orthographic context (how each word was capitalised
in Punkt's training text), collocations and sentence starters are not reproduced. On
lower-cased text this differs from the real model in two cases only, which the 1,000 CC152K
test captions never reach:

* After an initial (``"j."``) or a number (``"1990."``) followed by a lower-case word, Punkt
  here never breaks (``"in 1990. the end"`` is one sentence). The real model breaks there only
  if its training text saw that word in lower case at a sentence start and never capitalised,
  which excludes every common word; collocations only suppress breaks in this same situation.
* An abbreviation or ellipsis followed by a *capitalised* known sentence starter can end a
  sentence in the real model; after ``str.lower()`` no such word exists (only symbols without
  a lower case, such as mathematical bold letters, stay upper case).

Any other word ending in ``.`` ends a sentence when whitespace and a token follow, so
``"dog. a cat"`` gives ``dog . a cat``.

**NLTK versions.** ncl needs NLTK >= 3.10.2. Earlier releases split an opening single quote
off only before a one-letter word (``"a 'stop' sign"`` gives ``'stop`` there, ``' stop``
here; changed in 3.10.1), and their Punkt does not treat curly quotes and guillemets as
punctuation after a sentence end (``"a dog.” a cat"`` stays one sentence; changed in 3.10.2).
The releases the official code ran with (3.6.2 and 3.8.1 checked) also do not normalise
whitespace before the clitic rules (a clitic followed by a tab stays attached) and do not
split off figure/en/em dashes. None of this changes a token of the 1,000 CC152K test
captions, but the shipped SCAN vocabularies come from such a release: COCO's holds
``'stop`` and ``street..``.

From 3.10.4 NLTK compiles its rules with the third-party ``regex`` module instead of ``re``.
The two differ only on exotic characters (``re``'s ``\\s`` also matches U+001C-U+001F; its
``\\w`` excludes combining marks and includes non-decimal digits such as ``"½"``), so only a
quote or clitic touching one of those is tokenised differently by 3.10.2 and 3.10.3.

``tests/data/test_tokenize.py`` checks that the tokens and ids of every caption the project
tests with are those of the standard-library reimplementation that preceded this module.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # importing nltk takes seconds; it is deferred to the first caption
    from nltk.tokenize.destructive import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktSentenceTokenizer

__all__ = ["PUNKT_ABBREVIATIONS", "split_sentences", "tokenize", "treebank_words"]

# The abbreviation types learned by NLTK's English Punkt model (the ``abbrev_types`` of the
# punkt / punkt_tab "english" parameters), without their final period. They are a property
# of the reference tokenizer, like the official vocabulary, and are spelled out here because
# the model file cannot be downloaded. Note what is absent: "etc", "no", "e.g", "i.e" (so
# those do end a sentence) and what is present: "ok", "cos", single letters such as "t".
PUNKT_ABBREVIATIONS: frozenset[str] = frozenset(
    """
    a.a a.c a.d a.g a.h a.m a.m.e a.s a.t adm ala ariz aug ave b.f b.v bros c c.i.t c.o.m.b
    c.v calif chg cie co col colo conn corp cos ct d d.c d.h d.w dec dr e e.f e.h e.l e.m
    f f.g f.j feb fla fri ft g g.d g.f g.k ga gen h h.c h.f h.m i.m.s ill inc j.b j.c j.j
    j.k j.p j.r jan jr k kan ky l l.a l.f l.p lt ltd m m.b.a m.d.c m.j maj messrs mg mich
    minn mr mrs ms n n.c n.d n.h n.j n.m n.v n.y nev nov oct ok okla ore p p.a.m p.m pa
    ph.d prof r r.a r.h r.i r.j r.k r.t rep reps s s.a s.a.y s.c s.g s.p.a s.s sen sep
    sept sr st t t.j tenn tues u.k u.n u.s u.s.a u.s.s.r v va vs vt w w.c w.r w.va w.w
    wash wed wis yr
    """.split()
) | {". . "}  # the spaced ellipsis ". . ." minus its final period

# Two rules the recorded ids depend on, each missing from older NLTK releases: from 3.10.1 an
# opening single quote is split off any word (before, "'hello" stayed whole); from 3.10.2
# Punkt keeps a curly closing quote with the sentence it ends.
_WORDS_PROBE = ("'hello' x", ["'", "hello", "'", "x"])
_SENTENCES_PROBE = ("a dog.\u201d a cat", ["a dog.\u201d", "a cat"])
_INSTALL = "pip install 'nltk>=3.10.2'"


class _Tokenizers(NamedTuple):
    """NLTK's two tokenizers, configured once per process."""

    words: NLTKWordTokenizer
    sentences: PunktSentenceTokenizer


@cache
def _tokenizers() -> _Tokenizers:
    """Builds NLTK's word tokenizer and a Punkt sentence tokenizer with no model file.

    Raises:
        ImportError: If NLTK is missing or older than the rules ncl's token ids follow.
    """
    try:
        from nltk.tokenize.destructive import NLTKWordTokenizer
        from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    except ImportError as err:
        raise ImportError(f"ncl's caption tokenizer needs NLTK >= 3.10.2: {_INSTALL}") from err
    params = PunktParameters()
    params.abbrev_types = set(PUNKT_ABBREVIATIONS)
    tokenizers = _Tokenizers(NLTKWordTokenizer(), PunktSentenceTokenizer(params))
    _check_rules(tokenizers)
    return tokenizers


def _check_rules(tokenizers: _Tokenizers) -> None:
    """Refuses an NLTK whose rules would silently change the token ids.

    The rules are probed rather than the version compared, which also catches a patched or
    vendored copy.

    Raises:
        ImportError: If either probe of ``_WORDS_PROBE``, ``_SENTENCES_PROBE`` fails.
    """
    (words, expected_words), (text, expected_sentences) = _WORDS_PROBE, _SENTENCES_PROBE
    if (tokenizers.words.tokenize(words) != expected_words
            or tokenizers.sentences.tokenize(text) != expected_sentences):
        import nltk

        raise ImportError(f"NLTK {nltk.__version__} predates rules ncl's token ids follow "
                          f"(opening quotes, curly quotes after a sentence end): {_INSTALL}")


def treebank_words(sentence: str) -> list[str]:
    """Splits one sentence into words: ``NLTKWordTokenizer().tokenize(sentence)``.

    Case is kept; only a final period of the *whole* input is split off, so multi-sentence
    text must go through :func:`split_sentences` first.

    Args:
        sentence: Text of one sentence.

    Returns:
        The tokens, in order; ``[]`` for empty or whitespace-only input.
    """
    return _tokenizers().words.tokenize(sentence)


def split_sentences(text: str) -> list[str]:
    """Splits text into sentences like NLTK's English Punkt model on lower-cased text.

    Punkt with the parameters described in the module docstring; closing quotes and brackets
    right after a break stay with the sentence they close.

    Args:
        text: Lower-cased text.

    Returns:
        The sentences (slices of ``text``, trailing whitespace of the text removed); ``[]``
        for empty or whitespace-only text.
    """
    return _tokenizers().sentences.tokenize(text)


def tokenize(caption: str) -> list[str]:
    """Tokenises a caption like ``nltk.tokenize.word_tokenize(caption.lower())``.

    Spec 1.5, steps 1-2 (the caller strips the line first, as the official loaders do):
    lower-case, split into sentences (:func:`split_sentences`), split each sentence into
    words (:func:`treebank_words`).

    Args:
        caption: Raw caption text.

    Returns:
        The tokens; ``[]`` for an empty or whitespace-only caption.

    Raises:
        ValueError: If ``caption`` is not a ``str``.
        ImportError: If NLTK >= 3.10.2 is not installed.

    Example:
        >>> tokenize("A dog's toy. It can't fly, (really)!")
        ['a', 'dog', "'s", 'toy', '.', 'it', 'ca', "n't", 'fly', ',', '(', 'really', ')', '!']
    """
    if not isinstance(caption, str):
        raise ValueError(f"caption must be a str, got {type(caption).__name__}")
    words, sentences = _tokenizers()
    return [token for sentence in sentences.tokenize(caption.lower())
            for token in words.tokenize(sentence)]
