"""The reserved token ids and languages every tokenizer shares, word or BPE (the notes' §4).

The notes' §4 example ``i'm home . <eos> <pad>`` → ``[37, 86, 4, 3, 1, 1]`` fixes the special ids:
``<unk>=0, <pad>=1, <bos>=2, <eos>=3`` (D2L puts ``<unk>`` first, then the reserved tokens). Use the
named constants below; never write the numbers anywhere else.

Both tokenizer kinds build on this module — :class:`attnlab.data.vocab.Vocab` and
:class:`attnlab.data.subword.BPETokenizer` — so neither needs the other for the ids they share.
"""

from __future__ import annotations

from collections.abc import Iterable

from attnlab.config import LANGUAGES

__all__ = ["UNK", "PAD", "BOS", "EOS", "MASK", "MASK_TOKEN", "SPECIALS", "LANGS", "check_lang", "content_ids"]

UNK, PAD, BOS, EOS = 0, 1, 2, 3
SPECIALS = ("<unk>", "<pad>", "<bos>", "<eos>")  # SPECIALS[UNK] == "<unk>", ...
# The encoder-only model's [MASK] (BERT, notes §28.2) reuses <bos>'s id. A source never holds <bos>
# (batches are `x1..xm <eos>`; <bos> only starts the decoder's input), so that row of a source
# embedding table is free in every family, and the masked LM, which reads sources only, gives it the
# [MASK] meaning. A fifth special would have changed every tokenizer (word and BPE) and made the
# encoder-only vocabulary differ from the other families' on the same data; this changes none.
MASK = BOS
MASK_TOKEN = "[MASK]"  # how a user writes it (`attnlab fill RUN "i'm [MASK] ."`) and how labels show it
LANGS = LANGUAGES  # ISO 639-1 codes: a tokenizer's language names its text rules (data/languages.py)
_DROPPED = frozenset({PAD, BOS})  # decode() drops these; EOS ends decoding; UNK is dropped unless kept


def check_lang(lang: str) -> None:
    """Raise ``ValueError`` unless ``lang`` is one of :data:`LANGS` (an ISO 639-1 code)."""
    if lang not in LANGS:
        raise ValueError(f"lang={lang!r} is not an ISO 639-1 language code; use two lowercase letters, e.g. en, fr, "
                         "de, ja")


def content_ids(ids: Iterable[int], keep_unk: bool) -> list[int]:
    """The ids ``decode`` turns into text: up to the first ``<eos>``, without other specials."""
    out = []
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        if i in _DROPPED or (i == UNK and not keep_unk):
            continue
        out.append(i)
    return out
