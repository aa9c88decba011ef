"""``GET /api/alignment`` and its view (issue #19, item 2): the heads' AER against gold, on the session's
tiny `numbers` runs (the real models, no fakes) with a synthetic gold folder written in tmp_path in the
WPT-2003 format; the real gold set is never read."""

from __future__ import annotations

import pytest

from attnlab.analysis.align import against_gold as R
from attnlab.analysis.align import extract as X
from attnlab.analysis.align import gold as G
from attnlab.translator import Translator
from attnlab.web.routes import alignment as routes
from tests.analysis.align.test_gold import write_gold

# Three pairs as the gold writes them: tokenised words, links `SENTENCE EN FR S|P`, 1-based.
EN = [["twenty", "one"], ["forty", "two"], ["seven"]]
FR = [["vingt", "et", "un"], ["quarante-deux"], ["sept"]]
LINKS = [(1, 1, 1, "S"), (1, 2, 3, "S"), (1, 2, 2, "P"), (2, 1, 1, "S"), (2, 2, 1, "S"), (3, 1, 1, "S")]


@pytest.fixture()
def gold(tmp_path, monkeypatch):
    """The synthetic gold folder, named to the server as `attnlab align` finds it: $ATTNLAB_GOLD_DIR."""
    folder = write_gold(tmp_path / "wpt-gold", EN, FR, LINKS)
    monkeypatch.setenv(G.GOLD_ENV, str(folder))
    return folder


def _library(run, gold, sentences, method="argmax"):
    """What `attnlab align RUN --no-ibm --links METHOD` computes on the first `sentences` gold pairs."""
    tr = Translator.from_run(run)
    return R.run(tr, G.read_gold(gold).first(sentences), ibm=False, ex=X.Extraction(method), top_k=3)


def test_every_head_is_scored_as_attnlab_align_scores_it(client, gold, tiny_runs):
    r = client.get("/api/alignment", params={"run": "transformer", "sentences": 2})
    assert r.status_code == 200, r.text
    d = r.json()
    assert (d["run"], d["gold"], d["sentences"], d["sentences_total"]) == ("transformer", "wpt-gold", 2, 3)
    assert d["attention"] == "cross" and d["links"]["method"] == "argmax" and d["cached"] is False
    assert str(gold.parent) not in r.text  # the server's paths stay on the server
    L, H = d["layers"], d["heads"]
    assert H >= 2 and len(d["scores"]) == 2 * len(X.head_keys(L, H))
    for s in d["scores"]:
        assert all(0 <= s[k] <= 1 for k in ("aer", "precision", "recall")), s
    for shift in ("0", "1"):
        grid = d["grid"][shift]
        assert len(grid) == L and all(len(row) == H + 1 for row in grid)  # each head, then the head average
        assert all(v is not None and 0 <= v <= 1 for row in grid for v in row)
    # the same numbers as the library's (the CLI's) on the same sentences
    lib = {
        (s.layer, s.head, s.shift): s.counts.aer for s in _library(tiny_runs("transformer"), gold, 2).scores
    }
    assert {(s["layer"], s["head"], s["shift"]): s["aer"] for s in d["scores"]} == pytest.approx(
        lib, abs=1e-5
    )
    # the best head is the argmin over every real head at both shifts (ties: the lower shift, layer, head)
    cells = [(g[li][h], int(sh), li, h) for sh, g in d["grid"].items() for li in range(L) for h in range(H)]
    aer, shift, layer, head = min(cells)
    b = d["best_head"]
    assert (b["shift"], b["layer"], b["head"]) == (shift, layer, head) and b["aer"] == pytest.approx(aer)
    assert d["best"][str(shift)]["aer"] == pytest.approx(aer)


def test_a_second_request_is_served_from_the_cache(client, gold, monkeypatch):
    calls = []
    real = routes.align
    monkeypatch.setattr(routes, "align", lambda *a, **k: calls.append(1) or real(*a, **k))
    params = {"run": "bahdanau", "sentences": 3, "links": "grow-diag"}
    first = client.get("/api/alignment", params=params).json()
    second = client.get("/api/alignment", params=params).json()
    assert len(calls) == 1 and first["cached"] is False and second["cached"] is True
    drop = ("cached", "elapsed_ms")
    assert {k: v for k, v in first.items() if k not in drop} == {
        k: v for k, v in second.items() if k not in drop
    }
    assert first["links"]["method"] == "grow-diag" and first["sentences"] == 3
    assert [len(row) for row in first["grid"]["0"]] == [2] and first["grid"]["0"][0][
        1
    ] is None  # one head: no average
    # A gold file that changes is read again.
    write_gold(gold, EN, FR, LINKS[:-1])
    third = client.get("/api/alignment", params=params).json()
    assert len(calls) == 2 and third["cached"] is False


def test_no_gold_folder_is_one_line_naming_the_variables(client, monkeypatch, tmp_path):
    monkeypatch.delenv(G.GOLD_ENV, raising=False)
    monkeypatch.delenv("ATTNLAB_DATA_DIR", raising=False)
    r = client.get("/api/alignment")
    assert r.status_code == 404, r.text
    msg = r.json()["detail"]
    assert isinstance(msg, str) and "\n" not in msg and "Traceback" not in msg
    assert "--gold" in msg and "ATTNLAB_GOLD_DIR" in msg and "ATTNLAB_DATA_DIR" in msg
    monkeypatch.setenv(G.GOLD_ENV, str(tmp_path / "nowhere"))
    r = client.get("/api/alignment")
    assert (
        r.status_code == 404 and "nowhere" in r.json()["detail"] and "is not a folder" in r.json()["detail"]
    )
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "test.en-fr.en").write_text("seven\n", encoding="utf-8")
    monkeypatch.setenv(G.GOLD_ENV, str(tmp_path / "half"))
    r = client.get("/api/alignment")
    assert r.status_code == 404 and "test.en-fr.fr" in r.json()["detail"]


def test_serve_gold_names_the_folder_with_no_variable_set(tiny_runs, tmp_path, monkeypatch, capsys):
    """`attnlab serve --gold DIR` as `attnlab align --gold DIR`: the view works with neither variable set,
    and a wrong folder stops `serve` before it starts, in one line."""
    from fastapi.testclient import TestClient

    from attnlab.cli import main
    from attnlab.web.app import create_app

    monkeypatch.delenv(G.GOLD_ENV, raising=False)
    monkeypatch.delenv("ATTNLAB_DATA_DIR", raising=False)
    folder = write_gold(tmp_path / "my-gold", EN, FR, LINKS)
    app = create_app([f"transformer={tiny_runs('transformer')}"], gold=folder)
    with TestClient(app, base_url="http://127.0.0.1") as c:
        r = c.get("/api/alignment", params={"sentences": 3})
    assert r.status_code == 200, r.text
    assert (r.json()["gold"], r.json()["sentences"]) == ("my-gold", 3) and str(tmp_path) not in r.text
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "test.en-fr.en").write_text("seven\n", encoding="utf-8")
    for bad, says in ((tmp_path / "nowhere", "is not a folder"), (tmp_path / "half", "test.en-fr.fr")):
        assert main(["serve", str(tiny_runs("transformer")), "--gold", str(bad), "--port", "0"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and says in err and err.count("\n") == 1, err


def test_a_model_without_target_to_source_attention_is_refused(gold):
    """The fixed-context seq2seq has nothing to align (an untrained one: only its traits matter)."""
    from fastapi.testclient import TestClient

    from attnlab.data.vocab import Vocab
    from attnlab.models import build_model
    from attnlab.web.app import create_app
    from attnlab.web.payloads import run_facts
    from attnlab.web.registry import LoadedRun
    from tests.conftest import tiny_config

    cfg = tiny_config("seq2seq")
    tok = Vocab.build(EN + FR, "en")
    tr = Translator(build_model(cfg.model, len(tok), len(tok)), tok, tok, cfg)
    with TestClient(
        create_app({"s2s": LoadedRun("s2s", tr, None, run_facts(tr, None))}), base_url="http://127.0.0.1"
    ) as c:
        r = c.get("/api/alignment")
    assert r.status_code == 422, r.text
    (item,) = r.json()["detail"]
    assert item["loc"] == ["query", "run"] and "no attention from target to source" in item["msg"]
    assert "\n" not in item["msg"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"sentences": 0}, "sentences"),
        ({"sentences": routes.MAX_SENTENCES + 1}, "sentences"),
        ({"links": "diagonal"}, "links"),
        ({"run": "nope"}, "run"),
    ],
)
def test_bad_parameters_name_the_field(client, gold, params, field):
    r = client.get("/api/alignment", params=params)
    assert r.status_code == 422, r.text
    (item,) = r.json()["detail"]
    assert item["loc"][-1] == field


def test_the_page_offers_the_view(client):
    page = client.get("/").text
    assert 'id="align-card"' in page and 'id="align-score"' in page and 'id="align-links"' in page
    assert f'<option value="{routes.MAX_SENTENCES}"' in page  # "all" asks for the route's cap
    assert "parliamentary" in page and "Hansards" in page and "Tatoeba" in page  # the domain sentence
    js = client.get("/static/app.js").text
    assert "/api/alignment?" in js and "function showAlignment" in js and "function aerTable" in js
    assert {"/api/alignment", "/api/messages"} <= set(client.get("/openapi.json").json()["paths"])
