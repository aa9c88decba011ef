"""Alignment Error Rate (Och & Ney 2003; notes §25): hand-worked cases and bounds on random link sets."""

from __future__ import annotations

import random

import pytest

from attnlab.analysis.align.aer import AERCounts

# -------------------------------------------------------------------------------------------- AER


def _aer(pred, sure, possible) -> AERCounts:
    c = AERCounts()
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
    c = AERCounts()
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
