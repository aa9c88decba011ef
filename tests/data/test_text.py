"""D2L preprocessing: the notes' §4 examples, totality on arbitrary Unicode, and the whole fra-eng corpus."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from attnlab.data.corpus import read_pairs
from attnlab.data.text import detokenize, preprocess, tokenize

# Any code point, lone surrogates and control characters included (hypothesis excludes Cs by default).
ANY_TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=60)
# Text that looks like the corpus: letters, apostrophes, the separated marks and odd spaces.
SENTENCE_LIKE = st.text(alphabet=st.sampled_from(list("abcÉéçœ'-,.!?;: \t\u00a0\u202f\u2009")), max_size=40)


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("I'm home.", "i'm home ."),
        ("Go.", "go ."),
        ("Cours\u202f!", "cours !"),
        ("Ça alors\u00a0!", "ça alors !"),
        ("Hello, world!", "hello , world !"),
        ("Who?", "who ?"),
        ("Wait...", "wait . . ."),
        ("  Tom   is\there .  ", "tom is here ."),
        (".Leading", ".leading"),  # D2L never inserts a space at position 0
        ("zero\u200bwidth\u00adhy", "zerowidthhy"),  # invisible format characters are dropped
        ("e\u0301t\u00e9", "\u00e9t\u00e9"),  # NFC: decomposed and precomposed é are one token
        ("", ""),
        ("\x00\x07\ud800", ""),
    ],
)
def test_preprocess_examples(raw, expected):
    assert preprocess(raw) == expected


def test_tokenize_is_split_of_preprocess():
    assert tokenize("I'm home.") == ["i'm", "home", "."]
    assert tokenize("Je suis chez moi.") == ["je", "suis", "chez", "moi", "."]


@settings(max_examples=400, deadline=None)
@given(ANY_TEXT)
@example("İ")  # lowercases to two code points
@example("\udc80abc\x1f.")  # lone surrogate, a control character that str.isspace() calls whitespace
@example("e\u200b\u0301")  # removing the zero-width space lets e + acute compose
def test_preprocess_is_total_and_idempotent(s):
    p = preprocess(s)
    assert preprocess(p) == p
    tokens = tokenize(s)
    assert tokens == p.split(" ") if p else tokens == []
    for tok in tokens:
        assert tok
        assert not any(c.isspace() for c in tok)
    p.encode("utf-8")  # raises on a lone surrogate: the text must be able to reach the Rust BPE tokenizer
    assert p == p.strip() and "  " not in p


@settings(max_examples=300, deadline=None)
@given(SENTENCE_LIKE | ANY_TEXT, st.sampled_from(["en", "fr"]))
def test_detokenize_inverts_up_to_preprocessing(s, lang):
    tokens = tokenize(s)
    assert preprocess(detokenize(tokens, lang)) == " ".join(tokens)


def test_detokenize_language_rules():
    assert detokenize("hello , world !".split(), "en") == "hello, world!"
    assert detokenize("bonjour , le monde !".split(), "fr") == "bonjour, le monde !"
    assert detokenize("qui ?".split(), "fr") == "qui ?"
    assert detokenize("je suis chez moi .".split(), "fr") == "je suis chez moi."
    assert detokenize([], "en") == ""
    with pytest.raises(ValueError, match="lang='de'"):
        detokenize(["x"], "de")


def test_every_fra_eng_line_survives_preprocessing(fra_eng_zip):
    pairs = read_pairs(fra_eng_zip)
    assert len(pairs) == 167_130
    for en, fr in pairs:
        for side in (en, fr):
            p = preprocess(side)
            tokens = p.split()
            assert tokens, f"{side!r} preprocesses to nothing"
            assert preprocess(p) == p, side
            assert all(t and not any(c.isspace() for c in t) for t in tokens), side
    # the notes' §4 sentence as it appears in the corpus
    assert ("I'm home.", "Je suis chez moi.") in set(pairs)
