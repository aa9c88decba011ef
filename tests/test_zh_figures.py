"""Every figure the analyses draw speaks Chinese under ``--lang zh``: each Text artist of each figure (titles,
axis labels, tick labels, legends, colour-bar labels, captions) is checked with tests/zh_lines.py's rule, and
a Chinese figure's text differs from the English one. The CJK font is the one viz/fonts.py falls back to, so
no glyph is missing."""

from __future__ import annotations

import warnings

import pytest

from attnlab import i18n
from tests.cli.test_align import numbers_gold  # noqa: F401  (a fixture: a synthetic gold folder)
from tests.cli.test_zh import VOCAB
from tests.zh_lines import english_lines

pytest.importorskip("matplotlib")
pytestmark = pytest.mark.usefixtures("english_only")  # tests/conftest.py

SENTENCE = "twenty one"


def _texts(fig) -> list[str]:
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_text().strip()]


def _figures(name: str, tiny_runs, gold) -> list:
    """The figures of one analysis, drawn in the current language."""
    from attnlab import maps
    from attnlab.analysis import attribution, heads
    from attnlab.analysis.align import against_gold as align_run
    from attnlab.analysis.align import gold as G
    from attnlab.analysis.diagnose import compare
    from attnlab.analysis.explain import params, positional, sentence
    from attnlab.translator import Translator
    from attnlab.viz.curves import curves_figure

    t, b = tiny_runs("transformer"), tiny_runs("bahdanau")
    tr = lambda run: Translator.from_run(run, which="last")  # noqa: E731
    if name == "params":
        return [params.run(tr(t).model, title="transformer").figure()]
    if name == "positional":
        return [positional.run(dim=16, positions=20).figure()]
    if name == "explain":
        return [sentence.run(tr(b), SENTENCE).figure()]
    if name == "heads":
        report = heads.run(t, sentences=4, importance=False)
        return list(report.figures().values())
    if name == "compare":
        return [compare.run([t, b], bleu_sentences=4).figure()]
    if name == "align":
        return [align_run.run(tr(t), G.read_gold(gold), ibm=False).figure()]
    if name == "attribute":
        return [attribution.run(tr(t), SENTENCE, method=m).figure() for m in ("ixg", "rollout")]
    if name == "attention":
        return [maps.attention_figure(tr(run).attention(SENTENCE), kind)
                for run, kinds in ((t, ("enc_self", "dec_self", "cross")), (b, ("cross",))) for kind in kinds]
    if name == "curves":
        return [curves_figure(t)]
    raise KeyError(name)


FIGURES = ["params", "positional", "explain", "heads", "compare", "align", "attribute", "attention", "curves"]


@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_is_drawn_in_chinese(name, tiny_runs, numbers_gold):  # noqa: F811
    if name == "attribute":
        pytest.importorskip("captum")
    english = [_texts(f) for f in _figures(name, tiny_runs, numbers_gold)]
    i18n.set_language("zh")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*[Gg]lyph.*missing.*")  # a CJK font draws every character
        figures = _figures(name, tiny_runs, numbers_gold)
        chinese = [_texts(f) for f in figures]
        for f in figures:
            f.canvas.draw()  # the glyphs are looked up when the text is drawn
    assert chinese != english
    untranslated = [t for texts in chinese for t in texts for t in english_lines(t, VOCAB)]
    assert untranslated == [], untranslated
