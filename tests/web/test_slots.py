"""Issue 40, serving: idle and unread connections cannot starve the server; deadlines cannot be turned off; HEAD.

Each test here failed on the code before web/slots.py: 64 sockets that sent nothing put /health at 503,
a response nobody read held its connection for good, `--deadline inf` was accepted and `HEAD /` was 405.
Clients of the live tests bind their own loopback addresses (127.0.0.2, .3) so that "per client" means
what it means for remote clients; where the system has no such addresses (not Linux), they skip.
"""

from __future__ import annotations

import contextlib
import math
import select
import socket
import statistics
import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from attnlab.cli import main
from attnlab.errors import AttnlabError
from attnlab.web import serving, slots
from attnlab.web.app import create_app
from attnlab.web.guards import Limits
from attnlab.web.registry import LoadedRun
from tests.web.test_hardening import _closed_within, _Gated

IDLE, DEAF, ME = "127.0.0.2", "127.0.0.3", "127.0.0.1"  # the idle flood, the clients that never read, a real client
APP_JS = (b"GET /static/app.js HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept-Encoding: identity\r\n\r\n")


def _fast() -> _Gated:
    tr = _Gated()
    tr.gate.set()  # answers at once
    return tr


def _app(limits: Limits, tr=None):
    return create_app({"fake": LoadedRun("fake", tr or _fast(), None, {"model_kind": "bahdanau", "kinds": ["cross"]})},
                      limits)


@contextlib.contextmanager
def _serving(app, limits, sndbuf: int | None = None):
    """``attnlab serve``'s uvicorn settings on a free 127.0.0.1 port, in a thread; yields (port, server).

    ``sndbuf``: the send buffer of every accepted socket (Linux copies the listener's), fixed and
    small, so that a few unread answers fill it as one large answer fills the default, self-tuned one."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if sndbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(serving.uvicorn_config(app, "127.0.0.1", port, limits, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            time.sleep(0.025)
        assert server.started, "the server did not start within 5 s"
        yield port, server
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _connect(port: int, source: str, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # a client that reads nothing fills up fast
    s.bind((source, 0))
    s.settimeout(3)
    s.connect(("127.0.0.1", port))
    return s


@pytest.fixture(scope="module")
def sources():
    """Skip where 127.0.0.2 and .3 are not this machine's (they are on Linux)."""
    for addr in (IDLE, DEAF):
        try:
            with socket.socket() as s:
                s.bind((addr, 0))
        except OSError:
            pytest.skip(f"{addr} is not a loopback address here")


def _held(server) -> dict[str | None, int]:
    """Admitted connections per client address: open and not closing. A refused one is closing while its 503
    is flushed (the tests give the server a small send buffer, so that can take a moment): not a slot held.
    Nor is one this thread sees between its arrival in the set and the server's decision on it."""
    counts: dict[str | None, int] = {}
    for c in list(server.server_state.connections):
        t = getattr(c, "transport", None)
        if getattr(c, "admitted", False) and not slots.gone(c) and t is not None and not t.is_closing():
            counts[slots.client_key(c)] = counts.get(slots.client_key(c), 0) + 1
    return counts


def _client(port: int) -> httpx.Client:
    """A client that opens a new connection for every request, as a poller that keeps none would."""
    return httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=2,
                        limits=httpx.Limits(max_keepalive_connections=0))


def _timed_get(port: int, path: str = "/health", client: httpx.Client | None = None) -> tuple[int, float]:
    with contextlib.ExitStack() as stack:
        c = client or stack.enter_context(_client(port))
        t0 = time.perf_counter()
        try:
            return c.get(path).status_code, time.perf_counter() - t0
        except httpx.HTTPError:
            return 0, time.perf_counter() - t0


# ------------------------------------------------------------------------------------ deadlines stay on


@pytest.mark.parametrize("name", ["deadline_s", "header_timeout_s", "body_timeout_s", "send_timeout_s", "keep_alive_s"])
@pytest.mark.parametrize("value", [math.inf, math.nan, 0.0, -1.0])
def test_limits_refuse_seconds_that_are_not_finite_and_positive(name, value):
    with pytest.raises(AttnlabError, match=f"{name}=.*finite number of seconds > 0"):
        Limits(**{name: value})


@pytest.mark.parametrize("option", ["--deadline", "--read-timeout", "--send-timeout"])
@pytest.mark.parametrize("value", ["inf", "nan", "0", "-5"])
def test_serve_refuses_a_deadline_that_is_off(tmp_path, capsys, option, value):
    with pytest.raises(SystemExit) as e:
        main(["serve", str(tmp_path / "nope"), "--port", "0", option, value])
    assert e.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith(f"error: attnlab serve: argument {option}: {value} seconds: a deadline must be a "
                              "finite number > 0"), err


def test_max_connections_keeps_a_slot_for_health():
    with pytest.raises(AttnlabError, match="max_connections=1 must be >= 2"):
        Limits(max_connections=1)
    assert slots.health_reserve(2) == 1 and slots.health_reserve(64) == 8


# ------------------------------------------------------------------------------------------------ HEAD


def test_head_answers_like_get_without_a_body():
    with TestClient(_app(Limits()), base_url="http://127.0.0.1") as c:
        for path in ("/", "/health", "/static/app.js"):
            get, head = c.get(path), c.head(path)
            assert head.status_code == get.status_code == 200, (path, head.status_code)
            assert head.content == b"" and head.headers["content-type"] == get.headers["content-type"]
            assert head.headers.get("content-length") == get.headers.get("content-length")
        assert c.head("/api/translate").status_code == 405  # as its GET: the route is POST only


def test_head_on_a_live_server():
    limits = Limits()
    with _serving(_app(limits), limits) as (port, _):
        r = httpx.head(f"http://127.0.0.1:{port}/", timeout=3)
    assert r.status_code == 200 and r.content == b"" and int(r.headers["content-length"]) > 1000


# ---------------------------------------------------------------------------------------- slots, one at a time


def test_an_idle_connection_gives_way_to_a_new_one(sources):
    limits = Limits(max_connections=4, header_timeout_s=5)
    with _serving(_app(limits), limits) as (port, server), contextlib.ExitStack() as stack:
        idle = [stack.enter_context(_connect(port, IDLE)) for _ in range(4)]  # the server is full
        time.sleep(0.2)
        assert _held(server) == {IDLE: 4}
        assert _timed_get(port)[0] == 200
        closed, got = _closed_within(idle[0], 1.0)  # the longest idle gave way, silently
        assert closed and got == b""
        assert _timed_get(port, "/api/runs")[0] == 200


def test_a_client_past_its_connection_limit_gets_503_at_once(sources):
    limits = Limits(max_client_connections=3, header_timeout_s=5)
    with _serving(_app(limits), limits) as (port, server), contextlib.ExitStack() as stack:
        for _ in range(3):
            stack.enter_context(_connect(port, IDLE))
        t0 = time.monotonic()
        extra = stack.enter_context(_connect(port, IDLE))
        closed, got = _closed_within(extra, 2.0)
        assert closed and time.monotonic() - t0 < 1.0
        assert got.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in got and b"3 connections" in got
        assert _held(server).get(IDLE) == 3
        assert _timed_get(port)[0] == 200  # another address is not this one


def test_requests_past_the_reserve_get_503_and_health_does_not():
    """max_connections 2 keeps one for /health: a second request that computes gets 503, not a wait."""
    tr = _Gated()
    limits = Limits(max_connections=2, header_timeout_s=5)
    with _serving(_app(limits, tr), limits) as (port, _):
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as c1:
            pending = threading.Thread(target=c1.post, args=("/api/translate",), kwargs={"json": {"text": "go ."}})
            pending.start()
            try:
                assert tr.started.wait(5)
                r = httpx.post(f"http://127.0.0.1:{port}/api/translate", json={"text": "go ."}, timeout=5)
                assert r.status_code == 503 and r.headers["retry-after"] == "1" and "busy" in r.json()["detail"]
                assert _timed_get(port)[0] == 200
            finally:
                tr.gate.set()
                pending.join(5)


def test_a_response_nobody_reads_is_dropped_after_the_send_timeout(sources):
    limits = Limits(send_timeout_s=0.3, keep_alive_s=30)
    with _serving(_app(limits), limits, sndbuf=16_384) as (port, server):
        with _connect(port, DEAF, rcvbuf=4096) as deaf:
            deaf.sendall(APP_JS * 8)  # eight 42 KB answers into a 4 KB window, never read
            time.sleep(0.2)
            assert _held(server).get(DEAF) == 1
            for _ in range(40):
                if DEAF not in _held(server):
                    break
                time.sleep(0.05)
            assert DEAF not in _held(server), "the connection that reads nothing still holds its slot"


# ----------------------------------------------------------------------------------------------- the flood


class _Flood(threading.Thread):
    """Keep ``n`` sockets from ``source`` open, reopening each one the server closes (at most
    ``max_opens`` in all): ``deaf`` ones send ``request`` and never read, the others send nothing."""

    def __init__(self, port, source, n, deaf=False, max_opens=400):
        super().__init__(daemon=True)
        self.port, self.source, self.n, self.deaf, self.max_opens = port, source, n, deaf, max_opens
        self.stop, self.opens, self.refused, self.socks = threading.Event(), 0, 0, []

    def _open(self):
        self.opens += 1
        s = _connect(self.port, self.source, rcvbuf=4096 if self.deaf else None)
        if self.deaf:
            s.sendall(APP_JS * 8)
        return s

    def run(self):
        live: list[socket.socket] = []
        try:
            while not self.stop.is_set():
                for _ in range(min(8, self.n - len(live), self.max_opens - self.opens)):  # 8 at a time
                    live.append(self._open())
                if self.deaf:  # they never read: closed ones are not seen; a new wave replaces them
                    self.socks += live
                    live = []
                    self.stop.wait(0.25)
                    continue
                ready, _, _ = select.select(live, [], [], 0.05)
                for s in ready:
                    try:
                        got = s.recv(4096)
                    except OSError:
                        got = b""
                    if got.startswith(b"HTTP/1.1 503"):
                        self.refused += 1
                    live.remove(s)
                    s.close()
                time.sleep(0.02)  # reopen at most fifty times a second per closed batch
        finally:
            self.socks += live

    def close(self):
        self.stop.set()
        self.join(5)
        for s in self.socks:
            with contextlib.suppress(OSError):
                if self.deaf and s.recv(12, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"HTTP/1.1 503":
                    self.refused += 1
            s.close()


def test_a_flood_of_idle_and_deaf_clients_does_not_starve_health_or_a_translation(sources, capsys):
    """64 sockets that send nothing (reopened when closed) and waves of clients that never read their
    answers: /health and a translation from another address answer within 1 s, every time."""
    limits = Limits(max_connections=32, max_client_connections=8, send_timeout_s=0.5, header_timeout_s=10)
    with _serving(_app(limits), limits, sndbuf=16_384) as (port, server), _client(port) as me:
        idle, deaf = _Flood(port, IDLE, 64), _Flood(port, DEAF, 4, deaf=True)
        held: dict[str, int] = {}
        try:
            idle.start()
            deaf.start()
            time.sleep(0.5)
            health, translated = [], []
            for i in range(20):
                health.append(_timed_get(port, client=me))
                for who, n in _held(server).items():
                    held[who] = max(held.get(who, 0), n)
                if i % 5 == 0:
                    t0 = time.perf_counter()
                    r = me.post("/api/translate", json={"text": "go ."})
                    translated.append((r.status_code, time.perf_counter() - t0))
                time.sleep(0.05)
        finally:
            idle.close()
            deaf.close()
    seconds = [t for _, t in health]
    with capsys.disabled():
        print(f"\nflood: idle {idle.opens} opened / {idle.refused} refused, deaf {deaf.opens} opened / "
              f"{deaf.refused} refused; most held at once {held}; /health {len(health)} polls, min "
              f"{min(seconds) * 1e3:.1f} median {statistics.median(seconds) * 1e3:.1f} max {max(seconds) * 1e3:.1f} "
              f"ms; translations {[f'{c} {t * 1e3:.0f} ms' for c, t in translated]}")
    assert [c for c, _ in health] == [200] * 20 and max(seconds) < 1.0
    assert all(c == 200 and t < 1.0 for c, t in translated), translated
    assert held.get(IDLE, 0) <= 8 and held.get(DEAF, 0) <= 8  # no address holds more than its share
    assert idle.refused > 0 and deaf.refused > 0  # the flood did press on the caps
