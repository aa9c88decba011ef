"""French typography (U+202F, U+00A0, ’, « ») through D2L preprocessing on every fra-eng line.

The general properties (total, idempotent, non-empty tokens) are checked on every line by
tests/data/test_text.py::test_every_fra_eng_line_survives_preprocessing; this file checks what
happens to the typographic characters themselves.
"""

from __future__ import annotations

from collections import Counter

from attnlab.data.corpus import read_pairs
from attnlab.data.text import detokenize, preprocess

NO_BREAK = ("\u202f", "\u00a0")  # narrow no-break space (before ! ? ; in Tatoeba's French), no-break space
KEPT = ("’", "«", "»", "‘")  # typographic apostrophe and guillemets: kept verbatim (D2L does not map them)


def test_french_typography_on_every_fra_eng_line(fra_eng_zip):
    """Pass, on every English and French line holding one of these characters:
    no-break spaces become ordinary word breaks (preprocess equals preprocessing the line with plain
    spaces) and never survive; ’ « » ‘ are kept, as many as there were; French detokenisation then
    preprocessing gives the same tokens back; and the corpus really holds each character."""
    pairs = read_pairs(fra_eng_zip)
    seen: Counter[str] = Counter()
    for en, fr in pairs:
        for line, lang in ((en, "en"), (fr, "fr")):
            if not any(c in line for c in NO_BREAK + KEPT):
                continue
            seen.update(c for c in NO_BREAK + KEPT if c in line)
            p = preprocess(line)
            assert not any(c in p for c in NO_BREAK), line
            plain = line
            for c in NO_BREAK:
                plain = plain.replace(c, " ")
            assert p == preprocess(plain), line
            for c in KEPT:
                assert p.count(c) == line.count(c), (c, line)
            tokens = p.split()
            assert preprocess(detokenize(tokens, lang)) == p, line
    assert seen["\u202f"] > 1000 and seen["\u00a0"] > 1000 and seen["’"] > 100 and seen["«"] > 100, seen


def test_french_typography_examples():
    """Pass: the corpus's own spellings give the D2L tokens, and detokenised French keeps its spaces."""
    assert preprocess("Cours\u202f!") == "cours !"
    assert preprocess("Ça alors\u00a0!") == "ça alors !"
    assert preprocess("J’ai gagné.") == "j’ai gagné ."
    assert preprocess("« Non », ça veut dire « non ».") == "« non » , ça veut dire « non » ."
    assert detokenize("« non » , ça veut dire « non » .".split(), "fr") == "« non », ça veut dire « non »."
    assert detokenize("dis : « s'il te plaît » .".split(), "fr") == "dis : « s'il te plaît »."
    assert detokenize("cours !".split(), "fr") == "cours !"
