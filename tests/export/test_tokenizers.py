"""The exported HF tokenizer files encode raw text to attnlab's ids, and read back to the same tokenizer."""

from __future__ import annotations

import sys
import unicodedata

import pytest
from tokenizers import Tokenizer as HFTokenizer

from attnlab.data.corpus import read_pairs
from attnlab.data.numbers import numbers_pairs
from attnlab.data.specials import SPECIALS
from attnlab.data.subword import BPETokenizer
from attnlab.data.text import preprocess
from attnlab.data.tokenizer_files import from_hf, to_hf
from attnlab.data.vocab import Vocab, load_tokenizer


def _through_file(tok, tmp_path) -> HFTokenizer:
    path = tmp_path / f"tokenizer.{tok.lang}.json"
    to_hf(tok).save(str(path))
    return HFTokenizer.from_file(str(path))  # what a user of the exported folder does


def _assert_same_ids(tok, hf, texts):
    ours = [tok.encode(t) for t in texts]
    theirs = [e.ids for e in hf.encode_batch(list(texts), add_special_tokens=False)]
    bad = [(t, a, b) for t, a, b in zip(texts, ours, theirs) if a != b]
    assert not bad, bad[:5]


@pytest.fixture(scope="module")
def fra_eng_sample(fra_eng_zip):
    pairs = read_pairs(fra_eng_zip)
    return pairs[::40]  # ~4,200 raw pairs from every length range


def test_word_vocab_round_trip_on_fra_eng(fra_eng_sample, tmp_path):
    for side, lang in ((0, "en"), (1, "fr")):
        raw = [p[side] for p in fra_eng_sample]
        vocab = Vocab.build((preprocess(t).split() for t in raw[::2]), lang=lang, min_freq=2)
        hf = _through_file(vocab, tmp_path)
        assert [hf.token_to_id(s) for s in SPECIALS] == [0, 1, 2, 3]
        assert hf.get_vocab_size() == len(vocab)
        _assert_same_ids(vocab, hf, raw)  # raw Tatoeba text: capitals, ! ? with (narrow) no-break spaces
        unknown = hf.encode("zzzqx", add_special_tokens=False).ids
        assert unknown == vocab.encode("zzzqx") == [0]
        # The specials are whole words only, as Vocab looks them up; nothing is added around the text.
        _assert_same_ids(vocab, hf, ["<eos>", "a <pad> b", "<bos><eos>", "x<unk>", "<EOS> ."])
        back = load_tokenizer(from_hf(hf.to_str(), "word", lang, 2))
        assert back.idx_to_token == vocab.idx_to_token and back.lang == lang


def test_bpe_round_trip_on_fra_eng(fra_eng_sample, tmp_path):
    raw = [p[1] for p in fra_eng_sample]
    bpe = BPETokenizer.train(raw[::2], vocab_size=600, lang="fr")
    hf = _through_file(bpe, tmp_path)
    assert [hf.token_to_id(s) for s in SPECIALS] == [0, 1, 2, 3]
    _assert_same_ids(bpe, hf, raw)
    back = load_tokenizer(from_hf(hf.to_str(), "bpe", "fr"))
    assert [back.id_to_token(i) for i in range(len(back))] == [bpe.id_to_token(i) for i in range(len(bpe))]
    assert [back.encode(t) for t in raw[:200]] == [bpe.encode(t) for t in raw[:200]]


def test_normalizer_splits_and_drops_like_preprocess(tmp_path):
    """Every assigned whitespace, control, format and punctuation character, and a slice of letters,
    between two known words: the same ids (a dropped character joins them, a space splits them)."""
    vocab = Vocab(list(SPECIALS) + ["a", "b", "ab", ".", ",", "!", "?", "é", "ça"], lang="fr")
    hf = _through_file(vocab, tmp_path)
    chars = []
    for code in range(sys.maxunicode + 1):
        if 0xD800 <= code < 0xE000:
            continue
        cat = unicodedata.category(chr(code))
        if cat in ("Cc", "Cf", "Zs", "Zl", "Zp") or cat[0] == "P" or code < 0x2500:
            chars.append(chr(code))
    texts = [f"a{c}b" for c in chars] + [f"{c}a {c}" for c in chars]
    texts += ["Ça  va\u202f!", "e\u0301", "A.B,C!D?", "\u200bab\u00ad", "a\x1cb", " \t\n"]
    _assert_same_ids(vocab, hf, texts)


def test_numbers_vocab_round_trip(tmp_path):
    pairs = numbers_pairs(300)
    vocab = Vocab.build((preprocess(s).split() for s, _ in pairs), lang="en")
    hf = _through_file(vocab, tmp_path)
    _assert_same_ids(vocab, hf, [s.upper() + " ." for s, _ in pairs])


def test_from_hf_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="not a Hugging Face"):
        from_hf("{not json", "word", "en")
    holes = '{"model": {"type": "WordLevel", "vocab": {"<unk>": 0, "a": 2}, "unk_token": "<unk>"}}'
    with pytest.raises(ValueError, match="0..N-1"):
        from_hf(holes, "word", "en")
