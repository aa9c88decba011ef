"""Alignment against gold (notes §25): AER, gold parsing, words ↔ pieces, argmax and shift-by-one links.

Every gold file here is synthetic, written in tmp_path in the WPT-2003 format; the real set is never read.
"""

from __future__ import annotations

import random
import sys

import pytest
import torch

from attnlab.analysis.align import run as A
from attnlab.data.subword import BPETokenizer
from attnlab.data.text import tokenize
from attnlab.data.vocab import Vocab

# -------------------------------------------------------------------------------------------- AER


def _aer(pred, sure, possible) -> A.AERCounts:
    c = A.AERCounts()
    c.add(set(pred), frozenset(sure), frozenset(possible))
    return c


def test_aer_is_zero_for_any_alignment_between_sure_and_possible():
    sure = {(0, 0), (1, 2)}
    possible = sure | {(1, 1), (2, 2)}
    for pred in (sure, possible, sure | {(2, 2)}):
        c = _aer(pred, sure, possible)
        assert c.aer == pytest.approx(0.0) and c.recall == 1.0 and c.precision == 1.0


def test_aer_small_cases_by_hand():
    # |A|=2, |S|=1, |A∩S|=1, |A∩P|=1 → AER = 1 − 2/3; precision 1/2, recall 1
    c = _aer({(0, 0), (0, 1)}, {(0, 0)}, {(0, 0), (1, 1)})
    assert (c.aer, c.precision, c.recall) == (pytest.approx(1 / 3), 0.5, 1.0)
    # a possible-only hit counts in the numerator once, a sure hit twice
    c = _aer({(1, 1)}, {(0, 0)}, {(0, 0), (1, 1)})
    assert c.aer == pytest.approx(1 - 1 / 2) and c.recall == 0.0
    assert _aer(set(), {(0, 0)}, {(0, 0)}).aer == 1.0  # nothing predicted
    # P given without S: S ⊆ P is enforced, so a sure hit is also a possible hit
    assert _aer({(0, 0)}, {(0, 0)}, set()).aer == pytest.approx(0.0)


def test_aer_sums_over_the_corpus_not_a_mean_of_sentences():
    c = A.AERCounts()
    c.add({(0, 0)}, frozenset({(0, 0)}), frozenset({(0, 0)}))  # perfect, 1 link
    c.add({(0, 1), (1, 0), (2, 2)}, frozenset({(0, 0), (1, 1), (2, 2)}), frozenset())  # 1 of 3
    assert c.aer == pytest.approx(1 - (2 + 2) / (4 + 4))  # not (0 + 2/3) / 2


def test_aer_bounds_on_random_sets():
    rng = random.Random(0)
    cells = [(i, j) for i in range(4) for j in range(4)]
    for _ in range(200):
        sure = set(rng.sample(cells, rng.randint(1, 5)))
        possible = sure | set(rng.sample(cells, rng.randint(0, 5)))
        pred = set(rng.sample(cells, rng.randint(0, 8)))
        c = _aer(pred, sure, possible)
        assert 0.0 <= c.aer <= 1.0
        assert c.aer == pytest.approx(0.0) if sure <= pred <= possible else c.aer > 0


# -------------------------------------------------------------------------------------------- gold files


def write_gold(folder, en, fr, links, split="test"):
    """A gold folder in the WPT-2003 format: links as (sentence, en, fr, label), 1-based."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.en-fr.en").write_text("".join(" ".join(s) + " \n" for s in en), encoding="utf-8")
    (folder / f"{split}.en-fr.fr").write_text("".join(" ".join(s) + " \n" for s in fr), encoding="utf-8")
    (folder / f"{split}.en-fr.naacl").write_text(
        "".join(" ".join(map(str, x)) + "\n" for x in links), encoding="utf-8"
    )
    return folder


def test_read_gold_parses_links_zero_based_with_sure_in_possible(tmp_path):
    folder = write_gold(
        tmp_path / "g",
        [["the", "house"], ["Mr.", "Speaker", "."]],
        [["la", "maison"], ["monsieur", "le", "Orateur", "."]],
        [
            (1, 1, 1, "S"),
            (1, 2, 2, "S"),
            (1, 1, 2, "P"),
            (2, 1, 1, "S"),
            (2, 2, 3, "P"),
            (2, 2, 2, "P"),
            (2, 3, 4),
            (2, 0, 3, "P"),
        ],
    )  # no label = S; 0 = NULL, skipped
    g = A.read_gold(folder)
    assert len(g) == 2 and g.en[1] == ["Mr.", "Speaker", "."] and g.fr[0] == ["la", "maison"]
    assert g.sure[0] == {(0, 0), (1, 1)} and g.possible[0] == {(0, 0), (1, 1), (0, 1)}
    assert g.sure[1] == {(0, 0), (2, 3)} and g.possible[1] == {(0, 0), (1, 2), (1, 1), (2, 3)}
    assert all(s <= p for s, p in zip(g.sure, g.possible))


@pytest.mark.parametrize(
    "line, match",
    [
        ("1 3 1 S", "outside sentence 1"),
        ("1 1 1 X", "SENTENCE EN FR"),
        ("4 1 1 S", "SENTENCE EN FR"),
        ("1 a 1 S", "SENTENCE EN FR"),
    ],
)
def test_read_gold_bad_link_names_file_and_line(tmp_path, line, match):
    folder = write_gold(tmp_path / "g", [["a", "b"]], [["x"]], [(1, 1, 1, "S")])
    (folder / "test.en-fr.naacl").write_text(f"1 1 1 S\n{line}\n", encoding="utf-8")
    with pytest.raises(A.AlignError, match=match) as e:
        A.read_gold(folder)
    assert "test.en-fr.naacl:2" in str(e.value) and "\n" not in str(e.value)


def test_read_gold_missing_or_unpaired_files(tmp_path):
    folder = write_gold(tmp_path / "g", [["a"], ["b"]], [["x"], ["y"]], [])
    with pytest.raises(A.AlignError, match="trial.en-fr.en is missing"):
        A.read_gold(folder, "trial")
    (folder / "test.en-fr.fr").write_text("x\n", encoding="utf-8")
    with pytest.raises(A.AlignError, match="2 lines but .fr has 1"):
        A.read_gold(folder)
    (folder / "test.en-fr.fr").write_text("x\n\n", encoding="utf-8")  # a blank sentence
    with pytest.raises(A.AlignError, match="line 2 is empty"):
        A.read_gold(folder)
    for side in ("en", "fr"):
        (folder / f"test.en-fr.{side}").write_text("", encoding="utf-8")
    with pytest.raises(A.AlignError, match="it is empty") as e:
        A.read_gold(folder)
    assert "\n" not in str(e.value)


def test_gold_dir_option_then_env_then_data_dir(tmp_path, monkeypatch):
    monkeypatch.delenv(A.GOLD_ENV, raising=False)
    monkeypatch.delenv("ATTNLAB_DATA_DIR", raising=False)
    with pytest.raises(A.AlignError, match="--gold DIR") as e:
        A.gold_dir(None)
    assert "\n" not in str(e.value)
    (tmp_path / A.GOLD_FOLDER).mkdir()
    monkeypatch.setenv("ATTNLAB_DATA_DIR", str(tmp_path))
    assert A.gold_dir(None) == tmp_path / A.GOLD_FOLDER
    monkeypatch.setenv(A.GOLD_ENV, str(tmp_path))
    assert A.gold_dir(None) == tmp_path
    assert A.gold_dir(tmp_path / A.GOLD_FOLDER) == tmp_path / A.GOLD_FOLDER
    with pytest.raises(A.AlignError, match="is not a folder"):
        A.gold_dir(tmp_path / "nope")


# ------------------------------------------------------------------------------- words ↔ model tokens


@pytest.mark.parametrize(
    "words, expected",
    [
        ("de le droit de le fournisseur", ["du", "droit", "du", "fournisseur"]),
        ("à le égard de les clients", ["à", "l'égard", "des", "clients"]),  # de le + vowel: d'… no, de l'…
        ("de le égard", ["de", "l'égard"]),
        ("je en ai assez", ["j'en", "ai", "assez"]),
        ("je ne en ai pas", ["je", "n'en", "ai", "pas"]),
        ("monsieur le Orateur", ["monsieur", "l'Orateur"]),
        ("si il vient à les maisons", ["s'il", "vient", "aux", "maisons"]),
        ("la maison", ["la", "maison"]),
    ],
)
def test_contract_french(words, expected):
    gold = words.split()
    out = A.contract_french(gold)
    assert [w for w, _ in out] == expected
    assert [i for _, idx in out for i in idx] == list(range(len(gold)))  # each gold word once, in order


def _tokenizers():
    text = ["mr . speaker , the house is small .", "la maison est petite .", "du droit de l'ordre ."]
    word = Vocab.build([tokenize(t) for t in text], "en")
    bpe = BPETokenizer.train(text * 5, 60, "en")
    return word, bpe


@pytest.mark.parametrize("which", [0, 1])
def test_map_side_equals_encoding_the_sentence_and_groups_pieces(which):
    tok = _tokenizers()[which]
    words = ["Mr.", "Speaker", ",", "the", "housework", "is", "smallish", "."]
    side = A.map_side(tok, words)
    assert side.ids == tok.encode(" ".join(words))  # word by word == the whole sentence
    assert len(side.owner) == len(side.ids) and side.owner == sorted(side.owner)
    assert side.groups == [[i] for i in range(len(words))]
    assert side.owner.count(0) == len(tok.encode("Mr.")) >= 2  # "Mr." → "mr ." : both pieces are word 0


def test_map_side_contracted_french_keeps_gold_indices():
    tok = _tokenizers()[1]
    side = A.map_side(tok, ["de", "le", "droit", "de", "le", "ordre", "."], contract=True)
    assert side.words == ["du", "droit", "de", "l'ordre", "."]
    assert side.groups == [[0, 1], [2], [3], [4, 5], [6]]
    assert side.ids == tok.encode("du droit de l'ordre .")


def test_oov_rates_word_vocabulary():
    word = _tokenizers()[0]
    side = A.map_side(word, ["the", "house", "xylophone", "."])
    r = A.oov_rates(word, [side])
    assert r == {"words": 4, "unk": 0.25, "not_in_vocab": 0.25}


# ---------------------------------------------------------------------------------- attention → links


def _side(pieces_per_word):
    owner = [g for g, n in enumerate(pieces_per_word) for _ in range(n)]
    return A.Side(list(range(4, 4 + len(owner))), owner, [[g] for g in range(len(pieces_per_word))])


def test_stack_heads_order_matches_head_keys():
    maps = torch.rand(2, 3, 4, 5)  # (L, H, Q, K)
    st, keys = A.stack_heads(maps), A.head_keys(2, 3)
    assert st.shape == (len(keys), 4, 5) == (2 * 3 + 2 + 1, 4, 5)
    assert torch.equal(st[keys.index((1, 2))], maps[1, 2])
    assert torch.allclose(st[keys.index((0, None))], maps[0].mean(0))
    assert torch.allclose(st[keys.index((None, None))], maps.mean((0, 1)))
    assert A.head_keys(1, 1) == [(0, 0)] and A.stack_heads(maps[:1, :1]).shape == (1, 4, 5)


def test_argmax_links_at_shift_zero_and_one():
    src, tgt = _side([1, 1, 1]), _side([1, 1])
    maps = torch.zeros(1, 3, 4)  # (N, Q = 2 targets + 1, K = 3 sources + <eos>)
    maps[0, 0, 2] = maps[0, 1, 0] = maps[0, 2, 1] = 1.0  # query q attends to source (2, 0, 1)[q]
    maps[0, 2, 3] = 5.0  # the <eos> key is never a link, however heavy
    links0 = A.argmax_links(A.word_attention(maps, src, tgt, 0), src, tgt)[0]
    links1 = A.argmax_links(A.word_attention(maps, src, tgt, 1), src, tgt)[0]
    assert links0 == {(2, 0), (0, 1)}  # target k read at the step predicting it (query k)
    assert links1 == {(0, 0), (1, 1)}  # target k read at the step reading it (query k + 1)
    with pytest.raises(ValueError, match="queries"):
        A.word_attention(maps[:, :2], src, tgt, 1)


def test_word_attention_sums_source_pieces_and_averages_target_pieces():
    src, tgt = _side([2, 1]), _side([2])  # source word 0 has 2 pieces; the target word has 2 pieces
    maps = torch.zeros(1, 3, 4)
    maps[0, 0] = torch.tensor([0.3, 0.3, 0.4, 0.0])  # piece-wise argmax is source piece 2 (word 1)…
    maps[0, 1] = torch.tensor([0.3, 0.3, 0.4, 0.0])
    w = A.word_attention(maps, src, tgt, 0)
    assert torch.allclose(w[0], torch.tensor([[0.6, 0.4]]))  # …but word 0 holds 0.6 of the weight
    assert A.argmax_links(w, src, tgt)[0] == {(0, 0)}
    maps[0, 1] = torch.tensor([0.0, 0.0, 1.0, 0.0])  # the second piece looks at word 1: mean 0.3 vs 0.7
    assert A.argmax_links(A.word_attention(maps, src, tgt, 0), src, tgt)[0] == {(1, 0)}


def test_joined_words_link_every_gold_word_and_empty_words_none():
    src = A.Side([5, 6], [0, 2], [[0], [1], [2]])  # source word 1 has no pieces (preprocessed away)
    tgt = A.Side([7, 8], [0, 0], [[0, 1], [2]])  # target "du" = gold words 0 and 1; gold word 2 empty
    maps = torch.zeros(1, 3, 3)
    maps[0, :, 1] = 1.0
    assert A.argmax_links(A.word_attention(maps, src, tgt, 0), src, tgt)[0] == {(2, 0), (2, 1)}


# ----------------------------------------------------------------------------------------- IBM Model 2


def test_ibm2_learns_a_tiny_bitext():
    pytest.importorskip("nltk")
    en = [["the", "house"], ["the", "book"], ["a", "book"], ["a", "house"], ["the", "small", "house"]]
    fr = [["la", "maison"], ["le", "livre"], ["un", "livre"], ["une", "maison"], ["la", "petite", "maison"]]
    links = A.ibm2_links(en, fr, iterations=5)
    assert len(links) == len(en)
    assert (1, 1) in links[0] and (1, 1) in links[1] and (2, 2) in links[4]  # house↔maison, book↔livre
    # the extra pairs train the model but are not returned
    assert len(A.ibm2_links(en[:2], fr[:2], extra=list(zip(en[2:], fr[2:])))) == 2


def test_tatoeba_words_spread_over_the_corpus(tmp_path):
    fra = tmp_path / "fra.txt"
    fra.write_text("".join(f"Go {i}.\tVa {i} !\tCC-BY 2.0\n" for i in range(10)), encoding="utf-8")
    assert A.tatoeba_words(3, fra) == [
        (["go", "0", "."], ["va", "0", "!"]),
        (["go", "3", "."], ["va", "3", "!"]),
        (["go", "6", "."], ["va", "6", "!"]),
    ]
    assert A.tatoeba_words(0, tmp_path / "not-read") == []


def test_missing_nltk_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "nltk.translate", None)  # `from nltk.translate import …` → ImportError
    with pytest.raises(A.AlignError, match=r"attnlab\[align\]") as e:
        A.require_nltk()
    assert "\n" not in str(e.value)
