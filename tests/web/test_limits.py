"""Concurrency limit, deadline and a free event loop, with a stand-in translator whose speed we control."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
import torch

from attnlab import config as C
from attnlab.errors import AttnlabError
from attnlab.translator import AttentionResult
from attnlab.web.app import create_app
from attnlab.web.guards import Limits
from attnlab.web.registry import LoadedRun


class GatedTranslator:
    """Answers `attention` only once `gate` is set (or after `delay` seconds)."""

    def __init__(self, delay: float | None = None) -> None:
        self.gate, self.delay, self.started = threading.Event(), delay, 0
        self._lock = threading.Lock()
        self.cfg = C.preset("bahdanau")  # a Translator's config: the route reads its direction

    def attention(
        self, sentence: str, beam_size: int = 1, max_len: int | None = None, extra_pad: int = 0
    ) -> AttentionResult:  # Translator.attention's signature
        with self._lock:
            self.started += 1
        if self.delay is not None:
            time.sleep(self.delay)
        else:
            assert self.gate.wait(10), "test never opened the gate"
        w = torch.full((1, 1, 2, 2), 0.5)
        return AttentionResult(
            sentence, "bonjour", ["go", "<eos>"], ["bonjour", "<eos>"], ["<bos>", "bonjour"], {"cross": w}
        )

    def attention_full(self, sentence: str, beam_size: int | None = 1, nbest: int = 1, max_len: int | None = None,
                       extra_pad: int = 0, decode=None) -> tuple[AttentionResult, list]:  # Translator's signature
        return self.attention(sentence, beam_size or 1, max_len, extra_pad), []


def _app(tr, **limits):
    run = LoadedRun("fake", tr, None, {"model_kind": "bahdanau", "kinds": ["cross"]})
    return create_app({"fake": run}, Limits(**limits))


def _client(app):
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


def test_excess_requests_get_429_fast_and_health_stays_fast():
    tr = GatedTranslator()
    app = _app(tr, workers=1, max_pending=2)

    async def main():
        async with _client(app) as c:
            slow = [asyncio.create_task(c.post("/api/translate", json={"text": "go ."})) for _ in range(2)]
            while tr.started < 1:  # the first is running, the second waits in the pool
                await asyncio.sleep(0.01)
            t0 = time.perf_counter()
            extra = await c.post("/api/translate", json={"text": "go ."})
            assert extra.status_code == 429 and extra.headers["retry-after"] == "1"
            assert "busy" in extra.json()["detail"]
            h = await c.get("/health")
            assert h.status_code == 200 and h.json()["busy"] == 2
            assert time.perf_counter() - t0 < 1.0  # neither waited for the model
            tr.gate.set()
            done = await asyncio.gather(*slow)
            assert [r.status_code for r in done] == [200, 200]
            assert done[0].json()["translation"] == "bonjour"
            assert (await c.get("/health")).json()["busy"] == 0

    asyncio.run(main())


def test_deadline_gives_504_and_frees_the_slot_when_the_work_ends():
    tr = GatedTranslator(delay=0.6)
    app = _app(tr, workers=1, max_pending=1, deadline_s=0.2)

    async def main():
        async with _client(app) as c:
            t0 = time.perf_counter()
            r = await c.post("/api/translate", json={"text": "go ."})
            assert r.status_code == 504 and "longer than 0.2 s" in r.json()["detail"]
            assert time.perf_counter() - t0 < 0.5
            # The thread still computes: its slot stays taken, so new work is refused, not piled up.
            assert (await c.post("/api/translate", json={"text": "go ."})).status_code == 429
            await asyncio.sleep(0.7)
            assert (await c.get("/health")).json()["busy"] == 0

    asyncio.run(main())


def test_queued_work_past_its_deadline_is_cancelled():
    tr = GatedTranslator()
    app = _app(tr, workers=1, max_pending=3, deadline_s=0.3)

    async def main():
        async with _client(app) as c:
            first = asyncio.create_task(c.post("/api/translate", json={"text": "go ."}))
            while tr.started < 1:
                await asyncio.sleep(0.01)
            queued = await c.post("/api/translate", json={"text": "go ."})  # never starts: cancelled
            assert queued.status_code == 504
            assert (await c.get("/health")).json()["busy"] == 1  # only the running one holds a slot
            tr.gate.set()
            assert (await first).status_code == 504  # it was past its deadline too
            await asyncio.sleep(0.1)
            assert tr.started == 1

    asyncio.run(main())


def test_limits_are_validated():
    with pytest.raises(AttnlabError, match="max_pending"):
        Limits(workers=4, max_pending=2)
    with pytest.raises(AttnlabError, match="deadline_s"):
        Limits(deadline_s=0)
    with pytest.raises(AttnlabError, match="no run"):
        create_app({})


def test_small_limits_reach_the_schema():
    app = _app(GatedTranslator(delay=0), max_chars=10, max_beam=2)

    async def main():
        async with _client(app) as c:
            r = await c.post("/api/translate", json={"text": "a" * 11})
            assert r.status_code == 422 and "at most 10" in r.json()["detail"][0]["msg"]
            r = await c.post("/api/translate", json={"text": "go", "beam_size": 3})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "beam_size"]

    asyncio.run(main())
