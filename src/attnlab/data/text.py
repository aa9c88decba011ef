"""D2L-style text normalisation, word tokenisation and detokenisation (the notes' §4).

``preprocess`` follows *Dive into Deep Learning* §10.5 (``preprocess_nmt``): non-breaking and
narrow no-break spaces become spaces, text is lowercased and a space is inserted before
``, . ! ?`` when it is not already preceded by whitespace, so ``"I'm home."`` becomes
``"i'm home ."`` and ``"Cours\\u202f!"`` becomes ``"cours !"``. On top of D2L it is made *total*
and *idempotent* on arbitrary Unicode, because user input reaches it from the CLI and the web page:

* control characters (Unicode ``Cc`` that are not whitespace), format characters (``Cf``:
  zero-width spaces, soft hyphens, direction marks, BOMs), lone surrogates (``Cs``) and U+FFFD
  (the replacement character that unreadable bytes of a ``--file`` become) are dropped — they are
  invisible or stand for no character, carry no meaning for translation, and a lone surrogate cannot
  even be handed to the Rust BPE tokenizer;
* text is put in Unicode NFC before and after lowercasing, so ``e`` + combining acute and the
  precomposed ``é`` are the same token;
* every run of Unicode whitespace (``str.isspace``) becomes one space, and the ends are stripped.

Contract (tested with hypothesis): ``preprocess`` never raises on any ``str``;
``preprocess(preprocess(s)) == preprocess(s)``; ``tokenize(s)`` returns non-empty tokens that
contain no whitespace.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

__all__ = ["PUNCTUATION", "detokenize", "drop_invisible", "preprocess", "tokenize"]

PUNCTUATION = frozenset(",.!?")  # D2L separates exactly these from the preceding word

_DROP_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})

# French typography puts a (narrow) space before the double punctuation marks ``! ? : ;``, so only
# ``, .`` are attached in French; English attaches every mark that preprocess() split off.
_NO_SPACE_BEFORE = {"en": frozenset(",.!?"), "fr": frozenset(",.")}


_REPLACEMENT = "\ufffd"  # what unreadable bytes become (a file read with errors="replace"): no character either


def drop_invisible(s: str) -> str:
    """``s`` without control, format and lone-surrogate characters and U+FFFD (see the module docstring)."""
    # Fast path: printable text has no Cc/Cf/Cs characters (isprintable is False for them).
    if s.isprintable() and _REPLACEMENT not in s:
        return s
    return "".join(
        c
        for c in s
        if c != _REPLACEMENT
        and (c.isprintable() or c.isspace() or unicodedata.category(c) not in _DROP_CATEGORIES)
    )


def preprocess(s: str) -> str:
    """Normalise ``s`` the D2L way (see the module docstring); total and idempotent on any ``str``.

    >>> preprocess("I'm home.")
    "i'm home ."
    >>> preprocess("Ça alors\\u202f!")
    'ça alors !'
    """
    s = drop_invisible(s)
    # NFC before lower() so decomposed capitals lowercase like precomposed ones, and after it
    # because lowercasing may produce decomposable sequences (e.g. U+0130 -> "i" + U+0307).
    if s.isascii():  # most of the corpus: NFC is the identity on ASCII
        s = s.lower()
    else:
        s = unicodedata.normalize("NFC", unicodedata.normalize("NFC", s).lower())
    # D2L inserts a space before a mark unless one is already there; inserting it always and then
    # collapsing whitespace gives the same result and is faster than a look-behind regex.
    for mark in PUNCTUATION:
        if mark in s:
            s = s.replace(mark, " " + mark)
    # str.split() splits on every Unicode whitespace character, including U+00A0 and U+202F.
    return " ".join(s.split())


def tokenize(s: str) -> list[str]:
    """Word tokens of ``s``: ``preprocess(s).split()`` (non-empty, whitespace-free)."""
    return preprocess(s).split()


def detokenize(tokens: Sequence[str], lang: str) -> str:
    """Join word tokens into readable text for ``lang`` (``"en"`` or ``"fr"``).

    English attaches ``, . ! ?`` to the previous word; French attaches only ``, .`` and keeps
    the space before ``! ? : ;`` (French typography). ``preprocess(detokenize(t, lang))``
    gives back ``" ".join(t)`` for tokens produced by :func:`tokenize`.

    Raises ``ValueError`` for an unknown ``lang``.
    """
    try:
        attach = _NO_SPACE_BEFORE[lang]
    except KeyError:
        raise ValueError(
            f"lang={lang!r} is not supported; use one of: {', '.join(_NO_SPACE_BEFORE)}"
        ) from None
    out: list[str] = []
    for tok in tokens:
        if out and tok in attach:
            out[-1] += tok
        else:
            out.append(tok)
    return " ".join(out)
