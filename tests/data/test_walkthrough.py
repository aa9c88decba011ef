"""The notes' §4 walk-through (attnlab.data.walkthrough) on a word vocabulary and on BPE, and
`attnlab data --run RUN`, which must show the run's own ids and num_steps."""

from __future__ import annotations

import re

import pytest

from attnlab import cli
from attnlab.data.specials import EOS, PAD, SPECIALS
from attnlab.data.subword import BPETokenizer
from attnlab.data.vocab import Vocab
from attnlab.data.walkthrough import TEXT, format_walkthrough, walk_through, word_pieces

SENTENCES = ["i'm home .", "he's calm .", "i lost .", "go .", "i'm calm .", "he's home .", "unbelievable !"]


def word_vocab() -> Vocab:
    return Vocab.build([s.split() for s in SENTENCES], "en")


def test_ids_are_the_tokenizers_padded_to_num_steps():
    vocab = word_vocab()
    w = walk_through(vocab, "I'm home.", num_steps=7)
    assert w.ids == vocab.encode("i'm home .") + [EOS] + [PAD] * 3
    assert w.tokens == [vocab.id_to_token(i) for i in w.ids] and w.valid_len == 4 and not w.truncated
    text = format_walkthrough(w, run="runs/x")
    assert "data.num_steps=7" in text and "the run runs/x" in text and "<pad> ×2" in text
    assert f"ids          : {w.ids}" in text
    # "ids are not magnitudes" names two tokens shown, with the ids shown
    big, big_id, small, small_id = re.search(r"  (\S+) has a larger id \((\d+)\) than (\S+) \((\d+)\)", text).groups()
    assert {big: int(big_id), small: int(small_id)} == {"i'm": vocab["i'm"], "home": vocab["home"]}
    assert int(big_id) > int(small_id)


def test_the_id_row_and_the_ids_line_have_different_labels_in_chinese():
    """The table's id row (one id under each token) and the whole padded sequence are two things: in Chinese
    too they get two labels, lined up with the other rows by terminal cells."""
    from attnlab.i18n import speaking, width

    with speaking("zh"):
        lines = format_walkthrough(walk_through(word_vocab(), "I'm home.", num_steps=7)).splitlines()
    labels = [line.split(":")[0] for line in lines if ":" in line and line.startswith("  ")]
    row_label = next(lab for lab in labels if lab.strip() == "编号")
    ids_label = next(lab for lab in labels if lab.strip() == "编号序列")
    assert width(row_label) == width(ids_label) and labels.count(row_label) == 1


def test_truncation_keeps_num_steps_minus_one_and_unknown_words_are_unk():
    vocab = word_vocab()
    w = walk_through(vocab, "i'm home . go . zebra", num_steps=4)
    assert w.ids == vocab.encode("i'm home .") + [EOS] and w.truncated and w.total == 6
    text = format_walkthrough(walk_through(vocab, "zebra home", 8))
    assert "<unk> = 0: 1 token(s)" in text and TEXT["source_fresh"] in text
    one = format_walkthrough(walk_through(vocab, "go", 3))  # one word: the magnitude line compares it with <eos>
    assert f"go has a larger id ({vocab['go']}) than <eos> ({EOS})" in one
    with pytest.raises(ValueError):
        walk_through(vocab, "go", 1)


def test_bpe_walkthrough_explains_the_word_start_marker():
    tok = BPETokenizer.train(SENTENCES * 5, vocab_size=40, lang="en")
    w = walk_through(tok, "i'm unbelievable .", num_steps=24)
    assert w.ids[: w.valid_len] == tok.encode("i'm unbelievable .") + [EOS]
    groups = word_pieces(w.tokens)
    assert ["".join(g).lstrip("▁") for g in groups] == ["i'm", "unbelievable", "."]
    assert all(g[0].startswith("▁") for g in groups) and any(len(g) > 1 for g in groups)
    text = format_walkthrough(w)
    assert "▁ marks the start of a word" in text and " + ".join(groups[1]) in text
    assert "BPE subword" in text and SPECIALS[PAD] in text


def test_data_run_uses_the_runs_vocabulary_and_num_steps(tiny_runs, capsys):
    from attnlab.translator import Translator

    run = tiny_runs("transformer")
    tr = Translator.from_run(run, which="last", device="cpu")
    assert cli.main(["data", "--run", str(run), "--sentence", "twenty one"]) == 0
    out = capsys.readouterr().out
    n = tr.cfg.data.num_steps
    expected = tr.src_tok.encode("twenty one") + [EOS]
    assert f"ids          : {expected + [PAD] * (n - len(expected))}" in out
    assert f"data.num_steps={n}" in out and f"(num_steps={n}, <eos> included)" in out  # walk-through and stats agree
    assert "meta.json when the run was trained" in out
    assert cli.main(["data", "--run", str(run), "--dataset", "numbers"]) == 2
    assert "do not apply with --run" in capsys.readouterr().err


@pytest.mark.parametrize("rule,lang,sentence,says,never", [
    ("moses", "de", "Ich bin zu Hause.", "Moses' tokenizer for de, case kept", "lower case"),
    ("chars", "ja", "私は家にいます。", "each character of a script written without spaces", "lower case"),
    ("d2l", "en", "I'm home.", "lower case", "Moses"),
])
def test_the_word_line_says_what_the_runs_text_rule_does(rule, lang, sentence, says, never):
    from attnlab.data.languages import text_rules

    words = text_rules(rule, lang).preprocess(sentence)
    vocab = Vocab.build([words.split()], lang, text=rule)
    text = format_walkthrough(walk_through(vocab, sentence, num_steps=16))
    assert says in text and never not in text, text
    if rule == "moses":
        assert "preprocessed : Ich bin zu Hause ." in text  # the case it keeps is the case shown
