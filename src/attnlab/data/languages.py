"""How a language's text is cut into tokens and joined back: the rules a tokenizer applies around its vocabulary.

Four rules, named by ``data.preprocess`` (``config.PREPROCESS``; ``auto`` picks one per language:
``data/pairs.py``):

- ``d2l``: the notes' own (§4, :mod:`attnlab.data.text`), kept by fra-eng and the numbers task's English;
- ``metaspace``: for space-separated scripts, SentencePiece's ``▁`` marking, lossless, case kept; it *is*
  Hugging Face ``tokenizers`` pieces (:func:`metaspace_pieces`), so an export cuts text as attnlab does;
- ``moses``: Moses' tokenizer and detokenizer (sacremoses), on request only;
- ``chars``: each character of scripts written without spaces (Chinese, Japanese, Thai, ...) is a token.
How each cuts and joins, with examples: docs/explanations/data.md.

Every rule's ``preprocess`` returns tokens separated by single spaces (what the vocabularies split on),
never raises on any ``str``, and its ``detokenize(preprocess(s).split())`` preprocesses back to
``preprocess(s)`` for ordinary text (the metaspace rule gives ``s`` itself back, cleaned). Moses' and the
metaspace rules are not idempotent (a tokenized apostrophe, ``J' ai``, splits again; ``▁`` reads as a space),
so text is preprocessed once: raw text in, tokens out (``preprocessed=True`` afterwards).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from attnlab.data import text as d2l

__all__ = ["METASPACE", "RULES", "SCRIPT_SAMPLE", "UNSPACED", "TextRules", "clean", "metaspace_pieces", "text_rules",
           "unspaced_share"]

RULES = ("d2l", "moses", "chars", "metaspace")
METASPACE = "\u2581"  # ▁, the word-start mark of the metaspace rule (and of BPE pieces)

# The blocks of the scripts written without spaces, and their punctuation: CJK (Han, kana, CJK symbols and
# full-width forms), Thai, Lao, Khmer, Myanmar, Tibetan.
_UNSPACED = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u0f00-\u0fff"  # Tibetan
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff"  # Khmer
    "\u2e80-\u2fdf"  # CJK radicals, Kangxi
    "\u3000-\u303f"  # CJK symbols and punctuation (、。「」)
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3100-\u31ff"  # bopomofo, katakana extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\ufe30-\ufe4f"  # CJK compatibility forms
    "\uff00-\uffef"  # half- and full-width forms (！？，、ｶﾀｶﾅ)
    "\U00020000-\U0003ffff"  # CJK extensions B and beyond
)
UNSPACED = _UNSPACED  # as a regex character class's contents (the chars rule spelled for HF, export/standalone.py)
_CHAR_TOKEN = re.compile(rf"[{_UNSPACED}]|[^\W{_UNSPACED}]+|[^\w\s{_UNSPACED}]")
_RUN = re.compile(rf"[^\W{_UNSPACED}]")  # a letter or digit of a space-separated script


_ANY_UNSPACED = re.compile(f"[{_UNSPACED}]")
SCRIPT_SAMPLE = 1000  # lines a column's script is judged on (a corpus of your own): the first ones


def unspaced_share(lines: Sequence[str]) -> float:
    """The share of ``lines`` (the first :data:`SCRIPT_SAMPLE`) holding a character of a script written without
    spaces (CJK, Thai ...): near 1 for a Chinese or Japanese column, near 0 for English or German. A majority
    judges a column, so a few names or quotations in the other script do not."""
    sample = [s for s in lines[:SCRIPT_SAMPLE] if s.strip()]
    return sum(bool(_ANY_UNSPACED.search(s)) for s in sample) / max(len(sample), 1)


def clean(s: str) -> str:
    """D2L's cleaning without its lowercasing and punctuation rule: invisible characters dropped (control,
    format, lone surrogates, U+FFFD), NFC, every run of whitespace one space, the ends stripped."""
    return " ".join(unicodedata.normalize("NFC", d2l.drop_invisible(s)).split())


@dataclass(frozen=True)
class TextRules:
    """One rule (``name`` in :data:`RULES`) for one language (``lang``, ISO 639-1)."""

    name: str
    lang: str

    def preprocess(self, s: str) -> str:
        """``s`` as space-separated tokens (total on any ``str``)."""
        if self.name == "d2l":
            return d2l.preprocess(s)
        if self.name == "metaspace":
            normalizer, cut, _ = metaspace_pieces()
            # Python drops lone surrogates first: the Rust library cannot be handed them.
            return " ".join(t for t, _ in cut.pre_tokenize_str(normalizer.normalize_str(d2l.drop_invisible(s))))
        s = clean(s)
        if not s:
            return s
        if self.name == "chars":
            return " ".join(_CHAR_TOKEN.findall(s))
        return " ".join(t for t in _moses(self.lang)[0].tokenize(s, escape=False) if not t.isspace())

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Readable text of ``tokens`` (as :meth:`preprocess` cut them) in this language."""
        if self.name == "d2l":
            return d2l.detokenize(tokens, self.lang if self.lang in ("en", "fr") else "en")
        if self.name == "metaspace":
            return metaspace_pieces()[2].decode(list(tokens))
        if self.name == "chars":
            out = ""
            for tok in tokens:
                if out and _RUN.match(out[-1]) and _RUN.match(tok[0]):
                    out += " "
                out += tok
            return out
        return _moses(self.lang)[1].detokenize(list(tokens))


@functools.cache
def metaspace_pieces():
    """The metaspace rule as ``tokenizers`` pieces: (normalizer, pre-tokenizer, decoder). attnlab cuts and joins
    with these very objects, and an export writes them into its tokenizer files (``export/standalone.py``)."""
    from tokenizers import Regex, decoders, normalizers, pre_tokenizers

    from attnlab.data.tokenizer_files import clean_normalizer

    normalizer = normalizers.Sequence([normalizers.Replace(METASPACE, " "), clean_normalizer()])
    cut = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True),  # ▁word pieces
        # each character that is not a letter, digit or mark alone, with the ▁ of a space before it
        pre_tokenizers.Split(Regex(rf"{METASPACE}?[^\p{{L}}\p{{N}}\p{{M}}{METASPACE}]"), behavior="isolated"),
    ])
    return normalizer, cut, decoders.Metaspace(replacement=METASPACE, prepend_scheme="always")


@functools.cache
def _moses(lang: str):
    """sacremoses' tokenizer and detokenizer for ``lang`` (built once: each loads its language's prefixes)."""
    from sacremoses import MosesDetokenizer, MosesTokenizer  # only runs of a Moses language pay the import

    return MosesTokenizer(lang=lang), MosesDetokenizer(lang=lang)


@functools.cache
def text_rules(name: str, lang: str) -> TextRules:
    """The rule ``name`` for ``lang``; ``ValueError`` for a name outside :data:`RULES`."""
    if name not in RULES:
        raise ValueError(f"text rule {name!r} is unknown; use one of: {', '.join(RULES)}")
    return TextRules(name, lang)
