"""Word vocabularies (the notes' §4), the shared tokenizer protocol, and BPE subwords."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.data.subword import BPETokenizer
from attnlab.data.text import detokenize, preprocess, tokenize
from attnlab.data.vocab import BOS, EOS, PAD, SPECIALS, UNK, Tokenizer, Vocab, load_tokenizer

EN = ["I'm home.", "I'm cold.", "Go home.", "He's calm.", "I lost.", "Go.", "Go now!"]
FR = [
    "Je suis chez moi.",
    "J'ai froid.",
    "Rentre à la maison.",
    "Il est calme.",
    "J'ai perdu.",
    "Va !",
    "Va !",
]


def test_special_ids_are_d2l_and_the_notes():
    # The notes' §4: "... <eos> <pad>" -> "..., 3, 1, 1"; <unk> first as in D2L.
    assert (UNK, PAD, BOS, EOS) == (0, 1, 2, 3)
    assert SPECIALS == ("<unk>", "<pad>", "<bos>", "<eos>")
    assert [SPECIALS[i] for i in (UNK, PAD, BOS, EOS)] == ["<unk>", "<pad>", "<bos>", "<eos>"]


def test_vocab_orders_by_frequency_then_token_and_applies_min_freq():
    v = Vocab.build([tokenize(s) for s in EN], lang="en", min_freq=2)
    # counts: "." 6, "i'm" 2, "go" 3, "home" 2; everything else once -> dropped
    assert v.idx_to_token == [*SPECIALS, ".", "go", "home", "i'm"]
    assert v["go"] == 5 and v["calm"] == UNK and v[["i'm", "home", "."]] == [7, 6, 4]
    assert v.tokens("I'm calm.") == ["i'm", "<unk>", "."]
    assert v.encode("I'm calm.") == [7, UNK, 4]
    # same text in another order -> same ids (determinism)
    assert (
        Vocab.build([tokenize(s) for s in reversed(EN)], lang="en", min_freq=2).idx_to_token == v.idx_to_token
    )


def test_vocab_does_not_duplicate_special_spellings():
    v = Vocab.build([["<unk>", "<eos>", "a"]], lang="en")
    assert v.idx_to_token == [*SPECIALS, "a"]


def test_decode_stops_at_eos_and_drops_specials():
    v = Vocab.build([tokenize(s) for s in FR], lang="fr")
    ids = [BOS, *v.encode("Je suis chez moi."), EOS, *v.encode("Va !"), PAD, PAD]
    assert v.decode(ids) == "je suis chez moi."
    assert v.decode([*v.encode("Va !"), PAD]) == "va !"  # French keeps the space before "!"
    assert v.decode(torch.tensor(ids)) == "je suis chez moi."  # a row of a model's output works too
    assert v.decode([v["je"], UNK, v["."]]) == "je."
    assert v.decode([v["je"], UNK, v["."]], keep_unk=True) == "je <unk>."
    with pytest.raises(IndexError, match="outside the vocabulary"):
        v.decode([len(v)])


def test_vocab_round_trips_through_json():
    v = Vocab.build([tokenize(s) for s in EN], lang="en", min_freq=1)
    d = json.loads(json.dumps(v.to_json()))
    w = load_tokenizer(d)
    assert isinstance(w, Vocab) and isinstance(w, Tokenizer)
    assert w.idx_to_token == v.idx_to_token and w.lang == "en" and w.min_freq == 1
    for s in EN:
        assert w.encode(s) == v.encode(s)
        assert w.decode(w.encode(s)) == detokenize(tokenize(s), "en")


def test_load_tokenizer_rejects_garbage():
    with pytest.raises(ValueError, match="kind"):
        load_tokenizer({"kind": "sentencepiece"})
    with pytest.raises(ValueError, match="incomplete"):
        load_tokenizer({"kind": "word", "lang": "en"})
    with pytest.raises(ValueError, match="special tokens"):
        load_tokenizer({"kind": "word", "lang": "en", "idx_to_token": ["a", "b"]})
    with pytest.raises(ValueError, match="cannot be parsed"):
        load_tokenizer({"kind": "bpe", "lang": "en", "tokenizer": "{not json"})
    with pytest.raises(ValueError, match="lang='xx' is not an ISO 639-1 language code"):
        Vocab(SPECIALS, lang="xx")  # any ISO 639-1 code is a language now (de, ja, ...), an unknown one is not
    with pytest.raises(ValueError, match="text rule 'spaces' is unknown"):
        load_tokenizer({"kind": "word", "lang": "de", "idx_to_token": list(SPECIALS), "text": "spaces"})


# ----------------------------------------------------------------------------------------------
# BPE


@pytest.fixture(scope="module")
def bpe_fr():
    text = [preprocess(s) for s in FR] * 3 + ["les chats sont noirs .", "elle a vingt-deux ans ."]
    return BPETokenizer.train(text, vocab_size=120, lang="fr", preprocessed=True)


def test_bpe_has_the_same_special_ids(bpe_fr):
    assert [bpe_fr.id_to_token(i) for i in range(4)] == list(SPECIALS)
    assert isinstance(bpe_fr, Tokenizer)
    assert len(bpe_fr) <= 120
    ids = bpe_fr.encode("Je suis chez moi.")
    assert ids and EOS not in ids and BOS not in ids  # encode never adds specials


ALPHABET = sorted(set("".join(preprocess(s) for s in FR)) - {" "})


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(ALPHABET), min_size=1, max_size=8), max_size=8))
def test_bpe_decode_inverts_encode_on_preprocessed_text(bpe_fr, words):
    text = " ".join(words)  # made of characters seen in training: no <unk>
    x = preprocess(text)
    ids = bpe_fr.encode(x)
    assert UNK not in ids
    assert bpe_fr.decode(ids) == detokenize(x.split(), "fr")
    assert bpe_fr.decode([*ids, EOS, *ids, PAD]) == detokenize(x.split(), "fr")
    assert preprocess(bpe_fr.decode(ids)) == x


def test_bpe_tokens_mark_word_starts_and_unknown_characters(bpe_fr):
    pieces = bpe_fr.tokens("Je suis chez moi.")
    assert "".join(pieces).replace("▁", " ").strip() == "je suis chez moi ."
    assert "<unk>" in bpe_fr.tokens("je 😀")
    assert bpe_fr.decode(bpe_fr.encode("je 😀 suis")) == "je suis"


def test_bpe_round_trips_through_json(bpe_fr):
    d = json.loads(json.dumps(bpe_fr.to_json()))
    assert d["kind"] == "bpe" and isinstance(d["tokenizer"], str)
    again = load_tokenizer(d)
    assert isinstance(again, BPETokenizer) and again.lang == "fr" and len(again) == len(bpe_fr)
    for s in FR:
        assert again.encode(s) == bpe_fr.encode(s)
        assert again.decode(again.encode(s)) == bpe_fr.decode(bpe_fr.encode(s))
    assert again.encode_batch(FR) == [bpe_fr.encode(s) for s in FR]
