"""The HTTP API on real tiny runs: shapes and labels of the maps, runs, probes, pages."""

from __future__ import annotations

import json
import shutil

import pytest

from attnlab.translator import Translator


def test_health_and_runs(client, tiny_runs):
    h = client.get("/health")
    assert h.status_code == 200 and h.json()["status"] == "ok"
    runs = client.get("/api/runs").json()
    assert runs["default"] == "transformer"
    by_name = {r["name"]: r for r in runs["runs"]}
    assert set(by_name) == {"transformer", "bahdanau"}
    t = by_name["transformer"]
    assert t["model_kind"] == "transformer" and t["kinds"] == ["enc_self", "dec_self", "cross"]
    tr = Translator.from_run(tiny_runs("transformer"))
    assert t["parameters"] == sum(p.numel() for p in tr.model.parameters())
    assert (t["num_layers"], t["num_heads"]) == (tr.cfg.model.num_layers, tr.cfg.model.num_heads)
    assert by_name["bahdanau"]["kinds"] == ["cross"] and by_name["bahdanau"]["num_heads"] == 1
    assert runs["limits"]["max_chars"] >= 1


@pytest.mark.parametrize("text", ["twenty one", "three hundred and four", "i'm home ."])
def test_transformer_maps_match_tokens(client, tiny_runs, text):
    r = client.post("/api/translate", json={"text": text, "beam_size": 1})
    assert r.status_code == 200, r.text
    d = r.json()
    tr = Translator.from_run(tiny_runs("transformer"))
    # Same answer as the one Translator the CLI uses (greedy).
    assert d["translation"] == tr.translate_full([text])[0][0].text
    assert d["src_tokens"] == tr.src_tok.tokens(text) + ["<eos>"]
    assert d["run"] == "transformer" and d["model_kind"] == "transformer"
    att = d["attention"]
    assert set(att) == {"enc_self", "dec_self", "cross"}
    L, H = tr.cfg.model.num_layers, tr.cfg.model.num_heads
    expect = {
        "enc_self": (d["src_tokens"], d["src_tokens"]),
        "dec_self": (d["tgt_inputs"], d["tgt_inputs"]),
        "cross": (d["tgt_inputs"], d["src_tokens"]),
    }
    for kind, (queries, keys) in expect.items():
        a = att[kind]
        assert (a["queries"], a["keys"]) == (queries, keys), kind
        assert (a["layers"], a["heads"]) == (L, H)
        w = a["weights"]
        assert len(w) == L and all(len(layer) == H for layer in w)
        for layer in w:
            for head in layer:
                assert len(head) == len(queries) and all(len(row) == len(keys) for row in head)
                for row in head:  # every query has at least its own/<eos> key: rows are distributions
                    assert sum(row) == pytest.approx(1.0, abs=2e-3)
    # One cross row per generated token, ending with <eos> when decoding finished.
    assert len(att["cross"]["outputs"]) == len(d["tgt_tokens"]) == len(d["tgt_inputs"])
    # The decoder's self-attention is causal (notes §24): nothing above the diagonal.
    for head in att["dec_self"]["weights"][0]:
        for i, row in enumerate(head):
            assert all(v == 0 for v in row[i + 1 :])


def test_bahdanau_has_one_cross_map(client, tiny_runs):
    d = client.post("/api/translate", json={"text": "twenty one", "run": "bahdanau"}).json()
    assert d["model_kind"] == "bahdanau" and set(d["attention"]) == {"cross"}
    a = d["attention"]["cross"]
    assert (a["layers"], a["heads"]) == (1, 1)
    assert len(a["weights"][0][0]) == len(d["tgt_tokens"]) and len(a["weights"][0][0][0]) == len(
        d["src_tokens"]
    )
    tr = Translator.from_run(tiny_runs("bahdanau"))
    assert d["translation"] == tr.translate_full(["twenty one"])[0][0].text


def test_beam_search_result_matches_translator(client, tiny_runs):
    d = client.post("/api/translate", json={"text": "forty two", "beam_size": 3}).json()
    tr = Translator.from_run(tiny_runs("transformer"))
    assert d["beam_size"] == 3 and d["translation"] == tr.translate_full(["forty two"], beam_size=3)[0][0].text


def test_unknown_words_are_named(client):
    d = client.post("/api/translate", json={"text": "twenty zebra 😀 你好 שלום"}).json()
    assert d["unknown_words"] == ["zebra", "😀", "你好", "שלום"]
    assert d["src_tokens"][1] == "<unk>"


def test_probes_timeline(client, tiny_runs):
    d = client.get("/api/probes", params={"run": "transformer"}).json()
    assert d["run"] == "transformer"
    recorded = {}
    for line in (tiny_runs("transformer") / "probes.jsonl").read_text().splitlines():
        rec = json.loads(line)
        recorded.setdefault(rec["sentence"], set()).add(rec["step"])
    assert {s["sentence"]: {r["step"] for r in s["steps"]} for s in d["sentences"]} == recorded
    for s in d["sentences"]:
        steps = [r["step"] for r in s["steps"]]
        assert steps == sorted(steps)
        for r in s["steps"]:
            cross = r["attention"]["cross"]  # (layers, T_out, S): heads averaged during training
            assert len(cross[0]) == len(r["tgt_tokens"]) and len(cross[0][0]) == len(r["src_tokens"])


def test_probes_skip_torn_lines_and_scores_are_read(tiny_runs, tmp_path):
    from fastapi.testclient import TestClient

    from attnlab.web.app import create_app

    run = tmp_path / "copy"
    shutil.copytree(tiny_runs("bahdanau"), run)
    with open(run / "probes.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 99, "sentence": "go .", "attent')  # a crash mid-write
    from attnlab.evaluation.evaluate import checkpoint_identity
    from attnlab.runs import resolve_checkpoint

    scored = checkpoint_identity(resolve_checkpoint(run, "best"))  # the one the server loads
    (run / "eval-test.json").write_text(
        json.dumps({"bleu": 12.5, "chrf": 40.0, "sentences": 7, "checkpoint": scored})
    )
    with TestClient(create_app([run]), base_url="http://127.0.0.1") as c:
        runs = c.get("/api/runs").json()["runs"]
        assert runs[0]["name"] == "copy" and runs[0]["test"]["bleu"] == 12.5
        d = c.get("/api/probes", params={"run": "copy"}).json()
        assert all(99 not in [r["step"] for r in s["steps"]] for s in d["sentences"])
        assert d["sentences"]


def test_pages_and_docs_are_served_offline(client):
    page = client.get("/")
    assert page.status_code == 200 and 'id="heatmap"' in page.text and 'id="sentence"' in page.text
    assert "http://" not in page.text and "https://" not in page.text  # nothing from a CDN
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for asset in ("/static/app.js", "/static/style.css", "/static/docs.js"):
        r = client.get(asset)
        assert r.status_code == 200 and "https://" not in r.text
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    assert {"/api/translate", "/api/runs", "/api/probes", "/health"} <= set(spec["paths"])
    body = spec["components"]["schemas"]["TranslateRequest"]["properties"]
    assert body["text"]["maxLength"] == 300 and body["beam_size"]["maximum"] == 8


@pytest.mark.parametrize(
    "path",
    [
        "/static/../server.py",
        "/static/%2e%2e/server.py",
        "/static/..%2fserver.py",
        "/../../etc/passwd",
        "/static//etc/passwd",
    ],
)
def test_no_path_leaves_the_static_folder(client, path):
    r = client.get(path)
    assert r.status_code == 404 and "Limits" not in r.text and "root:" not in r.text
