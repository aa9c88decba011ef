"""attnlab's tokenizers as standard Hugging Face ``tokenizers`` JSON files, and back (notes §4).

An exported folder holds one ``tokenizer.<lang>.json`` per language that
``tokenizers.Tokenizer.from_file`` loads and that encodes *raw* text to the very ids attnlab uses:

- the normalizer is :func:`attnlab.data.text.preprocess` spelled as HF normalizers — drop the
  invisible characters (``Cc``/``Cf`` that are not whitespace), NFC, lowercase, NFC, a space before
  each of ``, . ! ?``, every run of whitespace (Python's ``str.isspace``) to one space, strip;
- a word vocabulary becomes a ``WordLevel`` model (same ids, ``<unk>`` for unknown words) behind a
  ``WhitespaceSplit`` pre-tokenizer; the specials ``<unk>=0 <pad>=1 <bos>=2 <eos>=3`` are ordinary
  entries, so a typed ``<eos>`` is id 3 only as a whole word, exactly as :class:`~attnlab.data.vocab.Vocab`
  looks words up;
- a BPE tokenizer keeps its model, pre-tokenizer and decoder (it already is an HF tokenizer) and
  gains the normalizer above.

No post-processor: ``encode`` adds no ``<bos>``/``<eos>`` (attnlab appends the source's ``<eos>``
itself). Known differences, all in words outside every fra-eng vocabulary (``<unk>`` either way):
HF lowercases character by character, so a capital sigma ending a Greek word gives ``σ`` where
Python gives ``ς``; and letters newer than this Python's Unicode tables (a few dozen capitals of
Unicode 16) are lowercased by the Rust library only.
"""

from __future__ import annotations

import functools
import json
import sys
import unicodedata
from typing import Any

from tokenizers import Regex, normalizers, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer
from tokenizers.models import WordLevel

from attnlab.data.specials import SPECIALS, UNK
from attnlab.data.text import PUNCTUATION


def _char_class(chars: list[str]) -> str:
    """A regex character class (Oniguruma ``\\x{…}`` escapes) matching exactly ``chars``, as ranges."""
    codes = sorted(ord(c) for c in chars)
    parts, start, prev = [], codes[0], codes[0]
    for c in codes[1:] + [-1]:
        if c == prev + 1:
            prev = c
            continue
        parts.append(f"\\x{{{start:X}}}" if start == prev else f"\\x{{{start:X}}}-\\x{{{prev:X}}}")
        start = prev = c
    return "[" + "".join(parts) + "]"


@functools.lru_cache(maxsize=1)
def _classes() -> tuple[str, str]:
    """(characters preprocess drops, characters it treats as whitespace), from this Python's Unicode tables."""
    dropped, spaces = [], []
    for code in range(sys.maxunicode + 1):
        if 0xD800 <= code < 0xE000:
            continue  # lone surrogates never reach the Rust library
        c = chr(code)
        if c.isspace():
            spaces.append(c)
        elif unicodedata.category(c) in ("Cc", "Cf"):
            dropped.append(c)
    return _char_class(dropped), _char_class(spaces)


def whitespace_classes() -> tuple[str, str]:
    """Regex classes (Oniguruma) of the characters D2L's cleaning drops, and of those it reads as whitespace."""
    return _classes()


def clean_normalizer() -> normalizers.Normalizer:
    """:func:`attnlab.data.languages.clean` as HF normalizers: invisible characters and U+FFFD dropped, NFC,
    every run of whitespace one space, the ends stripped (case kept)."""
    dropped, spaces = _classes()
    return normalizers.Sequence([normalizers.Replace(Regex(dropped), ""), normalizers.Replace("\ufffd", ""),
                                 normalizers.NFC(), normalizers.Replace(Regex(spaces + "+"), " "),
                                 normalizers.Strip()])


def preprocess_normalizer() -> normalizers.Normalizer:
    """:func:`attnlab.data.text.preprocess` as one HF normalizer (see the module docstring)."""
    dropped, spaces = _classes()
    steps = [normalizers.Replace(Regex(dropped), ""), normalizers.NFC(), normalizers.Lowercase(), normalizers.NFC()]
    steps += [normalizers.Replace(mark, " " + mark) for mark in sorted(PUNCTUATION)]
    steps += [normalizers.Replace(Regex(spaces + "+"), " "), normalizers.Strip()]
    return normalizers.Sequence(steps)


def to_hf(tok) -> HFTokenizer:
    """The HF tokenizer that encodes raw text to ``tok``'s ids (a word :class:`Vocab` or a BPE tokenizer)."""
    saved = tok.to_json()
    if saved["kind"] == "bpe":
        hf = HFTokenizer.from_str(saved["tokenizer"])
    else:
        table = saved["idx_to_token"]
        hf = HFTokenizer(WordLevel({t: i for i, t in enumerate(table)}, unk_token=SPECIALS[UNK]))
        hf.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf.normalizer = preprocess_normalizer()
    return hf


def from_hf(text: str, kind: str, lang: str, min_freq: int = 1, rule: str = "d2l") -> dict[str, Any]:
    """The attnlab tokenizer JSON (what :func:`attnlab.data.vocab.load_tokenizer` reads) of an exported file.

    ``text``: the file's content, as :func:`to_hf` wrote it; ``rule``: the side's text rule
    (:data:`attnlab.data.languages.RULES`). attnlab preprocesses in Python before the Rust library sees the
    text, so the normalizer is dropped again (it would redo that work), and so is the rule's cut: a BPE
    tokenizer of the metaspace rule splits its preprocessed text at spaces only.
    Raises ``ValueError`` when the file is not such a tokenizer.
    """
    try:
        spec = json.loads(text)
        model = spec["model"]
    except (ValueError, KeyError, TypeError):
        raise ValueError("not a Hugging Face tokenizers JSON file") from None
    spec["normalizer"] = None
    spec["post_processor"] = None  # an export's `$A <eos>`: attnlab appends the source's <eos> itself
    pre = spec.get("pre_tokenizer")
    if kind == "bpe" and rule == "metaspace":  # the export's metaspace cut; attnlab hands the BPE its tokens
        spec["pre_tokenizer"] = {"type": "WhitespaceSplit"}
    elif kind == "bpe" and isinstance(pre, dict) and pre.get("type") == "Sequence" and pre.get("pretokenizers"):
        spec["pre_tokenizer"] = pre["pretokenizers"][-1]  # an export's text-rule cuts, then the BPE's Metaspace
    decoder = spec.get("decoder")
    if kind == "bpe" and isinstance(decoder, dict) and decoder.get("type") == "Sequence" and decoder.get("decoders"):
        spec["decoder"] = decoder["decoders"][0]  # an export's Metaspace, then its detokenizing (attnlab's own)
    if kind == "bpe":
        return {"kind": "bpe", "lang": lang, "tokenizer": json.dumps(spec, ensure_ascii=False)}
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if not isinstance(vocab, dict) or model.get("type") != "WordLevel":
        raise ValueError("a word vocabulary must be a WordLevel model with a vocab table")
    if not all(type(i) is int for i in vocab.values()):  # a crafted file: ids that are not integers
        raise ValueError("the WordLevel ids are not 0..N-1, each used once")
    table = sorted(vocab, key=vocab.__getitem__)
    if [vocab[t] for t in table] != list(range(len(table))):
        raise ValueError("the WordLevel ids are not 0..N-1, each used once")
    return {"kind": "word", "lang": lang, "min_freq": min_freq, "idx_to_token": table}
