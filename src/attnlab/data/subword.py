"""BPE subword tokenizer (Hugging Face ``tokenizers``) with the same protocol and special ids as :class:`Vocab`.

One model per language, trained on the *preprocessed* training split only (so validation and test
text never shapes the vocabulary). The special tokens are registered first, in
:data:`attnlab.data.specials.SPECIALS` order, so ``<unk>=0 <pad>=1 <bos>=2 <eos>=3`` as for words.

Word boundaries are kept with a Metaspace pre-tokenizer and decoder (``▁`` marks a word start, as
in SentencePiece), so for preprocessed text ``x`` made of characters seen in training,
``decode(encode(x)) == detokenize(x.split(), lang)`` — the BPE round trip is exact up to the
same detokenisation the word vocabulary applies. Characters never seen in training become ``<unk>``.
Text that itself contains ``▁`` (U+2581) is the one thing that does not round-trip: it reads back as a space.
Under the metaspace rule (:mod:`attnlab.data.languages`) the words already carry their ``▁``: the pieces are
learnt within each word as it stands, and decoding concatenates them with the rule's own decoder.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from attnlab.data.languages import TextRules, text_rules
from attnlab.data.specials import SPECIALS, check_lang, content_ids
from attnlab.files import MAX_LINE_BYTES

__all__ = ["BPETokenizer"]

_METASPACE = "▁"
#: The longest line and word (in characters) the BPE trainer is shown (:func:`_capped`); a model reads a few
#: hundred tokens of a line, and the longest words of European languages have some 60 letters.
MAX_TRAIN_LINE = MAX_LINE_BYTES
MAX_TRAIN_WORD = 100


def _capped(text: str) -> str:
    """``text`` as the BPE trainer may see it: at most :data:`MAX_TRAIN_LINE` characters, each word (what the
    Metaspace pre-tokenizer splits at spaces) at most :data:`MAX_TRAIN_WORD`. The trainer's work on one word grows
    with the square of its length (each merge rescans it), so one long unspaced line would stall training; with
    both capped its time is linear in the corpus. Real words are far shorter, and ``max_token_length`` (the
    library's own option) bounds the tokens learnt, not this work."""
    text = text[:MAX_TRAIN_LINE]
    if len(text) <= MAX_TRAIN_WORD:
        return text
    return " ".join(word[:MAX_TRAIN_WORD] for word in text.split(" "))


class BPETokenizer:
    """Byte-pair-encoding subwords for one language; implements :class:`attnlab.data.vocab.Tokenizer`.

    Build one with :meth:`train`; ``to_json()`` embeds the whole HF tokenizer JSON string so a run
    folder is self-contained. ``text``: the rules applied before the subwords are learnt and after they
    are joined (:data:`attnlab.data.languages.RULES`; D2L's by default, as in every one saved before).
    """

    kind = "bpe"

    def __init__(self, tokenizer: HFTokenizer, lang: str, text: str = "d2l") -> None:
        check_lang(lang)
        self.rules: TextRules = text_rules(text, lang)
        self.text = text
        for i, special in enumerate(SPECIALS):
            if tokenizer.token_to_id(special) != i:
                raise ValueError(
                    f"BPE tokenizer must map {special} to id {i}, got {tokenizer.token_to_id(special)}"
                )
        self._tok = tokenizer
        self.lang = lang

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int, lang: str, preprocessed: bool = False, text: str = "d2l"
    ) -> BPETokenizer:
        """Learn BPE merges from ``texts`` (training split only), up to ``vocab_size`` entries in total."""
        check_lang(lang)
        rules = text_rules(text, lang)
        if vocab_size < len(SPECIALS) + 1:
            raise ValueError(f"vocab_size={vocab_size} is too small for the {len(SPECIALS)} special tokens")
        tok = HFTokenizer(models.BPE(unk_token=SPECIALS[0]))
        # The metaspace rule's words start with their own ▁ where a space stood: a second mark would be noise.
        tok.pre_tokenizer = (pre_tokenizers.WhitespaceSplit() if text == "metaspace"
                             else pre_tokenizers.Metaspace(replacement=_METASPACE, prepend_scheme="always"))
        tok.decoder = decoders.Metaspace(replacement=_METASPACE, prepend_scheme="always")
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=list(SPECIALS), show_progress=False
        )
        if not preprocessed:
            texts = (rules.preprocess(t) for t in texts)
        tok.train_from_iterator((_capped(t) for t in texts), trainer=trainer)
        return cls(tok, lang, text)

    def __len__(self) -> int:
        return self._tok.get_vocab_size()

    def preprocess(self, text: str) -> str:
        """``text`` as space-separated words, by this tokenizer's text rules (before the subwords)."""
        return self.rules.preprocess(text)

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Readable text of words (this tokenizer's text rules and language)."""
        return self.rules.detokenize(tokens)

    def tokens(self, text: str) -> list[str]:
        """Subword pieces of ``preprocess(text)`` (``▁`` starts a word; unseen characters are ``<unk>``)."""
        return self._tok.encode(self.preprocess(text), add_special_tokens=False).tokens

    def encode(self, text: str) -> list[int]:
        """Ids of ``preprocess(text)``'s pieces; no ``<eos>`` is added."""
        return self._tok.encode(self.preprocess(text), add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str], preprocessed: bool = False) -> list[list[int]]:
        """``[encode(t) for t in texts]``, encoded in parallel by the Rust library."""
        texts = list(texts) if preprocessed else [self.preprocess(t) for t in texts]
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def id_to_token(self, i: int) -> str:
        """The piece for id ``i``; raises ``IndexError`` outside ``[0, len(self))``."""
        token = self._tok.id_to_token(i) if 0 <= i < len(self) else None
        if token is None:
            raise IndexError(f"token id {i} is outside the vocabulary of size {len(self)}")
        return token

    def decode(self, ids: Iterable[int], keep_unk: bool = False) -> str:
        """Text for ``ids``: stops at ``<eos>``, drops ``<pad>``/``<bos>`` (and ``<unk>`` unless
        ``keep_unk``), joins pieces at ``▁`` boundaries and detokenises for ``self.lang``."""
        content = content_ids(ids, keep_unk)
        pieces = [self.id_to_token(i) for i in content]  # range check with a clear message
        if self.text == "metaspace":  # the pieces hold every space as ▁: the rule joins them losslessly
            return self.detokenize(pieces)
        text = self._tok.decode(content, skip_special_tokens=False)
        return self.detokenize(text.split())

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "lang": self.lang, "vocab_size": len(self), "tokenizer": self._tok.to_str()}
        if self.text != "d2l":  # D2L's rules are implied, as in every tokenizer saved before there were others
            out["text"] = self.text
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BPETokenizer:
        spec = d["tokenizer"]
        try:
            tok = HFTokenizer.from_str(spec)
        except Exception as e:  # the Rust library raises a bare Exception for malformed JSON
            raise ValueError(f"saved BPE tokenizer cannot be parsed: {e}") from None
        return cls(tok, d["lang"], d.get("text", "d2l"))

    def __repr__(self) -> str:
        rules = "" if self.text == "d2l" else f", text={self.text!r}"
        return f"BPETokenizer(lang={self.lang!r}, size={len(self)}{rules})"
