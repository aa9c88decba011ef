"""Both directions (`align --reverse`): one-way links of two runs symmetrised as IBM Model 2's are."""

from __future__ import annotations

import pytest

from attnlab.analysis.align.aer import AERCounts
from attnlab.analysis.align.extract import head_keys, symmetrise
from attnlab.analysis.align.gold import GoldSet
from attnlab.analysis.align.symmetrise import BothWays, OneWay, map_name, score_pairs


def _gold(sure, possible=None) -> GoldSet:
    n = len(sure)
    return GoldSet("g", "test", [["w"] * 4] * n, [["m"] * 4] * n, [frozenset(s) for s in sure],
                   [frozenset(p) for p in (possible or sure)])


def test_every_pair_is_the_two_one_way_link_sets_symmetrised_and_scored():
    keys = head_keys(1, 2)  # L1H1, L1H2, L1 avg
    fwd = OneWay("f", "en→fr", keys, [[{(0, 0), (1, 1)}, {(0, 1), (1, 1)}, {(0, 0), (1, 2)}]])
    rev = OneWay("r", "fr→en", keys, [[{(0, 0), (1, 2)}, {(0, 0), (1, 1)}, {(2, 2)}]])
    gold = _gold([{(0, 0), (1, 1)}], [{(0, 0), (1, 1), (1, 2)}])
    for method in ("intersect", "union", "grow-diag", "grow-diag-final-and"):
        scored = score_pairs(fwd, rev, gold, method)
        assert [(p.forward, p.reverse) for p in scored] == [(a, b) for a in range(3) for b in range(3)]
        for p in scored:
            want = AERCounts()
            want.add(symmetrise(fwd.links[0][p.forward], rev.links[0][p.reverse], method), gold.sure[0], gold.possible[0])
            assert p.counts == want
    both = BothWays(fwd, rev, "intersect", score_pairs(fwd, rev, gold, "intersect"))
    # L1H1 × L1H2 agree on (0,0) and (1,1): the gold exactly, AER 0, and a pair of single heads
    assert both.name(both.best()) == "L1H1 × L1H2" and both.best().counts.aer == 0.0
    assert {(p.forward, p.reverse) for p in both.heads_only()} == {(a, b) for a in range(2) for b in range(2)}
    assert (both.averages().forward, both.averages().reverse) == (2, 2)
    js = both.to_json()
    assert js["best_head_pair"]["forward"] == {"layer": 0, "head": 0} and js["best_head_pair"]["aer"] == 0.0
    assert len(js["pairs"]) == 9 and js["average_of_all"]["forward"] == {"layer": 0, "head": None}


def test_a_pair_of_runs_read_over_different_sentences_is_refused():
    keys = head_keys(1, 1)
    with pytest.raises(ValueError, match="same gold sentences"):
        score_pairs(OneWay("f", "en→fr", keys, [[set()]]), OneWay("r", "fr→en", keys, [[set()], [set()]]),
                    _gold([set()]), "union")


def test_map_names():
    assert [map_name(k) for k in head_keys(2, 2)] == ["L1H1", "L1H2", "L2H1", "L2H2", "L1 avg", "L2 avg", "avg"]
