"""Work that ends with its deadline: every route that computes stops at ``deadline_s``, and its admission
slot is free again within seconds of the 504 (it used to stay taken for as long as the work ran: one
attribution request held its slot for about 10 minutes past its 30 s deadline).

The model is the tiny `numbers` Transformer's vocabulary under random weights (it never says <eos>,
so every output runs to its limit), slowed down on purpose: each decoding step and each batch of
its work waits :data:`SLOW_S` seconds, so the work would run for tens of seconds on any processor
and only the deadline can end it that soon.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import httpx
import pytest
import torch

from attnlab import config as C
from attnlab.analysis.align.gold import GOLD_ENV
from attnlab.models import build_model
from attnlab.translator import Translator
from attnlab.web import deadline, payloads
from attnlab.web.app import create_app
from attnlab.web.guards import Limits
from attnlab.web.registry import LoadedRun
from attnlab.web.routes import alignment as alignment_routes
from attnlab.web.routes import attribution as attribution_routes
from tests.analysis.align.test_gold import write_gold

TEXT = ("twenty one " * 30)[:300]  # the longest text the server accepts by default
SLOW_S = 0.5  # each decoding step or batch of the model waits this long
DEADLINE_S = 1.0
FREE_WITHIN_S = 5.0  # the work stops at its next check, at most one slow step after the deadline


def _untrained(run_dir) -> Translator:
    """The run's vocabulary, a 2-layer × 4-head model with random weights: it never says <eos>."""
    from attnlab.data.vocab import load_tokenizer
    from attnlab.runs import read_run

    files = read_run(run_dir)
    cfg = C.apply_overrides(files.config, ["model.num_layers=2", "model.num_heads=4", "decode.max_len_a=1.5",
                                           "decode.max_len_b=10"])
    src, tgt = load_tokenizer(files.tokenizers["src"]), load_tokenizer(files.tokenizers["tgt"])
    torch.manual_seed(0)
    return Translator(build_model(cfg.model, len(src), len(tgt)), src, tgt, cfg, torch.device("cpu"))


@contextlib.contextmanager
def _slowed(model, seconds: float):
    """Every call of the target embedding (once per decoding step, once per batch) waits ``seconds``,
    until the block ends; then the leftover work, if any, runs at full speed."""
    done = threading.Event()

    def wait(_module, _args) -> None:  # a pre-hook that returned a value would replace the input
        done.wait(seconds)

    handle = model.tgt_embedding.register_forward_pre_hook(wait)
    try:
        yield
    finally:
        done.set()
        handle.remove()


@pytest.fixture(scope="module")
def untrained(tiny_runs):
    return _untrained(tiny_runs("transformer"))


def _app(tr, **limits):
    return create_app({"wide": LoadedRun("wide", tr, None, payloads.run_facts(tr, None))}, Limits(**limits))


def _504_then_free(app, method: str, path: str, **request) -> float:
    """Send the request, expect 504, then poll /health until no slot is taken; the seconds that took."""

    async def main() -> float:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=60) as c:
            r = await c.request(method, path, **request)
            assert r.status_code == 504, r.text
            assert "longer than" in r.text and "\n" not in r.json()["detail"]
            t504 = time.monotonic()
            while (await c.get("/health")).json()["busy"]:
                waited = time.monotonic() - t504
                assert waited < FREE_WITHIN_S, f"the slot is still taken {waited:.1f} s after the 504"
                await asyncio.sleep(0.05)
            return time.monotonic() - t504

    return asyncio.run(main())


def test_an_attribution_past_its_deadline_stops_and_frees_its_slot(untrained):
    """The issue's request: 300 characters, integrated gradients, as many steps as allowed."""
    app = _app(untrained, deadline_s=DEADLINE_S, workers=1, max_pending=1)
    body = {"text": TEXT, "method": "ig", "steps": attribution_routes.MAX_STEPS}
    with _slowed(untrained.model, SLOW_S):
        _504_then_free(app, "POST", "/api/attribution", json=body)


@pytest.mark.parametrize(
    "body",
    [
        {"text": TEXT, "method": "ixg"},
        {"text": TEXT, "method": "rollout"},
    ],
    ids=["ixg", "rollout"],
)
def test_every_attribution_method_stops_at_its_deadline(untrained, body):
    app = _app(untrained, deadline_s=DEADLINE_S, workers=1, max_pending=1)
    with _slowed(untrained.model, SLOW_S):
        _504_then_free(app, "POST", "/api/attribution", json=body)


@pytest.mark.parametrize("beam_size", [1, 8])
def test_a_translation_past_its_deadline_stops_between_output_tokens(untrained, beam_size):
    app = _app(untrained, deadline_s=DEADLINE_S, workers=1, max_pending=1, max_beam=8)
    with _slowed(untrained.model, SLOW_S):
        _504_then_free(app, "POST", "/api/translate", json={"text": TEXT, "beam_size": beam_size})


def test_an_alignment_past_its_deadline_stops_between_batches(untrained, tmp_path, monkeypatch):
    n = alignment_routes.MAX_SENTENCES  # batches of 16: tens of slow batches
    en, fr = [["twenty", "one"]] * n, [["vingt", "et", "un"]] * n
    links = [(i + 1, 1, 1, "S") for i in range(n)]
    monkeypatch.setenv(GOLD_ENV, str(write_gold(tmp_path / "gold", en, fr, links)))
    app = _app(untrained, deadline_s=DEADLINE_S, workers=1, max_pending=1)
    with _slowed(untrained.model, SLOW_S):
        _504_then_free(app, "GET", "/api/alignment", params={"sentences": n})


def test_each_thread_reads_its_own_deadline(untrained):
    """Two requests computing on one model at once: the one past its deadline stops, the other goes
    on; outside the server (no deadline) the model is never stopped, and it is watched only once."""
    model = untrained.model
    deadline.watch(model)
    hooks = sum(len(m._forward_pre_hooks) for m in model.modules())
    deadline.watch(model)
    assert sum(len(m._forward_pre_hooks) for m in model.modules()) == hooks
    src, valid = torch.tensor([[5, 6, 3]]), torch.tensor([3])
    outcome = {}

    def late():
        try:
            deadline.run_within(time.monotonic() + 60, lambda: (time.sleep(0.3), model.encode(src, valid)))
            outcome["late"] = "ran"
        except deadline.DeadlinePassed:
            outcome["late"] = "stopped"

    def past():
        try:
            with deadline.within(time.monotonic() + 0.1):
                time.sleep(0.2)
                model.encode(src, valid)
            outcome["past"] = "ran"
        except deadline.DeadlinePassed:
            outcome["past"] = "stopped"

    threads = [threading.Thread(target=late), threading.Thread(target=past)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert outcome == {"late": "ran", "past": "stopped"}
    model.encode(src, valid)  # no deadline in this thread
    with pytest.raises(deadline.DeadlinePassed):
        deadline.run_within(time.monotonic() - 1, pytest.fail, "work past its deadline started")


@pytest.mark.parametrize(("steps", "tokens", "says"), [(64, 16, "fewer steps"), (16, 32, "command line")])
def test_integrated_gradients_attribute_as_many_output_tokens_as_the_steps_allow(untrained, steps, tokens, says):
    """steps × output tokens ≤ MAX_GRADIENT_ROWS and tokens ≤ MAX_GRADIENT_TOKENS: the caps that fit
    the deadline; the answer says where it was cut and the schema says why."""
    from fastapi.testclient import TestClient

    R = attribution_routes
    assert steps <= R.MAX_STEPS and tokens == min(R.MAX_GRADIENT_ROWS // steps, R.MAX_GRADIENT_TOKENS)
    with TestClient(_app(untrained), base_url="http://127.0.0.1") as c:
        d = c.post("/api/attribution", json={"text": TEXT, "method": "ig", "steps": steps}).json()
        assert len(d["rows"]) == tokens and d["steps"] == steps
        (w,) = d["warnings"]
        assert f"first {tokens} output tokens" in w and says in w
        spec = c.get("/openapi.json").json()
    steps_field = spec["components"]["schemas"]["AttributionRequest"]["properties"]["steps"]
    assert steps_field["maximum"] == R.MAX_STEPS
    described = steps_field["description"]
    assert str(R.MAX_GRADIENT_ROWS) in described and str(R.MAX_GRADIENT_TOKENS) in described
