"""Connection slots, shared fairly: what one client may hold, which connection gives way, how long a write may stall.

uvicorn's ``limit_concurrency`` counts every open connection, idle or not, so a few dozen sockets that
send nothing put every route, ``/health`` included, at 503; and a response to a client that never
reads stays buffered, its connection open, for as long as that client likes. The server's protocol
(:class:`~attnlab.web.serving.DeadlineH11Protocol`) asks this module instead, as nginx does:

- per client (nginx's ``limit_conn`` keyed by ``$binary_remote_addr``): one address holds at most
  ``max_client_connections`` connections; its next one gets 503 and is closed at once, so a flood
  costs its sender accepts, not slots (:func:`make_room`);
- in total (nginx reuses *idle* connections when ``worker_connections`` run out): at most
  ``max_connections``; a new connection past that closes an idle one (no request in progress,
  nothing left to send) of the client holding the most, the longest idle first; only when none is
  idle does the newcomer get 503;
- a reserve for liveness: a request other than ``/health`` gets 503 while all but
  :func:`health_reserve` of the connections are busy (:func:`request_refusal`), so there is always an
  idle one to make room with and ``/health`` stays answerable;
- writes (nginx's ``send_timeout``): a connection whose unsent bytes have not gone down for
  ``send_timeout_s`` is dropped, freeing its slot (:class:`WriteWatch`).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any

import h11

HEALTH_PATH = "/health"  # never behind the reserve: liveness must answer while everything else is busy


def health_reserve(max_connections: int) -> int:
    """Connections kept for ``/health`` out of ``max_connections``: an eighth, at least one."""
    return max(1, max_connections // 8)


def client_key(proto: Any) -> str | None:
    """The address a connection comes from (nginx's ``$binary_remote_addr``); ``None`` for a Unix socket."""
    client = getattr(proto, "client", None)
    return client[0] if client else None


def gone(proto: Any) -> bool:
    """Closed with nothing left to send: it leaves the server's set within one turn of the loop."""
    t = getattr(proto, "transport", None)
    return t is None or (t.is_closing() and not t.get_write_buffer_size())


def idle(proto: Any) -> bool:
    """Open with no request in progress and nothing left to send (a request head may be arriving):
    nginx's "reusable" connections, the ones closed to make room for a new one."""
    t = getattr(proto, "transport", None)
    if t is None or t.is_closing() or t.get_write_buffer_size():
        return False
    cycle = getattr(proto, "cycle", None)
    return (cycle is None or cycle.response_complete) and proto.conn.their_state is h11.IDLE


def make_room(connections: Collection[Any], new: Any, max_connections: int, max_client: int) -> str | None:
    """Admit connection ``new`` (already in ``connections``): ``None``, after closing an idle
    connection when the server is full, or why it must be refused (one line, for its 503)."""
    live = [c for c in connections if c is not new and not gone(c)]
    key = client_key(new)
    held = Counter(client_key(c) for c in live)
    if held[key] >= max_client:
        return (f"this address already holds {held[key]} connections, the most one client may; "
                "close one or reuse it (keep-alive)")
    if len(live) < max_connections:
        return None
    candidates = [c for c in live if idle(c)]
    if not candidates:
        return f"all {max_connections} connections are busy; retry in a moment"
    victim = max(candidates, key=lambda c: (held[client_key(c)], -getattr(c, "idle_since", 0.0)))
    victim.reclaim()
    return None


def request_refusal(connections: Collection[Any], me: Any, scope: dict, max_connections: int,
                    reserve: int) -> str | None:
    """Why a request on connection ``me`` gets 503 (one line), or ``None``: ``/health`` always passes;
    the rest only while fewer than ``max_connections - reserve`` other connections are busy."""
    if scope.get("path") == HEALTH_PATH:
        return None
    busy = sum(1 for c in connections if c is not me and not gone(c) and not idle(c))
    if busy < max_connections - reserve:
        return None
    return f"{busy} connections are busy, the most this server serves at once; retry in a moment"


def refusal_bytes(reason: str) -> bytes:
    """A whole ``503`` response that closes its connection, written before any request is read."""
    body = json.dumps({"detail": reason}).encode() + b"\n"
    return (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


async def refuse_request(send: Callable[..., Any], reason: str) -> None:
    """Answer an ASGI request with :func:`refusal_bytes`' 503, closing the connection after it."""
    body = json.dumps({"detail": reason}).encode() + b"\n"
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1"),
                            (b"connection", b"close"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class WriteWatch:
    """nginx's ``send_timeout`` for one connection: once :meth:`arm`-ed with bytes left to send, it
    checks every ``seconds`` that they went down, and drops the connection (``on_drop``, then
    ``transport.abort()``) the first time they did not. Like nginx's, it bounds the time between two
    writes that make progress, not the whole response."""

    def __init__(self, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport, seconds: float,
                 on_drop: Callable[[int], None]) -> None:
        self.loop, self.transport, self.seconds, self.on_drop = loop, transport, seconds, on_drop
        self._timer: asyncio.TimerHandle | None = None
        self._left = 0

    def arm(self) -> None:
        """Start watching if bytes are waiting to be sent and no watch runs (cheap to call often)."""
        if self._timer is None and self.transport.get_write_buffer_size():
            self._left = self.transport.get_write_buffer_size()
            self._timer = self.loop.call_later(self.seconds, self._check)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        left = self.transport.get_write_buffer_size()
        if not left:
            return
        if left < self._left:  # the client read some: another period
            self._left = left
            self._timer = self.loop.call_later(self.seconds, self._check)
            return
        self.on_drop(left)
        self.transport.abort()  # drops the unsent bytes; connection_lost frees the slot
