"""The offline ``numbers`` task: English number words → number words in French, German, Spanish or Japanese
(num2words, ``data.tgt_lang``), so the whole pipeline runs with no download at all, in a space-separated
language or a CJK one; its pairs are the same for every run, so test scores compare."""

from __future__ import annotations

import functools
import random

from num2words import num2words

from attnlab.config import NUMBERS_LANGS, DataConfig
from attnlab.data.text import preprocess
from attnlab.data.vocab import Tokenizer

NUMBERS_SEED = 0  # the numbers task is the same for every run, so its test scores are comparable
NUMBERS_MAX = 99_999

__all__ = ["NUMBERS_MAX", "NUMBERS_SEED", "english_value", "numbers_canonical", "numbers_pairs", "numbers_reference",
           "source_text"]


# ----------------------------------------------------------------------------------------------
# The offline numbers task


_UNITS = frozenset("one two three four five six seven eight nine".split())
_TEENS = frozenset("ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split())
_TENS = frozenset("twenty thirty forty fifty sixty seventy eighty ninety".split())
_BELOW_100 = _UNITS | _TEENS | _TENS


def numbers_canonical(text: str, hyphens: bool = False) -> str:
    """An English number as the numbers task spells it, from any of the ways people write it.

    The task's spelling — what :func:`numbers_pairs` trains on — is num2words' British words as people
    type them: no hyphens, no comma, ``and`` before the last two digits (``twenty one thousand three
    hundred and forty five``). Written with num2words' hyphens (``forty-two``) or its comma after
    ``thousand`` (``one thousand , two hundred``), or without the ``and`` (``three hundred forty two``),
    a number becomes that spelling; the task's own spelling is left as it is. ``hyphens=True`` gives
    num2words' spelling instead (``twenty-one thousand , three hundred and forty-five``), the one numbers
    runs trained before the task dropped the hyphens learned. Words that are not part of a number are
    only preprocessed: any text without number words comes back as ``preprocess(text)``.
    """
    words: list[str] = []
    for word in preprocess(text).split():
        tens, _, unit = word.partition("-")
        words += [tens, unit] if tens in _TENS and unit in _UNITS else [word]  # forty-two → forty two
    out: list[str] = []
    for i, word in enumerate(words):
        after = words[i + 1 : i + 3]
        if word == "," and out[-1:] == ["thousand"] and after[:1] and after[0] in _BELOW_100:
            continue  # num2words' comma before the hundreds: "one thousand, two hundred"
        # What follows "thousand" is hundreds ("one thousand two hundred") or the last two digits, which
        # num2words introduces with "and" ("one thousand and five"), as it does after "hundred".
        hundreds = word in _UNITS and after[:1] == ["hundred"]
        if out and out[-1] in ("hundred", "thousand") and word in _BELOW_100:
            if not hundreds:
                out.append("and")
            elif hyphens and out[-1] == "thousand":
                out.append(",")
        if hyphens and out and out[-1] in _TENS and word in _UNITS:
            out[-1] += "-" + word  # num2words hyphenates 21..99
            continue
        out.append(word)
    return " ".join(out)


_VALUES = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                       "fourteen fifteen sixteen seventeen eighteen nineteen".split())}
_VALUES.update({w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)})


def english_value(text: str) -> int | None:
    """The number an English number in words names (``"three hundred and five"`` → 305), in ``0..99,999``, in any
    spelling :func:`numbers_canonical` reads; None for text that is not one (checked by spelling the value back)."""
    canonical = numbers_canonical(text)
    total = current = 0
    for word in canonical.split():
        if word in _VALUES:
            current += _VALUES[word]
        elif word == "hundred":
            current *= 100
        elif word == "thousand":
            total, current = total + current * 1000, 0
        elif word != "and":
            return None
    value = total + current
    if not canonical or value > NUMBERS_MAX or numbers_canonical(num2words(value, lang="en")) != canonical:
        return None
    return value


def numbers_reference(text: str, lang: str = "fr") -> str | None:
    """The numbers task's target for the English number ``text`` in ``lang`` (as :func:`numbers_pairs` gives it), or
    None when ``text`` is not an English number the task holds."""
    value = english_value(text)
    return None if value is None else _number_words(value, lang)[1]


def source_text(cfg: DataConfig, sentence: str, src_tok: Tokenizer | None = None) -> str:
    """A user's source sentence spelled as ``cfg.dataset``'s training sources are, before tokenising.

    On ``numbers``, :func:`numbers_canonical`: ``twenty-one`` and ``twenty one`` read the same. A run
    whose source vocabulary holds ``twenty-one`` as one token (``src_tok``; trained before the task
    dropped num2words' hyphens) gets the hyphenated spelling it learned. On ``fra-eng`` the sentence is
    returned unchanged (the tokenizer preprocesses it).
    """
    if cfg.dataset != "numbers":
        return sentence
    learned_hyphens = src_tok is not None and [t.lstrip("\u2581") for t in src_tok.tokens("twenty-one")] == ["twenty-one"]
    return numbers_canonical(sentence, hyphens=learned_hyphens)


@functools.cache
def _number_words(k: int, lang: str = "fr") -> tuple[str, str]:
    """``k`` in words: English in the task's spelling (:func:`numbers_canonical`), ``lang`` as num2words writes it
    (French D2L-preprocessed, as the task always had it; the others as written, for their own text rules)."""
    words = num2words(k, lang=lang)
    return numbers_canonical(num2words(k, lang="en")), preprocess(words) if lang == "fr" else words


def numbers_pairs(n: int, seed: int = NUMBERS_SEED, lang: str = "fr") -> list[tuple[str, str]]:
    """``n`` distinct numbers in ``0..99,999`` as (English words, ``lang`` words); ``lang`` one of
    :data:`attnlab.config.NUMBERS_LANGS`.

    E.g. ``21345`` → ``("twenty one thousand three hundred and forty five",
    "vingt et un mille trois cent quarante-cinq")``, with ``lang="ja"`` ``"二万千三百四十五"`` (English as
    :func:`numbers_canonical` spells it; French D2L-preprocessed; the other languages as num2words writes
    them, to be cut by their own text rules). The same numbers are drawn for every language. Numbers are drawn deterministically from
    ``random.Random(seed)`` with an equal share per digit count (1 to 5 digits; a share a bucket
    cannot fill moves to the longer ones), so short numbers are not drowned out by the 90,000
    five-digit ones. The result is shuffled, so the first ``k`` pairs are a fair sample too.
    Raises ``ValueError`` unless ``1 <= n <= 100,000`` and ``lang`` is a language of the task.
    """
    if not 1 <= n <= NUMBERS_MAX + 1:
        raise ValueError(f"numbers task size n={n} must lie between 1 and {NUMBERS_MAX + 1}")
    if lang not in NUMBERS_LANGS:
        raise ValueError(f"lang={lang!r} is not a language of the numbers task; use one of: {', '.join(NUMBERS_LANGS)}")
    rng = random.Random(seed)
    buckets = [
        range(0, 10),
        range(10, 100),
        range(100, 1000),
        range(1000, 10_000),
        range(10_000, NUMBERS_MAX + 1),
    ]
    chosen: list[int] = []
    left = n
    for i, bucket in enumerate(buckets):
        share = -(-left // (len(buckets) - i))  # ceil: spread what is left over the remaining buckets
        take = min(share, len(bucket))
        chosen.extend(rng.sample(bucket, take))
        left -= take
    rng.shuffle(chosen)
    return [_number_words(k, lang) for k in chosen]
