"""A run of a space-separated language of your own uses the metaspace rule, whose tokens carry ``▁`` (``▁I``);
every front end shows them by :func:`attnlab.maps.display_tokens`, one label per token (the figures' axes,
``explain``'s and ``attribute``'s text, the web page's ``token_labels`` for translations, probes and attributions).
"""

from __future__ import annotations

import pytest

from attnlab.maps import WORD_START, display_tokens, map_labels, marks_word_starts
from tests.cli.test_any_pair_surface import _corpus
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow  # a 20-step training with one validation (about 7 s)

SENTENCE = "I like tea."


@pytest.fixture(scope="module")
def metaspace_run(tmp_path_factory):
    """A tiny English→German run (the metaspace rule on both sides), validated once so it records probes."""
    from attnlab.training.loop import train

    root = tmp_path_factory.mktemp("metaspace")
    tsv = _corpus(root / "en-de.tsv", "en", "de")
    cfg = tiny_config("transformer", "data.dataset=file", f"data.data_path={tsv}", "data.src_lang=en",
                      "data.tgt_lang=de", "data.min_freq=1", "data.num_steps=12", "train.max_steps=20",
                      "train.eval_every=20", f"train.probe_sentences=[{SENTENCE!r}]")
    train(cfg, root / "run", progress=False)
    return root / "run"


@pytest.fixture(scope="module")
def tr(metaspace_run):
    from attnlab.translator import Translator

    return Translator.from_run(metaspace_run)


def _no_mark(labels) -> None:
    assert labels and not [x for x in labels if WORD_START in x], labels


def test_the_run_is_metaspace_and_its_tokens_carry_the_mark(tr):
    assert tr.src_tok.text == tr.tgt_tok.text == "metaspace"
    assert marks_word_starts(tr.src_tok) and marks_word_starts(tr.tgt_tok)
    assert "▁I" in tr.src_tok.tokens(SENTENCE)


def test_figure_labels_have_no_mark_and_match_the_maps(tr):
    res = tr.attention(SENTENCE)
    assert any(t.startswith(WORD_START) for t in res.src_tokens)  # the raw tokens keep their mark
    for kind, w in res.attention.items():
        rows, cols = map_labels(res, kind)
        _no_mark(rows + cols)
        assert (len(rows), len(cols)) == tuple(w.shape[-2:]), kind  # one label per row and per column


def test_explain_and_attribute_text_have_no_mark(tr):
    from attnlab.analysis import attribution
    from attnlab.analysis.explain.sentence import run as explain

    report = explain(tr, SENTENCE, reference="Ich mag Tee.")
    text = report.format()
    assert "like" in text and WORD_START not in text
    _no_mark([s.chosen for s in report.steps] + [tok for s in report.steps for tok, _ in s.top])
    attr = attribution.run(tr, SENTENCE, "ixg")
    assert WORD_START not in attr.format()
    assert display_tokens(attr.cols) == display_tokens(tr.attention(SENTENCE).src_tokens)[: len(attr.cols)]


def test_web_labels_have_no_mark_and_cover_every_token(metaspace_run):
    pytest.importorskip("fastapi", reason="the web extra is not installed")
    from fastapi.testclient import TestClient

    from attnlab.web.app import create_app

    with TestClient(create_app([f"en-de={metaspace_run}"]), base_url="http://127.0.0.1") as c:
        d = c.post("/api/translate", json={"text": SENTENCE}).json()
        probes = c.get("/api/probes", params={"run": "en-de"}).json()
        attr = c.post("/api/attribution", json={"text": SENTENCE, "method": "ixg"}).json()
    for body, tokens in (
        (d, d["src_tokens"] + d["tgt_tokens"]),
        (probes, [t for s in probes["sentences"] for r in s["steps"] for t in r["src_tokens"] + r["tgt_tokens"]]),
        (attr, attr["rows"] + attr["cols"]),
    ):
        shown = [body["token_labels"].get(t, t) for t in tokens]  # what app.js's labels() draws
        _no_mark(shown)
        assert len(shown) == len(tokens)
    att = d["attention"]["cross"]
    assert len(att["keys"]) == att["shape"][-1] and len(att["queries"]) == att["shape"][-2]
