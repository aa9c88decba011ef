"""Each language's text rules (data/languages.py): the lossless metaspace rule for space-separated scripts (Moses'
on request), characters for Chinese and Japanese, and D2L's, unchanged, for fra-eng (the notes rely on it)."""

from __future__ import annotations

import pytest
from sacremoses import MosesDetokenizer, MosesTokenizer

from attnlab.config import DataConfig
from attnlab.data import text as d2l
from attnlab.data.languages import text_rules
from attnlab.data.subword import BPETokenizer
from attnlab.data.vocab import Vocab, load_tokenizer
from attnlab.notes import REFERENCES, SENTENCES

GERMAN = [
    "Ich bin zu Hause.",
    "Das ist z.B. \"gut\", oder?",
    "Er sagte: „Hallo!“ und ging – schnell.",
    "Wir treffen uns um 3.5 Uhr (ungefähr).",
    "Die Straße heißt Müller-Weg; sie ist 1.000 m lang!",
]


@pytest.mark.parametrize("sentence", GERMAN)
def test_moses_german_is_sacremoses_and_round_trips(sentence):
    rules = text_rules("moses", "de")
    tokens = rules.preprocess(sentence).split()
    assert tokens == MosesTokenizer(lang="de").tokenize(sentence, escape=False)  # the library's cut, as it is
    text = rules.detokenize(tokens)
    assert text == MosesDetokenizer(lang="de").detokenize(tokens)
    assert rules.preprocess(text).split() == tokens  # detokenized text cuts back to the same tokens
    assert any(c.isupper() for c in text)  # Moses keeps case (D2L lowercases)


def test_moses_cleans_as_d2l_does_without_lowercasing():
    rules = text_rules("moses", "de")
    assert rules.preprocess("  Gute\u200b  Nacht\u00a0!\x07 ") == "Gute Nacht !"  # invisible dropped, spaces folded
    assert rules.preprocess("Cafe\u0301") == "Café"  # NFC: a combining accent and the precomposed letter are one


@pytest.mark.parametrize("lang, sentence, tokens, back", [
    ("ja", "私は学生です。", "私 は 学 生 で す 。", "私は学生です。"),
    ("ja", "二万千三百四十五", "二 万 千 三 百 四 十 五", "二万千三百四十五"),
    ("ja", "トムは「ＡＢＣ」と言った！", "ト ム は 「 Ａ Ｂ Ｃ 」 と 言 っ た ！", "トムは「ＡＢＣ」と言った！"),
    ("zh", "我有 iPhone 12 手机。", "我 有 iPhone 12 手 机 。", "我有iPhone 12手机。"),
    ("zh", "他说：“你好！”", "他 说 ： “ 你 好 ！ ”", "他说：“你好！”"),
])
def test_characters_for_chinese_and_japanese(lang, sentence, tokens, back):
    rules = text_rules("chars", lang)
    assert rules.preprocess(sentence) == tokens  # each CJK character a token; a Latin word or number one
    assert rules.detokenize(tokens.split()) == back  # no space between CJK characters; one between two Latin runs
    assert rules.preprocess(back) == tokens


def test_auto_rules_follow_the_languages_and_keep_d2l_for_fra_eng():
    from attnlab.data.pairs import pair_of

    def rules(**kw):
        return pair_of(DataConfig(**kw)).rules

    assert rules() == ("d2l", "d2l")
    assert rules(direction="fr-en") == ("d2l", "d2l")
    assert rules(dataset="numbers") == ("d2l", "d2l")  # the task as it always was
    assert rules(dataset="numbers", tgt_lang="ja") == ("d2l", "chars")
    assert rules(dataset="numbers", tgt_lang="de") == ("d2l", "metaspace")
    assert rules(dataset="file", src_lang="en", tgt_lang="de") == ("metaspace", "metaspace")
    assert rules(dataset="file", src_lang="zh", tgt_lang="en") == ("chars", "metaspace")
    assert rules(dataset="file", src_lang="en", tgt_lang="fr", preprocess="d2l") == ("d2l", "d2l")


def test_d2l_rules_are_the_notes_preprocessing_unchanged():
    rules = {lang: text_rules("d2l", lang) for lang in ("en", "fr")}
    for en in SENTENCES:
        fr = REFERENCES[en]
        assert rules["en"].preprocess(en) == d2l.preprocess(en)
        assert rules["fr"].preprocess(fr) == d2l.preprocess(fr)
        assert rules["fr"].detokenize(d2l.tokenize(fr)) == d2l.detokenize(d2l.tokenize(fr), "fr")
    assert rules["en"].preprocess("I'm home.") == "i'm home ."  # the notes' §4 example
    vocab = Vocab.build([d2l.tokenize("I'm home.")], lang="en")
    assert vocab.encode("I'm home.") == [vocab[t] for t in ("i'm", "home", ".")]
    assert "text" not in vocab.to_json()  # a fra-eng vocabulary is saved exactly as before
    assert load_tokenizer(vocab.to_json()).text == "d2l"  # and every one saved before reads as D2L's


@pytest.mark.parametrize("rule, lang", [("d2l", "en"), ("moses", "de"), ("moses", "en"), ("chars", "ja"), ("metaspace", "en"),
                                        ("chars", "zh")])
def test_every_rule_is_total_on_odd_text(rule, lang):
    rules = text_rules(rule, lang)
    for s in ["", "   ", "\x00\x07", "\ud800 lone", "\ufffd", "a\tb\nc", "😀 emoji", "‮rtl‬", "<unk> <eos>"]:
        out = rules.preprocess(s)
        assert isinstance(out, str) and "  " not in out and out == out.strip()
        assert isinstance(rules.detokenize(out.split()), str)


METASPACE_TEXTS = [*GERMAN, "I'm home.", "Don't go, Tom!", "'Hello,' he said.", "Va ! Je suis là.",
                   "It's 12:30 -- isn't it?", "Ça coûte 3,50 €.", "well-known e-mail", "x (y) [z]"]


@pytest.mark.parametrize("sentence", METASPACE_TEXTS)
def test_metaspace_is_lossless_where_moses_is_not(sentence):
    """Joining gives the cleaned text back, so `don't` never reads `don 't`; case kept, a space marked ▁."""
    rules = text_rules("metaspace", "en")
    tokens = rules.preprocess(sentence).split()
    assert rules.detokenize(tokens) == sentence
    assert "".join(tokens).replace("\u2581", " ").strip() == sentence


def test_metaspace_cuts_words_from_marks():
    rules = text_rules("metaspace", "en")
    assert rules.preprocess("I'm home.") == "\u2581I ' m \u2581home ."
    assert rules.preprocess("Va !") == "\u2581Va \u2581!"  # the space before ! is kept, on the mark
    assert rules.preprocess("  Straße\u200b ÉCOLE\u2581x ") == "\u2581Straße \u2581ÉCOLE \u2581x"
    assert rules.detokenize(["\u2581I", "'", "m", "\u2581home", "."]) == "I'm home."


def test_metaspace_bpe_joins_pieces_losslessly():
    texts = METASPACE_TEXTS * 3
    bpe = BPETokenizer.train(texts, 200, lang="en", text="metaspace")
    again = load_tokenizer(bpe.to_json())
    assert again.text == "metaspace"
    for text in METASPACE_TEXTS:
        assert again.decode(again.encode(text)) == text, text
    assert all(not p.startswith("\u2581\u2581") for t in texts for p in bpe.tokens(t))  # one mark per word


def test_tokenizers_keep_their_rules_through_json():
    ja = ["私は学生です。", "二万千三百四十五", "彼は先生です。"] * 3
    rules = text_rules("chars", "ja")
    vocab = Vocab.build([rules.preprocess(s).split() for s in ja], lang="ja", text="chars")
    again = load_tokenizer(vocab.to_json())
    assert again.text == "chars" and again.decode(again.encode("私は先生です。")) == "私は先生です。"
    bpe = BPETokenizer.train([text_rules("moses", "de").preprocess(s) for s in GERMAN * 3], 120, lang="de",
                             preprocessed=True, text="moses")
    again = load_tokenizer(bpe.to_json())
    assert again.text == "moses" and again.decode(again.encode(GERMAN[0])) == GERMAN[0]  # case and "." as written
