"""Caption tokenizer equivalent to ``nltk.word_tokenize(caption.lower())`` (spec 1.5).

The official loaders lower-case a caption and call ``nltk.tokenize.word_tokenize``, which

1. splits the text into sentences with Punkt (``sent_tokenize``, English model), then
2. applies NLTK's improved Treebank tokenizer (``NLTKWordTokenizer``) to each sentence and
   concatenates the tokens.

ncl needs neither NLTK nor the Punkt model file (which cannot be downloaded on the machines
this runs on); both steps are re-implemented here with the standard library.

**Word rules** (:func:`treebank_words`): the ordered rewrites of ``NLTKWordTokenizer`` as
of NLTK 3.10 (starting quotes, the final period of a sentence, ellipses, commas and colons
not followed by a digit, ``; @ # $ % & * ? !``, dashes, brackets, ending quotes, clitics
``'s 'm 'd 'll 're 've n't``, splits such as ``cannot -> can not``). The order is NLTK's,
because the rules interact (a space inserted by one rule enables the next). Each rule is
skipped when none of its trigger characters occurs, which is what makes this fast.

**Sentence splitting** (:func:`split_sentences`): Punkt's decision procedure (candidate
``. ? !`` followed by punctuation, or by whitespace and a token; the word before it; the
first annotation pass by token type; the second pass for initials, numbers and
abbreviations; re-alignment of closing quotes and brackets), with the learned parameters of
the English model reduced to what matters for lower-cased text:

* the abbreviation list is the English model's own (``PUNKT_ABBREVIATIONS``, a fact about
  the reference model, spelled out because the file cannot be downloaded). ``"mr."``,
  ``"st."``, ``"ft."``, ``"u.s."`` do not end a sentence; ``"etc."``, ``"no."``,
  ``"e.g."`` are not in the list and do;
* the orthographic context (how a word was capitalised in Punkt's training text) is taken
  to be empty, and the collocation and sentence-starter lists are dropped.

Expected differences from the real Punkt model, which the tests cannot measure here because
the model is not installed (on the 1,000 CC152K test captions no caption reaches either case):

* After an initial (``"j."``) or a number (``"1990."``) followed by a lower-case word, this
  never breaks (``"in 1990. the end"`` is one sentence). Real Punkt breaks there only if its
  training text saw that word in lower case at a sentence start and never capitalised, which
  excludes every common word. Collocations only suppress breaks in this same situation, so
  dropping them changes nothing beyond it.
* An abbreviation or ellipsis followed by a *capitalised* known sentence starter can end a
  sentence in real Punkt; after ``str.lower()`` no such word exists (only symbols without a
  lower case, such as mathematical bold letters, stay upper case), so this is not modelled.

Everything else is Punkt's procedure itself; it is checked against NLTK's Punkt code run
with the same parameters. In particular any other word ending in ``.`` ends a sentence when
whitespace and a token follow, so ``"dog. a cat"`` gives ``dog . a cat``.

**Regular-expression engine**: NLTK 3.10 compiles with the third-party ``regex`` module,
older releases (3.8.1 checked) with ``re``, as here. They differ only on exotic characters (``re``'s
``\\s`` also matches U+001C-U+001F; its ``\\w`` excludes combining marks and includes
non-decimal digits such as ``"½"``), so only a quote or clitic touching one of those can be
tokenised differently.

**NLTK versions**: the rules follow NLTK 3.10. The releases the official code ran with (for
example 3.6.2 and 3.8.1) differ in three word rules: an opening single quote is split off
only before a one-letter word (``"a 'stop' sign"`` gives ``'stop`` there, ``' stop`` here),
whitespace is not normalised before the clitic rules (a clitic followed by a tab stays
attached) and figure/en/em dashes are not split off; their Punkt also does not treat curly
quotes as punctuation after a sentence end. None of this changes a token of the 1,000 CC152K
test captions (checked against 3.6.2 and 3.8.1). The shipped SCAN vocabularies come from an
even older release: COCO's holds ``'stop`` and ``street..`` (only ``...`` was split off).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import pairwise
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
    chars = None if triggers is None else frozenset(triggers)
    return _Rule(re.compile(pattern), replacement, chars)


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
    _rule(r"([^' ])('[sSmMdD]|') ", r"\1 \2 ", "'"),
    _rule(r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", r"\1 \2 ", "'"),
)

# Words split in two ("cannot" -> "can not"), after Robert MacIntyre's list as NLTK uses it,
# in NLTK's order. "wanna" must be followed by whitespace rather than a word boundary; the
# 't-forms start at a space (which the padding guarantees) instead of a word boundary.
_SPLIT_PAIRS: tuple[tuple[str, str], ...] = (
    ("can", "not"), ("d", "'ye"), ("gim", "me"), ("gon", "na"), ("got", "ta"), ("lem", "me"),
    ("more", "'n"), ("wan", "na"), ("'t", "is"), ("'t", "was"),
)


def _split_pattern(first: str, second: str) -> re.Pattern[str]:
    """Pattern capturing ``first`` and ``second`` of a word to be split (case-insensitive)."""
    before = " " if first.startswith("'") else r"\b"
    after = r"(?=\s)" if first == "wan" else r"\b"
    return re.compile(f"(?i){before}({re.escape(first)})({re.escape(second)}){after}")


_SPLIT_WORDS: tuple[re.Pattern[str], ...] = tuple(_split_pattern(a, b) for a, b in _SPLIT_PAIRS)
# A superset of what the patterns above can match, searched once per sentence.
_SPLIT_WORDS_GUARD = re.compile("(?i)" + "|".join(re.escape(a + b) for a, b in _SPLIT_PAIRS))


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
    """Punkt's second pass for a ``token`` that breaks in the first pass: is it kept?

    Only initials and numbers are reconsidered: they become abbreviations (no break) when
    the orthographic heuristic says ``next_token`` does not start a sentence, i.e. it is
    punctuation or a lower-case word (with an empty orthographic context, see the module
    docstring); an initial also becomes one before a capitalised word.
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
    tokens = [
        token for line in context.split("\n") if line.strip() for token in _PUNKT_WORD.findall(line)
    ]
    for token, next_token in pairwise(tokens):
        if _first_pass_break(token) and (
            not token.endswith(".") or _keeps_break(token, next_token)
        ):
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
    sentences = split_sentences(caption.lower())
    return [token for sentence in sentences for token in treebank_words(sentence)]
