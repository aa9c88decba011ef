"""Link extraction from attention (notes §25): maps → words, argmax at shift 0 and 1, NULL column, threshold,
symmetrisation; IBM Model 2 and its NULL.

Hand-made maps and random link sets only; the real gold set is never read.
"""

from __future__ import annotations

import random
import sys

import pytest
import torch

from attnlab.analysis.align import extract as X
from attnlab.analysis.align import ibm as I
from attnlab.cli.align import A_METHODS


def _side(pieces_per_word):
    owner = [g for g, n in enumerate(pieces_per_word) for _ in range(n)]
    return X.Side(list(range(4, 4 + len(owner))), owner, [[g] for g in range(len(pieces_per_word))])


def test_cli_choices_are_the_library_methods():
    assert A_METHODS == X.METHODS


def test_word_matrix_keeps_each_row_a_distribution_with_the_null_column():
    src, tgt = _side([2, 1, 3]), _side([1, 2, 1])
    maps = torch.softmax(torch.randn(5, 4 + 1, 6 + 1), -1)  # (N, Q = 4 target pieces + 1, K = 6 + <eos>)
    for shift in (0, 1):
        w = X.word_matrix(maps, src, tgt, shift)
        assert w.shape == (5, 3, 3 + 1)
        assert torch.allclose(w.sum(-1), torch.ones(5, 3), atol=1e-5)
        assert torch.equal(X.word_attention(maps, src, tgt, shift), w[:, :, :-1])
    with pytest.raises(ValueError, match="keys"):
        X.word_matrix(maps[:, :, :6], src, tgt)


def _words(rows):
    return torch.tensor(rows, dtype=torch.float)[None]  # (1, Gt, Gs + 1)


def test_threshold_and_null_drop_weak_and_null_rows():
    src, tgt = _side([1, 1]), _side([1, 1, 1])
    w = _words([[0.9, 0.1, 0.0], [0.3, 0.2, 0.5], [0.15, 0.1, 0.75]])  # last column: <eos>
    assert X.extract_links(w, src, tgt)[0] == {(0, 0), (0, 1), (0, 2)}
    assert X.extract_links(w, src, tgt, X.Extraction(threshold=0.2))[0] == {(0, 0), (0, 1)}
    assert X.extract_links(w, src, tgt, X.Extraction(null=True))[0] == {(0, 0)}


def test_two_way_reading_of_one_map():
    src, tgt = _side([1, 1]), _side([1, 1])
    w = _words([[0.6, 0.4, 0.0], [0.55, 0.45, 0.0]])  # both rows pick source 0; column 1's best is row 1
    t2s, s2t = X.directional_links(w, src, tgt, X.Extraction())[0]
    assert t2s == {(0, 0), (0, 1)} and s2t == {(0, 0), (1, 1)}
    get = lambda m: X.extract_links(w, src, tgt, X.Extraction(m))[0]
    assert get("intersect") == {(0, 0)} and get("union") == {(0, 0), (0, 1), (1, 1)}
    # (0, 1) and (1, 1) both touch (0, 0) and both reach the free target 1: grow-diag keeps both
    assert get("grow-diag") == get("union") and get("argmax") == t2s


def test_grow_diag_by_hand():
    fwd = {(0, 0), (1, 1), (3, 2)}
    bwd = {(0, 0), (1, 2), (3, 3)}
    # start (0,0); (1,1) is its diagonal neighbour with both ends free; (1,2) neighbours (1,1) and
    # b=2 is free; (3,2)/(3,3) touch nothing chosen, so only -final-and adds one of them
    assert X.symmetrise(fwd, bwd, "grow-diag") == {(0, 0), (1, 1), (1, 2)}
    gdfa = X.symmetrise(fwd, bwd, "grow-diag-final-and")
    assert gdfa == {(0, 0), (1, 1), (1, 2), (3, 3)}  # (3,2): b=2 is taken; (3,3): both free
    assert X.symmetrise(fwd, bwd, "argmax") == fwd


def test_symmetrise_lies_between_intersection_and_union():
    rng = random.Random(1)
    cells = [(a, b) for a in range(5) for b in range(5)]
    for _ in range(300):
        fwd, bwd = set(rng.sample(cells, rng.randint(0, 7))), set(rng.sample(cells, rng.randint(0, 7)))
        inter, union = fwd & bwd, fwd | bwd
        gd, gdfa = X.symmetrise(fwd, bwd, "grow-diag"), X.symmetrise(fwd, bwd, "grow-diag-final-and")
        assert inter <= gd <= gdfa <= union
        assert X.symmetrise(fwd, bwd, "intersect") == inter and X.symmetrise(fwd, bwd, "union") == union
        assert X.symmetrise(fwd, fwd, "grow-diag-final-and") == fwd  # one-way links agree: nothing to grow


def test_extraction_rejects_bad_options():
    with pytest.raises(ValueError, match="grow-diag"):
        X.Extraction("diagonal")
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        X.Extraction(threshold=1.0)
    assert X.Extraction("grow-diag", 0.2, True).label == "grow-diag, ≥0.2, NULL"


def test_ibm2_null_and_symmetrised_baseline():
    pytest.importorskip("nltk")
    en = [["the", "house"], ["the", "book"], ["a", "book"], ["a", "house"], ["the", "small", "house"]]
    fr = [["la", "maison"], ["le", "livre"], ["un", "livre"], ["une", "maison"], ["la", "petite", "maison"]]
    no_null = I.ibm2_links(en, fr, iterations=5, null=False)
    assert [sorted({t for _, t in x}) for x in no_null] == [list(range(len(f))) for f in fr]  # all linked
    with_null = I.ibm2_links(en, fr, iterations=5)
    assert all(len(a) <= len(b) for a, b in zip(with_null, no_null))
    one = I.ibm_baseline(en, fr, method="argmax")
    assert one["links"] == with_null and one["method"] == "argmax"
    back = [{(e, f) for f, e in x} for x in I.ibm2_links(fr, en, iterations=5)]
    sym = I.ibm_baseline(en, fr)["links"]
    for s, a, b in zip(sym, with_null, back):
        assert a & b <= s <= a | b
    assert (1, 1) in sym[0] and (2, 2) in sym[4]  # house↔maison survives symmetrisation


# ---------------------------------------------------------------------------------- attention → links


def test_stack_heads_order_matches_head_keys():
    maps = torch.rand(2, 3, 4, 5)  # (L, H, Q, K)
    st, keys = X.stack_heads(maps), X.head_keys(2, 3)
    assert st.shape == (len(keys), 4, 5) == (2 * 3 + 2 + 1, 4, 5)
    assert torch.equal(st[keys.index((1, 2))], maps[1, 2])
    assert torch.allclose(st[keys.index((0, None))], maps[0].mean(0))
    assert torch.allclose(st[keys.index((None, None))], maps.mean((0, 1)))
    assert X.head_keys(1, 1) == [(0, 0)] and X.stack_heads(maps[:1, :1]).shape == (1, 4, 5)


def test_argmax_links_at_shift_zero_and_one():
    src, tgt = _side([1, 1, 1]), _side([1, 1])
    maps = torch.zeros(1, 3, 4)  # (N, Q = 2 targets + 1, K = 3 sources + <eos>)
    maps[0, 0, 2] = maps[0, 1, 0] = maps[0, 2, 1] = 1.0  # query q attends to source (2, 0, 1)[q]
    maps[0, 2, 3] = 5.0  # the <eos> key is never a link, however heavy
    links0 = X.argmax_links(X.word_attention(maps, src, tgt, 0), src, tgt)[0]
    links1 = X.argmax_links(X.word_attention(maps, src, tgt, 1), src, tgt)[0]
    assert links0 == {(2, 0), (0, 1)}  # target k read at the step predicting it (query k)
    assert links1 == {(0, 0), (1, 1)}  # target k read at the step reading it (query k + 1)
    with pytest.raises(ValueError, match="queries"):
        X.word_attention(maps[:, :2], src, tgt, 1)


def test_word_attention_sums_source_pieces_and_averages_target_pieces():
    src, tgt = _side([2, 1]), _side([2])  # source word 0 has 2 pieces; the target word has 2 pieces
    maps = torch.zeros(1, 3, 4)
    maps[0, 0] = torch.tensor([0.3, 0.3, 0.4, 0.0])  # piece-wise argmax is source piece 2 (word 1)…
    maps[0, 1] = torch.tensor([0.3, 0.3, 0.4, 0.0])
    w = X.word_attention(maps, src, tgt, 0)
    assert torch.allclose(w[0], torch.tensor([[0.6, 0.4]]))  # …but word 0 holds 0.6 of the weight
    assert X.argmax_links(w, src, tgt)[0] == {(0, 0)}
    maps[0, 1] = torch.tensor([0.0, 0.0, 1.0, 0.0])  # the second piece looks at word 1: mean 0.3 vs 0.7
    assert X.argmax_links(X.word_attention(maps, src, tgt, 0), src, tgt)[0] == {(1, 0)}


def test_joined_words_link_every_gold_word_and_empty_words_none():
    src = X.Side([5, 6], [0, 2], [[0], [1], [2]])  # source word 1 has no pieces (preprocessed away)
    tgt = X.Side([7, 8], [0, 0], [[0, 1], [2]])  # target "du" = gold words 0 and 1; gold word 2 empty
    maps = torch.zeros(1, 3, 3)
    maps[0, :, 1] = 1.0
    assert X.argmax_links(X.word_attention(maps, src, tgt, 0), src, tgt)[0] == {(2, 0), (2, 1)}


# ----------------------------------------------------------------------------------------- IBM Model 2


def test_ibm2_learns_a_tiny_bitext():
    pytest.importorskip("nltk")
    en = [["the", "house"], ["the", "book"], ["a", "book"], ["a", "house"], ["the", "small", "house"]]
    fr = [["la", "maison"], ["le", "livre"], ["un", "livre"], ["une", "maison"], ["la", "petite", "maison"]]
    links = I.ibm2_links(en, fr, iterations=5)
    assert len(links) == len(en)
    assert (1, 1) in links[0] and (1, 1) in links[1] and (2, 2) in links[4]  # house↔maison, book↔livre
    # the extra pairs train the model but are not returned
    assert len(I.ibm2_links(en[:2], fr[:2], extra=list(zip(en[2:], fr[2:])))) == 2


def test_tatoeba_words_spread_over_the_corpus(tmp_path):
    fra = tmp_path / "fra.txt"
    fra.write_text("".join(f"Go {i}.\tVa {i} !\tCC-BY 2.0\n" for i in range(10)), encoding="utf-8")
    assert I.tatoeba_words(3, fra) == [
        (["go", "0", "."], ["va", "0", "!"]),
        (["go", "3", "."], ["va", "3", "!"]),
        (["go", "6", "."], ["va", "6", "!"]),
    ]
    assert I.tatoeba_words(0, tmp_path / "not-read") == []


def test_missing_nltk_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "nltk.translate", None)  # `from nltk.translate import …` → ImportError
    with pytest.raises(X.AlignError, match=r"pip install -e '\.\[align\]'") as e:
        I.require_nltk()
    assert "\n" not in str(e.value)
