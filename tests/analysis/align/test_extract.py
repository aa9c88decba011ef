"""Link extraction from attention (notes §25): NULL column, threshold, symmetrisation, IBM Model 2's NULL.

Hand-made maps and random link sets only; the real gold set is never read.
"""

from __future__ import annotations

import random

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
