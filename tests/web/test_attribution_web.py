"""``POST /api/attribution`` and its view, on the session's tiny `numbers` runs (the real model, no fakes)."""

from __future__ import annotations

import pytest

from attnlab.web.routes.attribution import MAX_STEPS

SENTENCE = "twenty one"


def test_integrated_gradients_beside_the_attention(client):
    r = client.post("/api/attribution", json={"text": SENTENCE, "run": "bahdanau", "method": "ig", "steps": 16})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["run"] == "bahdanau" and d["method"] == "ig" and d["steps"] == 16
    assert d["cols"] == ["twenty", "one", "<eos>"]
    T, S = len(d["rows"]), len(d["cols"])
    assert len(d["scores"]) == T and all(len(row) == S for row in d["scores"] + d["shares"])
    for total, fx, f0 in zip(d["total"], d["logprob"], d["baseline_logprob"]):
        assert total == pytest.approx(fx - f0, rel=0.01, abs=1e-3)  # completeness, after 4-decimal rounding
    assert 0 <= d["completeness_gap"] <= 0.01
    (c,) = d["compare"]
    assert c["title"] == "additive attention (Bahdanau)" and len(c["rho"]) == T
    assert all(sum(row) == pytest.approx(1.0, abs=1e-3) for row in c["weights"])
    # The attention is the one the translate route shows for the same sentence.
    t = client.post("/api/translate", json={"text": SENTENCE, "run": "bahdanau", "kind": "cross", "layer": 0, "head": 0})
    assert t.json()["tgt_tokens"] == d["rows"]
    shown = t.json()["attention"]["cross"]["weights"][0][0]  # (T, S): layer 1, head 1 (Bahdanau's one map)
    assert [w for row in c["weights"] for w in row] == pytest.approx([w for row in shown for w in row], abs=2e-4)


def test_rollout_of_the_default_transformer(client):
    r = client.post("/api/attribution", json={"text": SENTENCE, "method": "rollout"})
    assert r.status_code == 200, r.text
    (m,) = r.json()["maps"]
    assert m["kind"] == "enc_self" and m["labels"] == ["twenty", "one", "<eos>"]
    assert all(sum(row) == pytest.approx(1.0, abs=1e-3) for row in m["rollout"])


@pytest.mark.parametrize(
    ("body", "field", "needle"),
    [
        ({"text": SENTENCE, "run": "bahdanau", "method": "rollout"}, "method", "no stack of self-attention"),
        ({"text": SENTENCE, "method": "saliency"}, "method", ""),
        ({"text": SENTENCE, "steps": MAX_STEPS + 1}, "steps", ""),
        ({"text": SENTENCE, "run": "nope"}, "run", "unknown run"),
        ({"text": "   "}, "text", "empty"),
    ],
)
def test_refusals_name_the_field(client, body, field, needle):
    r = client.post("/api/attribution", json=body)
    assert r.status_code == 422, r.text
    (item,) = r.json()["detail"]
    assert item["loc"][-1] == field and needle in item["msg"]


def test_the_page_offers_the_view(client):
    page = client.get("/").text
    assert 'id="attribution-card"' in page and 'id="attr-method"' in page
    js = client.get("/static/app.js").text
    assert '"/api/attribution"' in js and "function showAttribution" in js


def test_an_attribution_does_not_change_a_translation_computed_beside_it(tiny_runs):
    """The server runs two requests on one model at once: integrated gradients put their own source
    embeddings in place of the embedding table's output, and only for their own thread. Here the
    attribution is held in the middle of a pass while the translation runs in another thread."""
    import threading

    import torch

    from attnlab.analysis import attribution
    from attnlab.translator import Translator

    tr = Translator.from_run(tiny_runs("transformer"))
    alone = tr.translate(SENTENCE)
    inside, go = threading.Event(), threading.Event()
    attributing = threading.get_ident

    def hold(_module, _args) -> None:  # in the attribution's gradient passes only: wait inside one
        if threading.get_ident() == worker_id[0] and torch.is_grad_enabled() and not inside.is_set():
            inside.set()
            go.wait(10)

    worker_id = [None]
    errors = []

    def attribute():
        worker_id[0] = attributing()
        try:
            attribution.run(tr, SENTENCE, "ig", steps=4)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    handle = tr.model.output.register_forward_pre_hook(hold)
    worker = threading.Thread(target=attribute)
    try:
        worker.start()
        assert inside.wait(10)
        beside = tr.translate(SENTENCE)
    finally:
        go.set()
        worker.join(10)
        handle.remove()
    assert beside == alone and not errors
