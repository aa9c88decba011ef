"""The gold set (notes §25): WPT-2003 files parsed, the gold folder found, the gold's words as a run's pieces.

Every gold file here is synthetic, written in tmp_path in the WPT-2003 format; the real set is never read.
"""

from __future__ import annotations

import pytest

from attnlab.analysis.align import gold as G
from attnlab.data.subword import BPETokenizer
from attnlab.data.text import tokenize
from attnlab.data.vocab import Vocab

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
    g = G.read_gold(folder)
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
    with pytest.raises(G.AlignError, match=match) as e:
        G.read_gold(folder)
    assert "test.en-fr.naacl:2" in str(e.value) and "\n" not in str(e.value)


def test_read_gold_missing_or_unpaired_files(tmp_path):
    folder = write_gold(tmp_path / "g", [["a"], ["b"]], [["x"], ["y"]], [])
    with pytest.raises(G.AlignError, match="trial.en-fr.en is missing"):
        G.read_gold(folder, "trial")
    (folder / "test.en-fr.fr").write_text("x\n", encoding="utf-8")
    with pytest.raises(G.AlignError, match="2 lines but .fr has 1"):
        G.read_gold(folder)
    (folder / "test.en-fr.fr").write_text("x\n\n", encoding="utf-8")  # a blank sentence
    with pytest.raises(G.AlignError, match="line 2 is empty"):
        G.read_gold(folder)
    for side in ("en", "fr"):
        (folder / f"test.en-fr.{side}").write_text("", encoding="utf-8")
    with pytest.raises(G.AlignError, match="it is empty") as e:
        G.read_gold(folder)
    assert "\n" not in str(e.value)


def test_gold_dir_option_then_env_then_data_dir(tmp_path, monkeypatch):
    monkeypatch.delenv(G.GOLD_ENV, raising=False)
    monkeypatch.delenv("ATTNLAB_DATA_DIR", raising=False)
    with pytest.raises(G.AlignError, match="--gold DIR") as e:
        G.gold_dir(None)
    assert "\n" not in str(e.value)
    (tmp_path / G.GOLD_FOLDER).mkdir()
    monkeypatch.setenv("ATTNLAB_DATA_DIR", str(tmp_path))
    assert G.gold_dir(None) == tmp_path / G.GOLD_FOLDER
    monkeypatch.setenv(G.GOLD_ENV, str(tmp_path))
    assert G.gold_dir(None) == tmp_path
    assert G.gold_dir(tmp_path / G.GOLD_FOLDER) == tmp_path / G.GOLD_FOLDER
    with pytest.raises(G.AlignError, match="is not a folder"):
        G.gold_dir(tmp_path / "nope")


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
    out = G.contract_french(gold)
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
    side = G.map_side(tok, words)
    assert side.ids == tok.encode(" ".join(words))  # word by word == the whole sentence
    assert len(side.owner) == len(side.ids) and side.owner == sorted(side.owner)
    assert side.groups == [[i] for i in range(len(words))]
    assert side.owner.count(0) == len(tok.encode("Mr.")) >= 2  # "Mr." → "mr ." : both pieces are word 0


def test_map_side_contracted_french_keeps_gold_indices():
    tok = _tokenizers()[1]
    side = G.map_side(tok, ["de", "le", "droit", "de", "le", "ordre", "."], contract=True)
    assert side.words == ["du", "droit", "de", "l'ordre", "."]
    assert side.groups == [[0, 1], [2], [3], [4, 5], [6]]
    assert side.ids == tok.encode("du droit de l'ordre .")


def test_oov_rates_word_vocabulary():
    word = _tokenizers()[0]
    side = G.map_side(word, ["the", "house", "xylophone", "."])
    r = G.oov_rates(word, [side])
    assert r == {"words": 4, "unk": 0.25, "not_in_vocab": 0.25}
