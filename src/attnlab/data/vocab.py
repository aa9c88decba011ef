"""Word vocabularies with D2L's reserved ids, and the tokenizer protocol shared with BPE (the notes' §4).

The special ids ``<unk>=0, <pad>=1, <bos>=2, <eos>=3`` are fixed by the notes' §4 example and live
in :mod:`attnlab.data.specials` (re-exported here: ``from attnlab.data.vocab import EOS`` works).

Ids carry no meaning of size or importance (the notes' §4): they are row numbers of the embedding
table. Ordinary tokens follow the specials ordered by frequency (descending), ties broken by the
token string, so the same training text always yields the same ids.

Every tokenizer (the word :class:`Vocab` here, ``BPETokenizer`` in :mod:`attnlab.data.subword`)
implements :class:`Tokenizer`; :func:`load_tokenizer` rebuilds either from its ``to_json()``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from attnlab.data.languages import RULES, TextRules, text_rules
from attnlab.data.specials import BOS, EOS, LANGS, PAD, SPECIALS, UNK, check_lang, content_ids
from attnlab.data.subword import BPETokenizer

__all__ = ["UNK", "PAD", "BOS", "EOS", "SPECIALS", "LANGS", "RULES", "Tokenizer", "Vocab", "load_tokenizer"]


@runtime_checkable
class Tokenizer(Protocol):
    """What the rest of attnlab may rely on, whatever the tokenizer kind.

    ``encode`` preprocesses with the tokenizer's text rules (``text``, :mod:`attnlab.data.languages`: D2L's,
    Moses' or characters, for ``lang``) and never adds ``<bos>``/``<eos>``; ``decode`` stops at the first
    ``<eos>``, drops ``<pad>``/``<bos>`` (and ``<unk>`` unless ``keep_unk=True``) and detokenises by those rules.
    """

    kind: str
    lang: str
    text: str

    def preprocess(self, text: str) -> str: ...
    def detokenize(self, tokens: Sequence[str]) -> str: ...

    def encode(self, text: str) -> list[int]: ...
    def encode_batch(self, texts: Sequence[str], preprocessed: bool = False) -> list[list[int]]: ...
    def tokens(self, text: str) -> list[str]: ...
    def decode(self, ids: Iterable[int], keep_unk: bool = False) -> str: ...
    def id_to_token(self, i: int) -> str: ...
    def __len__(self) -> int: ...
    def to_json(self) -> dict[str, Any]: ...


class Vocab:
    """A word-level vocabulary (D2L's ``Vocab``): ``idx_to_token`` starts with :data:`SPECIALS`.

    Build one with :meth:`Vocab.build` from tokenised training sentences; tokens seen fewer than
    ``min_freq`` times map to ``<unk>``. ``vocab[token]`` / ``vocab[list_of_tokens]`` look ids up
    the D2L way. ``text``: the rules that cut text into its words (:data:`attnlab.data.languages.RULES`;
    D2L's by default, and for every vocabulary saved before there were others).
    """

    kind = "word"

    def __init__(self, idx_to_token: Sequence[str], lang: str, min_freq: int = 1, text: str = "d2l") -> None:
        check_lang(lang)
        self.rules: TextRules = text_rules(text, lang)
        idx_to_token = list(idx_to_token)
        if tuple(idx_to_token[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a vocabulary must start with the special tokens {SPECIALS}")
        token_to_idx = {t: i for i, t in enumerate(idx_to_token)}
        if len(token_to_idx) != len(idx_to_token):
            raise ValueError("a vocabulary must not contain the same token twice")
        self.idx_to_token = idx_to_token
        self.token_to_idx = token_to_idx
        self.lang = lang
        self.text = text
        self.min_freq = min_freq

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], lang: str, min_freq: int = 1, text: str = "d2l") -> Vocab:
        """Count tokens over ``sentences`` (each a list of tokens) and keep those seen ``>= min_freq`` times.

        Order: specials, then frequency descending, ties by token string (deterministic).
        A token spelled like a special (``"<unk>"`` in the text) is not added twice.
        """
        if min_freq < 1:
            raise ValueError(f"min_freq={min_freq} must be >= 1")
        counter: Counter[str] = Counter()
        for sentence in sentences:
            counter.update(sentence)
        for special in SPECIALS:
            counter.pop(special, None)
        kept = sorted(
            (item for item in counter.items() if item[1] >= min_freq), key=lambda kv: (-kv[1], kv[0])
        )
        return cls(list(SPECIALS) + [tok for tok, _ in kept], lang=lang, min_freq=min_freq, text=text)

    # -- D2L-style lookups ---------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.idx_to_token)

    def __getitem__(self, tokens: str | Sequence[str]) -> int | list[int]:
        if isinstance(tokens, str):
            return self.token_to_idx.get(tokens, UNK)
        get = self.token_to_idx.get
        return [get(t, UNK) for t in tokens]

    # -- the tokenizer protocol ------------------------------------------------------------------
    def preprocess(self, text: str) -> str:
        """``text`` as this vocabulary's words, separated by spaces (its text rules)."""
        return self.rules.preprocess(text)

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Readable text of words (its text rules, its language)."""
        return self.rules.detokenize(tokens)

    def tokens(self, text: str) -> list[str]:
        """Word tokens of ``text`` as the model sees them (out-of-vocabulary words become ``<unk>``)."""
        return [t if t in self.token_to_idx else SPECIALS[UNK] for t in self.preprocess(text).split()]

    def encode(self, text: str) -> list[int]:
        """Ids of ``preprocess(text)``'s tokens; no ``<eos>`` is added."""
        get = self.token_to_idx.get
        return [get(t, UNK) for t in self.preprocess(text).split()]

    def encode_batch(self, texts: Sequence[str], preprocessed: bool = False) -> list[list[int]]:
        """``[encode(t) for t in texts]``; ``preprocessed=True`` skips re-normalising (faster)."""
        get = self.token_to_idx.get
        if not preprocessed:
            texts = [self.preprocess(t) for t in texts]
        return [[get(t, UNK) for t in text.split()] for text in texts]

    def id_to_token(self, i: int) -> str:
        """The token for id ``i``; raises ``IndexError`` for an id outside ``[0, len(self))``."""
        if not 0 <= i < len(self.idx_to_token):
            raise IndexError(f"token id {i} is outside the vocabulary of size {len(self.idx_to_token)}")
        return self.idx_to_token[i]

    def decode(self, ids: Iterable[int], keep_unk: bool = False) -> str:
        """Text for ``ids``: stops at ``<eos>``, drops ``<pad>``/``<bos>`` (and ``<unk>`` unless
        ``keep_unk``), detokenised by its text rules."""
        return self.detokenize([self.id_to_token(i) for i in content_ids(ids, keep_unk)])

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "lang": self.lang, "min_freq": self.min_freq, "idx_to_token": self.idx_to_token}
        if self.text != "d2l":  # D2L's rules are implied, as in every vocabulary saved before there were others
            out["text"] = self.text
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Vocab:
        return cls(d["idx_to_token"], lang=d["lang"], min_freq=int(d.get("min_freq", 1)), text=d.get("text", "d2l"))

    def __repr__(self) -> str:
        rules = "" if self.text == "d2l" else f", text={self.text!r}"
        return f"Vocab(lang={self.lang!r}, size={len(self)}, min_freq={self.min_freq}{rules})"


def load_tokenizer(d: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from its ``to_json()`` dict; raises ``ValueError`` for an unknown or broken one."""
    if not isinstance(d, dict):
        raise ValueError(f"a saved tokenizer must be a JSON object, got {type(d).__name__}")
    kind = d.get("kind")
    try:
        if kind == Vocab.kind:
            return Vocab.from_json(d)
        if kind == BPETokenizer.kind:
            return BPETokenizer.from_json(d)
    except (KeyError, TypeError) as e:
        raise ValueError(f"saved {kind} tokenizer is incomplete: missing or malformed {e}") from None
    raise ValueError(f"saved tokenizer has kind={kind!r}; expected 'word' or 'bpe'")
