"""`align.run`, the one entry point: it answers through the Report protocol (format, figure, to_json).

A tiny `numbers` run (the session's, trained once) against a synthetic gold folder in tmp_path.
"""

from __future__ import annotations

import json
import math

import pytest
from matplotlib.figure import Figure

from attnlab.analysis.align import against_gold as R
from attnlab.analysis.align import gold as G
from attnlab.analysis.report import Report
from attnlab.data import corpus
from attnlab.data.text import tokenize
from attnlab.translator import Translator
from tests.analysis.align.test_gold import write_gold


@pytest.fixture()
def numbers_gold(tmp_path):
    """Four numbers pairs, each word i linked to word i (sure)."""
    pairs = corpus.numbers_pairs(40, seed=3)[:4]
    en, fr = [tokenize(e) for e, _ in pairs], [tokenize(f) for _, f in pairs]
    links = [(s, i, i, "S") for s, (e, f) in enumerate(zip(en, fr), 1) for i in range(1, min(len(e), len(f)) + 1)]
    return G.read_gold(write_gold(tmp_path / "gold", en, fr, links))


def test_run_returns_a_report_whose_three_methods_work(tiny_runs, numbers_gold):
    tr = Translator.from_run(tiny_runs("transformer"))
    report = R.run(tr, numbers_gold, ibm=False, saliency=True, top_k=2)
    assert isinstance(report, Report)
    text = report.format()
    assert "best head:" in text and "gradient saliency" in text and "fast_align en→fr 16.4 %" in text
    assert report.format("zh") and str(report) == text
    fig = report.figure()
    assert isinstance(fig, Figure) and len(fig.axes) == 3  # the two shifts' panels and the colour bar
    data = json.loads(json.dumps(report.to_json()))
    assert data["scores"] == [s.to_json() for s in report.scores] and data["sentences"] == len(numbers_gold)
    assert data["best_head"] == report.best().to_json() and "top_k" in data and "saliency" in data
    for shift in (0, 1):  # the figure's grid, NaN as null
        want = [[None if math.isnan(v) else pytest.approx(v, abs=1e-5) for v in row]
                for row in report.grid(shift).tolist()]
        assert data["grid"][str(shift)] == want


@pytest.mark.parametrize("kind", ["transformer", "bahdanau"])
def test_against_gold_the_verdicts_map_is_scored_by_aer(tiny_runs, numbers_gold, kind):
    """With a gold set the verdict's measure is AER, of the one map every verdict reads (the last layer's heads
    averaged; Bahdanau's one map): the score `align` already computed for it, printed and in the JSON."""
    tr = Translator.from_run(tiny_runs(kind))
    report = R.run(tr, numbers_gold, ibm=False)
    L, H = report.shape
    v = report.verdict_score()
    assert (v.layer, v.head, v.shift) == (L - 1, None if H > 1 else 0, 0)
    assert v in report.scores and report.to_json()["verdict_map"] == v.to_json()
    assert f"the map every alignment verdict reads ({v.name}, shift 0)" in report.format()
