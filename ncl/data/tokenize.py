"""Caption tokenizer equivalent to ``nltk.word_tokenize(caption.lower())`` (spec 1.5).

The official loaders lower-case a caption and call ``nltk.tokenize.word_tokenize``, which

1. splits the text into sentences with Punkt (``sent_tokenize``; English model), then
2. applies NLTK's improved Treebank word tokenizer (``NLTKWordTokenizer``) to each sentence
   and concatenates the tokens.

ncl needs neither NLTK nor the Punkt model file (which cannot be downloaded on the machines
this runs on). This module re-implements both steps with the standard library:

* **Word rules** (:func:`treebank_words`): the ordered regular-expression rewrites of the
  NLTK 3.9/3.10 ``NLTKWordTokenizer`` (starting quotes, punctuation including the final period
  of a sentence, ellipses, commas and colons not followed by a digit, brackets, double dashes,
  ending quotes, clitics such as ``'s n't 're 'll``, and splits such as
  ``cannot -> can not``). Every rule is kept in NLTK's order, because the rules interact (a
  space inserted by one rule enables the next). Each rule is guarded by a cheap substring
  test so that a caption pays only for the rules that can fire on it.
* **Sentence splitting** (:func:`split_sentences`): Punkt's decision procedure (candidate
  ``. ? !`` followed by punctuation or by whitespace and a token; the preceding word; the
  first annotation pass by token type; the second pass for initials, numbers and
  abbreviations; the re-alignment of closing quotes and brackets) with the *parameters* of
  the English model reduced to what matters for lower-cased text:

  - the abbreviation list is the English model's learned list (``PUNKT_ABBREVIATIONS``,
    a fact about the reference model, spelled out below); ``"mr. smith"``, ``"st. louis"``
    and ``"ft."`` do not end a sentence, but note that ``"etc."``, ``"no."``, ``"e.g."``
    are *not* in it and do;
  - the orthographic context (how often a word was seen capitalised / sentence-initially
    in Punkt's training text) is taken to be empty, the collocation and sentence-starter
    lists are dropped.

How this differs from the real Punkt model (only on lower-cased input, which is all the
official pipeline feeds it):

* After an initial (``"j."``) or a number (``"1990."``), real Punkt keeps a sentence break
  when the next word is lower-case and its orthographic context says it was seen in lower
  case at the start of a training sentence and never capitalised. Here every lower-case next
  word suppresses the break (``"in 1990. the"`` stays one sentence, as real Punkt does for
  common words). This is the only decision that depends on data not reproduced here;
  collocations only ever suppress breaks in this same situation, so they are subsumed.
* Abbreviations and ellipses followed by a *capitalised* word can end a sentence in real
  Punkt; ``str.lower()`` leaves no capitals in practice (a few symbols such as mathematical
  bold letters have no lower case), so this branch is not modelled.
* A word that merely ends in ``.`` and is not an abbreviation, initial or number ends a
  sentence when whitespace and any token follow (``"dog. a cat"`` -> ``dog . a cat``),
  exactly as in real Punkt.

Regex-engine details: NLTK 3.10 compiles its patterns with the third-party ``regex`` module,
older releases (and the official repositories' era) with ``re``, which is used here. The two
differ only on exotic characters: ``\\s`` in ``re`` also matches the separators
U+001C-U+001F, and ``\\w`` in ``re`` excludes combining marks and includes non-decimal
digits (e.g. ``"½"``). Only a quote or clitic directly touching such a character can be
tokenised differently.

NLTK versions: the rules follow the NLTK release installed for the tests (3.9+). Older
releases differ in ways visible on real captions, and the shipped SCAN vocabularies were
built with such an older release: a leading single quote stayed attached to its word
(COCO's vocabulary holds ``'stop``, ``'no``) and only ``...`` was split off (it holds
``street..``), whereas this tokenizer (like current NLTK) yields ``' stop`` and ``street ..``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["PUNKT_ABBREVIATIONS", "split_sentences", "tokenize", "treebank_words"]


# ---------------------------------------------------------------------------------------
# Word rules (NLTKWordTokenizer)
# ---------------------------------------------------------------------------------------


class _Rule(NamedTuple):
    """One ordered rewrite: ``pattern.sub(replacement, text)``.

    ``triggers`` holds characters at least one of which must occur in the text for the
    pattern to match at all (``None``: the rule always runs). Skipping rules whose triggers
    are absent is what makes the tokenizer fast; it never changes the result.
    """

    pattern: re.Pattern[str]
    replacement: str
    triggers: frozenset[str] | None


def _rule(pattern: str, replacement: str, triggers: str | None) -> _Rule:
    """Compiles a rule; ``triggers`` is a string of trigger characters or ``None``."""
    return _Rule(re.compile(pattern), replacement, None if triggers is None else frozenset(triggers))


# Closing characters that may follow the final period of a sentence.
_CLOSERS = "\\]\\)}>\"'"

_BEFORE_PUNCTUATION: tuple[_Rule, ...] = (
    # Opening curly/low quotes and runs of backticks become tokens of their own.
    _rule(r"([«“‘„]|`+)", r" \1 ", "«“‘„`"),
    # A straight double quote opening the sentence becomes ``.
    _rule(r'^"', "``", '"'),
    _rule(r"(``)", r" \1 ", "`"),
    # A double quote (or '') after a space or an opening bracket is an opening quote.
    _rule(r"([ (\[{<])(\"|'')", r"\1 `` ", "\"'"),
    # A single quote opening a word, unless it starts a clitic ('re 've 'll 'm 't 's 'd 'n).
    _rule(r"(?i)(?<!\w)(')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)", r"\1 ", "'"),
)

_PUNCTUATION: tuple[_Rule, ...] = (
    # Final period of the sentence (not part of an ellipsis), possibly followed by closing
    # quotes/brackets and spaces. NLTK 3.10 uses a possessive run here; the greedy run
    # matches the same spans (it only backtracks on inputs where both fail).
    _rule(rf"([^.])(\.)([{_CLOSERS}»”’ ]*)\s*$", r"\1 \2 \3 ", "."),
    # Commas and colons, except between digits ("3,000", "10:30").
    _rule(r"([:,])([^\d])", r" \1 \2", ":,"),
    _rule(r"([:,])$", r" \1 ", ":,"),
    _rule(r"\.{2,}", r" \g<0> ", "."),
    _rule(r"[;@#$%&]", r" \g<0> ", ";@#$%&"),
    # Figure dash, en dash, em dash, horizontal bar.
    _rule(r"[\u2012-\u2015]", r" \g<0> ", "\u2012\u2013\u2014\u2015"),
    # Second final-period rule (from the original Treebank tokenizer); after the rule above
    # it only normalises spacing, but it is kept so that the order of rewrites is NLTK's.
    _rule(rf"([^.])(\.)([{_CLOSERS}]*)\s*$", r"\1 \2\3 ", "."),
    _rule(r"[?!]", r" \g<0> ", "?!"),
    _rule(r"([^'])' ", r"\1 ' ", "'"),
    _rule(r"[*]", r" \g<0> ", "*"),
    _rule(r"[\]\[(){}<>]", r" \g<0> ", "[](){}<>"),
    _rule(r"--", r" -- ", "-"),
)

_ENDING_QUOTES: tuple[_Rule, ...] = (
    _rule(r"([»”’])", r" \1 ", "»”’"),
    _rule(r"''", " '' ", "'"),
    _rule(r'"', " '' ", '"'),
    # Collapse whitespace so that the clitic rules below can rely on single spaces.
    _rule(r"\s+", " ", None),
    _rule(r"([^' ])('[sS]|'[mM]|'[dD]|') ", r"\1 \2 ", "'"),
    _rule(r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", r"\1 \2 ", "'"),
)

# Words split in two ("cannot" -> "can not"), after Robert MacIntyre's list as used by NLTK;
# the 't-forms need the leading space that the padding guarantees.
_SPLIT_WORDS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"(?i)\b(can)(not)\b",
        r"(?i)\b(d)('ye)\b",
        r"(?i)\b(gim)(me)\b",
        r"(?i)\b(gon)(na)\b",
        r"(?i)\b(got)(ta)\b",
        r"(?i)\b(lem)(me)\b",
        r"(?i)\b(more)('n)\b",
        r"(?i)\b(wan)(na)(?=\s)",
        r"(?i) ('t)(is)\b",
        r"(?i) ('t)(was)\b",
    )
)
# A superset of what the patterns above can match, searched once per sentence.
_SPLIT_WORDS_GUARD = re.compile(r"(?i)cannot|d'ye|gimme|gonna|gotta|lemme|more'n|wanna|'tis|'twas")


def _apply(rules: tuple[_Rule, ...], text: str, present: set[str]) -> str:
    """Applies ``rules`` in order, skipping those with no trigger in ``present``."""
    for rule in rules:
        if rule.triggers is None or not rule.triggers.isdisjoint(present):
            text = rule.pattern.sub(rule.replacement, text)
    return text


def treebank_words(sentence: str) -> list[str]:
    """Splits one sentence into words with NLTK's improved Treebank rules.

    Equivalent to ``nltk.tokenize.NLTKWordTokenizer().tokenize(sentence)`` (spec 1.5, step
    2 applied to one sentence). Case is kept; only a final period of the *whole* input is
    split off, so multi-sentence text must go through :func:`split_sentences` first.

    Args:
        sentence: Text of one sentence.

    Returns:
        The tokens, in order; ``[]`` for empty or whitespace-only input.
    """
    # The rules only ever add spaces, and turn '"' into `` or '', so the characters of the
    # input plus those cover every character present at any step.
    present = set(sentence)
    if '"' in present:
        present.update("`'")
    text = _apply(_BEFORE_PUNCTUATION, sentence, present)
    text = _apply(_PUNCTUATION, text, present)
    # Padding lets the clitic rules find a space on both sides of every word.
    text = _apply(_ENDING_QUOTES, " " + text + " ", present)
    if _SPLIT_WORDS_GUARD.search(text):
        for pattern in _SPLIT_WORDS:
            text = pattern.sub(r" \1 \2 ", text)
    return text.split()


# ---------------------------------------------------------------------------------------
# Sentence splitting (Punkt emulation)
# ---------------------------------------------------------------------------------------

# The abbreviation types learned by NLTK's English Punkt model (the ``abbrev_types`` of the
# punkt / punkt_tab "english" parameters, trained on Wall Street Journal text), without
# their final period. They are a property of the reference tokenizer, like the official
# vocabulary, and are spelled out here because the model file cannot be downloaded. Note
# what is absent: "etc", "no", "e.g", "i.e" (so those do end a sentence) and what is
# present: "ok", "cos", single letters such as "t" and "s".
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

# Characters that Punkt treats as never belonging inside a word (its "non-word" class).
_NON_WORD = "[)\";}\\]*:@'({\\[‘’“”«»?!]"
# Multi-character punctuation: dash runs, dot runs, spaced ellipses.
_MULTI_CHAR = r"(?:-{2,}|\.{2,}|(?:\.\s){2,}\.)"
_PUNKT_WORD = re.compile(
    rf"{_MULTI_CHAR}"
    rf"|(?=[^(\"`{{\[:;&#*@)}}\]\-,])\S+?"
    rf"(?=\s|$|{_NON_WORD}|{_MULTI_CHAR}|,(?=$|\s|{_NON_WORD}|{_MULTI_CHAR}))"
    r"|\S"
)
# A candidate sentence end: . ? ! followed by non-word punctuation, or by whitespace and a
# token (group 2: that token).
_CANDIDATE = re.compile(rf"[.?!](?=({_NON_WORD}|\s+(\S+)))")
_NUMBER = re.compile(r"-?[.,]?\d[\d,.\-]*\.?")
_INITIAL = re.compile(r"[^\W\d]\.")
# Closing punctuation that belongs to the sentence before a break ("(dog.) a cat").
_REALIGN = re.compile(r"[\"')\]}‘’“”«»]+?(?:\s+|(?=--)|$)", re.MULTILINE)
_PUNKT_PUNCTUATION = frozenset(";:,.!?")
# Punkt looks for the word before a candidate by the last ASCII whitespace character.
_ASCII_WHITESPACE = " \t\n\r\x0b\x0c"


def _first_pass_break(token: str) -> bool:
    """Punkt's type-based decision: is ``token`` a sentence break before looking ahead?

    ``. ? !`` alone break; dot runs (ellipses) and known abbreviations do not; any other
    token ending in a single period does.
    """
    if token in (".", "?", "!"):
        return True
    if token.startswith("..") and token.strip(".") == "":
        return False
    if not token.endswith(".") or token.endswith(".."):
        return False
    stem = token[:-1].lower()
    return not (stem in PUNKT_ABBREVIATIONS or stem.split("-")[-1] in PUNKT_ABBREVIATIONS)


def _keeps_break(token: str, next_token: str) -> bool:
    """Punkt's second pass for a breaking ``token``: does ``next_token`` undo the break?

    An initial or a number is taken as an abbreviation when the orthographic heuristic says
    the next token does not start a sentence: it is punctuation, or a lower-case word (with
    an empty orthographic context, see the module docstring); an initial is also kept
    before a capitalised word.
    """
    is_initial = _INITIAL.fullmatch(token) is not None
    lowered = token.lower()
    # Punkt compares the type minus its final period with its number placeholder.
    is_number = _NUMBER.fullmatch(lowered) is not None or lowered == "##number##."
    if not (is_initial or is_number):
        return True
    if next_token in _PUNKT_PUNCTUATION or next_token[0].islower():
        return False
    return not (is_initial and next_token[0].isupper())


def _context_has_break(context: str) -> bool:
    """True when a token of ``context`` other than its last one ends a sentence."""
    tokens = [t for line in context.split("\n") if line.strip() for t in _PUNKT_WORD.findall(line)]
    for i in range(len(tokens) - 1):
        token = tokens[i]
        if _first_pass_break(token) and (not token.endswith(".") or _keeps_break(token, tokens[i + 1])):
            return True
    return False


def _candidate_contexts(text: str) -> Iterator[tuple[re.Match[str], str]]:
    """Yields each candidate end with its context: preceding word, the mark, what follows.

    In a run of marks ("!!!") only the last one is kept, because the preceding words of the
    others overlap it; the word is found by the last ASCII whitespace, as Punkt does,
    including its quirk that whitespace at the very start of the searched span is ignored.
    """
    previous: re.Match[str] | None = None
    word_start = word_stop = 0
    for match in _CANDIDATE.finditer(text):
        space = max(text.rfind(c, word_stop, match.start()) for c in _ASCII_WHITESPACE)
        start = space + 1 if space > word_stop else word_start
        if previous is not None and word_stop <= start:
            yield previous, text[word_start:word_stop] + previous.group() + previous.group(1)
        previous, word_start, word_stop = match, start, match.start()
    if previous is not None:
        yield previous, text[word_start:word_stop] + previous.group() + previous.group(1)


def _sentence_spans(text: str) -> Iterator[tuple[int, int]]:
    """Yields ``(start, stop)`` of each sentence before re-alignment."""
    last_break = 0
    for match, context in _candidate_contexts(text):
        if _context_has_break(context):
            yield last_break, match.end()
            last_break = match.start(2) if match.group(2) else match.end()
    yield last_break, len(text.rstrip())


def split_sentences(text: str) -> list[str]:
    """Splits text into sentences like NLTK's English Punkt model on lower-cased text.

    Equivalent to ``nltk.sent_tokenize(text)`` up to the parameter reductions listed in the
    module docstring (spec 1.5, step 2 of ``word_tokenize``). Closing quotes and brackets
    right after a break are moved to the sentence they close.

    Args:
        text: Lower-cased text.

    Returns:
        The sentences (slices of ``text``, trailing whitespace of the text removed); ``[]``
        for empty or whitespace-only text.
    """
    if _CANDIDATE.search(text) is None:  # fast path: one sentence
        stripped = text.rstrip()
        return [stripped] if stripped else []
    spans = list(_sentence_spans(text))
    sentences: list[str] = []
    shift = 0  # characters already moved into the previous sentence
    for i, (start, stop) in enumerate(spans):
        start += shift
        shift = 0
        if i + 1 < len(spans):
            next_start, next_stop = spans[i + 1]
            closing = _REALIGN.match(text[next_start:next_stop])
            if closing:
                sentences.append(text[start : next_start + len(closing.group().rstrip())])
                shift = closing.end()
                continue
        if start < stop:
            sentences.append(text[start:stop])
    return sentences


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

    Example:
        >>> tokenize("A dog's toy. It can't fly, (really)!")
        ['a', 'dog', "'s", 'toy', '.', 'it', 'ca', "n't", 'fly', ',', '(', 'really', ')', '!']
    """
    if not isinstance(caption, str):
        raise ValueError(f"caption must be a str, got {type(caption).__name__}")
    return [token for sentence in split_sentences(caption.lower()) for token in treebank_words(sentence)]
