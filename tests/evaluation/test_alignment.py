"""Has attention formed? The one alignment verdict (evaluation/alignment.py) against hand-built maps."""

from __future__ import annotations

import pytest
import torch

from attnlab.evaluation.alignment import (
    AlignmentCheck,
    check_alignment,
    check_probe,
    example_sentence,
    expected_words,
    verdict_map,
)

SRC = ["i'm", "home", ".", "<eos>"]
OUT = ["je", "suis", "chez", "moi", ".", "<eos>"]


def _map(looks_at: list[int], S: int = 4, peak: float = 0.7) -> torch.Tensor:
    """A (T, S) map whose row t puts ``peak`` on column ``looks_at[t]`` and spreads the rest evenly."""
    w = torch.full((len(looks_at), S), (1 - peak) / (S - 1))
    w[torch.arange(len(looks_at)), torch.tensor(looks_at)] = peak
    return w


def test_a_map_that_aligns_as_the_notes_table_has_formed():
    check = check_alignment("i'm home .", SRC, OUT, _map([0, 0, 1, 1, 2, 3]))
    assert check.formed is True and (check.agree, check.judged) == (6, 6) and check.missing == ()
    assert [r.looks_at for r in check.rows] == ["i'm", "i'm", "home", "home", ".", "<eos>"]
    assert check.rows[4].judged and check.rows[5].judged  # the whole table: . → . and <eos> → <eos> too
    assert "has formed: 6 of 6" in check.summary()
    assert "(je, suis → i'm; chez, moi → home; . → .; <eos> → <eos>)" in check.summary()


def test_je_on_the_full_stop_has_not_formed_and_says_which_word():
    check = check_alignment("i'm home .", SRC, OUT, _map([2, 0, 1, 1, 2, 3]))
    assert check.formed is False and (check.agree, check.judged) == (5, 6)
    assert check.wrong == "je → ." and "has not formed: 5 of 6" in check.summary() and "je → ." in check.summary()


def test_a_map_that_sits_on_eos_has_not_formed_however_sharp():
    check = check_alignment("i'm home .", SRC, OUT, _map([3] * 6, peak=0.97))
    assert check.formed is False and check.agree == 1  # only <eos> → <eos> is right


def test_the_full_stop_and_eos_rows_are_judged_too():
    # the native demo's Transformer: every word right, but . → home and <eos> → . : not formed
    check = check_alignment("i'm home .", SRC, OUT, _map([0, 0, 1, 1, 1, 2]))
    assert check.formed is False and (check.agree, check.judged) == (4, 6)
    assert check.wrong == ". → home, <eos> → ." and "has not formed" in check.summary()


def test_a_translation_without_a_row_of_the_table_cannot_be_judged_never_formed():
    # `je suis.`: both its words look at i'm, but chez and moi are not there to be judged
    out = ["je", "suis", ".", "<eos>"]
    check = check_alignment("i'm home .", SRC, out, _map([0, 0, 2, 3]))
    assert check.formed is None and check.missing == ("chez", "moi") and (check.agree, check.judged) == (4, 4)
    assert check.summary().startswith("can't judge: the translation has no chez/moi")
    # a row that is there and wrong is evidence enough: not formed, and the missing rows are named
    bad = check_alignment("i'm home .", SRC, out, _map([0, 3, 2, 3]))
    assert bad.formed is False and bad.summary().endswith("suis → <eos>; the translation has no chez/moi")
    # no <eos> (the output stopped at max_len): its row is missing too
    assert check_alignment("i'm home .", SRC, OUT[:5], _map([0, 0, 1, 1, 2])).missing == ("<eos>",)


def test_the_other_accepted_translation_is_held_against_its_own_rows():
    out = ["je", "suis", "à", "la", "maison", ".", "<eos>"]
    check = check_alignment("i'm home .", SRC, out, _map([0, 0, 1, 1, 1, 2, 3]))
    assert check.formed is True and check.judged == 7 and check.missing == ()
    assert "à, la, maison → home" in check.summary()
    assert expected_words("i'm home .")["chez"] == ("home",)  # no output: the notes' own translation
    assert "maison" in expected_words("i'm home .", output=["je", "suis", "à", "la", "maison"])


def test_bpe_pieces_are_joined_into_words_before_the_argmax():
    src = ["▁i'm", "▁ho", "me", "▁.", "<eos>"]  # "home" in two pieces: its weight is their sum
    out = ["▁je", "▁su", "is", "▁chez", "▁mo", "i", "▁.", "<eos>"]
    w = torch.tensor([
        [0.60, 0.10, 0.10, 0.10, 0.10],  # je → i'm
        [0.30, 0.20, 0.00, 0.25, 0.25],  # su ┐ suis: mean of the two rows → i'm 0.40
        [0.50, 0.20, 0.00, 0.15, 0.15],  # is ┘
        [0.36, 0.32, 0.32, 0.00, 0.00],  # chez: i'm 0.36 alone, but home = 0.32 + 0.32 = 0.64
        [0.10, 0.45, 0.45, 0.00, 0.00],  # mo ┐ moi → home
        [0.10, 0.45, 0.45, 0.00, 0.00],  # i  ┘
        [0.00, 0.00, 0.00, 1.00, 0.00],
        [0.00, 0.00, 0.00, 0.00, 1.00],
    ])
    check = check_alignment("i'm home .", src, out, w)
    assert [r.output for r in check.rows] == ["je", "suis", "chez", "moi", ".", "<eos>"]
    assert [r.looks_at for r in check.rows][:4] == ["i'm", "i'm", "home", "home"]
    assert check.rows[2].weight == pytest.approx(0.64) and check.formed is True  # weights kept to 4 decimals
    # the displayed labels (maps.display_tokens: "·" marks a continuing piece) are joined the same way
    shown = check_alignment("i'm home .", ["i'm", "ho", "·me", ".", "<eos>"],
                            ["je", "su", "·is", "chez", "mo", "·i", ".", "<eos>"], w)
    assert shown.rows == check.rows


def test_a_french_to_english_run_reads_the_table_the_other_way():
    assert expected_words("je suis chez moi .", reverse=True) == {"i'm": ("je", "suis"), "home": ("chez", "moi"),
                                                                  ".": (".",), "<eos>": ("<eos>",)}
    assert expected_words("je suis à la maison.", reverse=True)["home"] == ("à", "la", "maison")
    assert expected_words("je suis perdu .", reverse=True) == {}  # not the notes' example: no table
    src, out = ["je", "suis", "chez", "moi", ".", "<eos>"], ["i'm", "home", ".", "<eos>"]
    w = _map([1, 3, 4, 5], S=6)  # i'm → suis, home → moi
    check = check_alignment("je suis chez moi .", src, out, w, reverse=True)
    assert check.formed is True and check.judged == 4 and "i'm → je/suis; home → chez/moi" in check.summary()
    assert check_alignment("je suis chez moi .", src, out, _map([1, 5, 4, 5], S=6), reverse=True).formed is False
    from attnlab.config import DataConfig
    from attnlab.data.pairs import pair_of

    assert example_sentence(pair_of(DataConfig(direction="fr-en"))) == "je suis chez moi ."
    assert example_sentence(pair_of(DataConfig())) == example_sentence() == "i'm home ."


def test_no_judged_row_is_no_verdict():
    check = check_alignment("i lost .", ["i", "lost", ".", "<eos>"], ["j'ai", "perdu", ".", "<eos>"], torch.eye(4))
    assert check.formed is None and check.judged == 0 and "no verdict" in check.summary()
    wrong = check_alignment("i'm home .", SRC, ["il", "est", "<eos>"], _map([0, 1, 3]))  # none of the table's words
    assert wrong.formed is None


def test_the_verdict_reads_the_last_layer_heads_averaged_and_pads_never_win():
    aligned, on_eos = _map([0, 0, 1, 1, 2, 3]), _map([3] * 6)
    w = torch.stack([torch.stack([on_eos, on_eos]), torch.stack([aligned, aligned])])  # (L=2, H=2, T, S)
    assert torch.equal(verdict_map(w), aligned)  # the first layer's map is not read
    assert check_alignment("i'm home .", SRC, OUT, w).formed is True
    assert torch.equal(verdict_map(w.mean(dim=1)), aligned)  # (L, T, S): heads already averaged, as probes store
    padded = torch.cat([aligned, torch.zeros(6, 2)], dim=-1)  # two masked <pad> keys: exactly 0
    assert check_alignment("i'm home .", [*SRC, "<pad>", "<pad>"], OUT, padded).rows == \
        check_alignment("i'm home .", SRC, OUT, aligned).rows
    with pytest.raises(ValueError):
        verdict_map(torch.zeros(4))


def test_a_probe_record_gets_the_same_verdict_and_round_trips_through_json():
    w = _map([0, 0, 1, 1, 2, 3])
    direct = check_alignment("i'm home .", SRC, OUT, w)
    rec = {"step": 5, "sentence": "i'm home .", "src_tokens": SRC, "tgt_tokens": OUT,
           "attention": {"cross": [w.tolist()]}}  # (layers, T_out, keys), heads averaged
    assert check_probe(rec) == direct
    assert AlignmentCheck.from_json(direct.to_json()) == direct
    stored = {**rec, "alignment": check_alignment("i'm home .", SRC, OUT, _map([3] * 6)).to_json()}
    assert check_probe(stored).formed is False  # the verdict training recorded on the unrounded map wins
    assert check_probe({**rec, "attention": {}}) is None
    # a verdict recorded before the whole table was judged (no table_rows) is not trusted: the map is read again
    old = {k: v for k, v in check_alignment("i'm home .", SRC, OUT, _map([3] * 6)).to_json().items()
           if k != "table_rows"}
    assert check_probe({**rec, "alignment": old}) == direct
