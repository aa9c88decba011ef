"""How ``attnlab serve`` runs the app: uvicorn with read deadlines, fair connection slots and model threads.

uvicorn bounds idle keep-alive connections but not a request in progress, nor a response nobody
reads, and its connection limit counts idle sockets, so :func:`deadline_protocol` adds to its h11
protocol the two read deadlines of :class:`~attnlab.web.guards.Limits`, the head limit whatever the
read sizes (:class:`HeadLimitConnection`), and the connection slots of :mod:`attnlab.web.slots`
(per client, idle ones reclaimed, a reserve for ``/health``, a send timeout);
:func:`uvicorn_config` is every setting ``attnlab serve`` uses, and the tests start their live
servers with it. :func:`listen_socket` binds the port before anything else, so that a busy or
invalid port is one ``error:`` line before any model loads.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from typing import Any

import h11  # uvicorn's HTTP/1.1 parser: comes with the web extra
import torch
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from attnlab.device import cpu_threads
from attnlab.errors import AttnlabError
from attnlab.i18n import _
from attnlab.web import slots
from attnlab.web.guards import Limits


def model_threads(workers: int, threads: int | None = None) -> int:
    """Set PyTorch's intra-op threads for ``workers`` model threads and return the number set.

    Model work runs in ``workers`` threads; PyTorch's intra-op pool is shared by all of them, so
    split the cores (``threads`` overrides) instead of letting each worker ask for all of them.
    """
    n = threads or max(1, cpu_threads() // workers)  # the CPUs this process may use, within its quota
    torch.set_num_threads(n)
    return n


def head_bytes(event: h11.Request) -> int:
    """The size of a request's head as sent without optional whitespace: the request line, each
    ``name: value`` line and the blank line that ends it, each with its CRLF."""
    line = len(event.method) + len(event.target) + len(b"HTTP/") + len(event.http_version) + 4
    return line + sum(len(name) + len(value) + 4 for name, value in event.headers.raw_items()) + 2


class HeadLimitConnection(h11.Connection):
    """h11's server connection with a head limit that holds however the head arrives.

    h11 counts ``max_incomplete_event_size`` only while a head is incomplete, so a head over it that
    arrives in one read passes; this also measures every complete head (:func:`head_bytes`).
    ``too_large`` tells the protocol that the error it is about to answer is an oversized head.
    """

    def __init__(self, max_head: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_head)
        self.max_head, self.too_large = max_head, False

    def next_event(self) -> Any:
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as e:  # a trickled head over the limit: h11's own 431 hint
            self.too_large = e.error_status_hint == 431
            raise
        if isinstance(event, h11.Request) and head_bytes(event) > self.max_head:
            self.too_large = True
            raise h11.RemoteProtocolError("request head too large", error_status_hint=431)
        return event


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with read deadlines (uvicorn has none for a request in progress) and
    fair connection slots (:mod:`attnlab.web.slots`).

    A request head must be complete within ``header_timeout`` seconds of the connection's start or
    of the request's first byte, and its body within ``body_timeout`` after the head; otherwise the
    client gets ``408`` (when no response has begun) and the connection is closed. Idle keep-alive
    connections are closed by uvicorn's ``timeout_keep_alive``; a request being answered has no
    deadline here (the app's ``deadline_s`` bounds the model). :func:`deadline_protocol` sets the two.

    A request head over ``h11_max_incomplete_event_size`` bytes (``Limits.max_header_bytes``) gets
    ``431`` and the connection is closed, in one read or many (:class:`HeadLimitConnection`).

    A new connection is admitted by :func:`~attnlab.web.slots.make_room` (503 and closed when its
    address holds ``max_client_connections`` or nothing idle can give way), each request by
    :func:`~attnlab.web.slots.request_refusal` (503 past the reserve kept for ``/health``), and
    bytes that stay unsent for ``send_timeout`` seconds drop the connection
    (:class:`~attnlab.web.slots.WriteWatch`).
    """

    header_timeout = Limits.header_timeout_s  # seconds; the defaults, replaced by deadline_protocol
    body_timeout = Limits.body_timeout_s
    send_timeout = Limits.send_timeout_s
    max_connections = Limits.max_connections
    max_client_connections = Limits.max_client_connections

    def __init__(self, config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.conn = HeadLimitConnection(config.h11_max_incomplete_event_size or Limits.max_header_bytes)
        self.idle_since = 0.0  # loop time it last had no request: the longest idle gives way first
        self.app = self._admitted(self.app)

    def _admitted(self, app: Any) -> Any:
        """``app`` behind :func:`~attnlab.web.slots.request_refusal` (uvicorn's own limit is off)."""
        reserve = slots.health_reserve(self.max_connections)

        async def admitted(scope, receive, send) -> None:
            reason = slots.request_refusal(self.connections, self, scope, self.max_connections, reserve)
            if reason is None:
                await app(scope, receive, send)
                return
            self.logger.info("refused a request (503): %s", reason)
            await slots.refuse_request(send, reason)

        return admitted

    def send_400_response(self, msg: str) -> None:
        """uvicorn answers every request h11 cannot parse with 400; an oversized head gets 431."""
        if not getattr(self.conn, "too_large", False):
            super().send_400_response(msg)
            self._writes.arm()
            return
        body = (
            f"the request head (request line and headers) is over {self.conn.max_head} bytes; "
            "send fewer or shorter headers\n"
        ).encode()
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        self.logger.warning("refused a request head over %d bytes", self.conn.max_head)
        out = self.conn.send(h11.Response(status_code=431, headers=headers, reason=b"Request Header Fields Too Large"))
        out = (out or b"") + (self.conn.send(h11.Data(data=body)) or b"") + (self.conn.send(h11.EndOfMessage()) or b"")
        self.transport.write(out)
        self.transport.close()
        self._writes.arm()

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._phase: str | None = None
        super().connection_made(transport)
        self.idle_since = self.loop.time()
        self._writes = slots.WriteWatch(self.loop, transport, self.send_timeout, self._dropped)
        reason = slots.make_room(self.connections, self, self.max_connections, self.max_client_connections)
        if reason is not None:
            self.logger.info("refused a connection from %s (503): %s", slots.client_key(self), reason)
            self.transport.write(slots.refusal_bytes(reason))
            self.transport.close()
            self._writes.arm()
            return
        self.admitted = True  # holds a slot from here on (a refused one never does)
        self._arm("head")  # a connection that sends nothing is closed too

    def reclaim(self) -> None:
        """Close this idle connection to make room for a new one (:func:`~attnlab.web.slots.make_room`)."""
        self.logger.info("closed an idle connection from %s to make room", slots.client_key(self))
        self._cancel()
        self.transport.close()

    def _dropped(self, unsent: int) -> None:
        self.logger.info("dropped a connection from %s: %d bytes unsent for %g s",
                         slots.client_key(self), unsent, self.send_timeout)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._track(bool(data))

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.idle_since = self.loop.time()
        self._writes.arm()  # a response handed to a client that does not read
        self._track(False)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._writes.arm()  # a response waiting for a client that does not read

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        self._writes.cancel()
        super().connection_lost(exc)

    def _track(self, fresh: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            self._cancel()
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            if fresh or self.conn.trailing_data[0]:  # part of a request head has arrived
                if self._phase != "head":
                    self._arm("head")
            elif self._phase is not None:
                self._cancel()  # idle between requests: the keep-alive timeout's business
        elif state is h11.SEND_BODY:
            if self._phase != "body":
                self._arm("body")
        else:  # the request is complete (or the connection is done)
            self._cancel()

    def _arm(self, phase: str) -> None:
        self._cancel()
        self._phase = phase
        seconds = self.header_timeout if phase == "head" else self.body_timeout
        self._deadline = self.loop.call_later(seconds, self._expire, phase, seconds)

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline, self._phase = None, None

    def _expire(self, phase: str, seconds: float) -> None:
        self._deadline, self._phase = None, None
        if self.transport is None or self.transport.is_closing():
            return
        cycle = self.cycle
        answering = cycle is not None and not cycle.response_complete and cycle.response_started
        if not answering:
            msg = f"the request {phase} did not arrive within {seconds:g} s; connection closed\n".encode()
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"connection: close\r\ncontent-length: " + str(len(msg)).encode() + b"\r\n\r\n" + msg
            )
        self.logger.info(
            "closed a connection whose request %s did not arrive within %g s", phase, seconds
        )
        self.transport.close()
        self._writes.arm()


def deadline_protocol(header_timeout_s: float, body_timeout_s: float, send_timeout_s: float = Limits.send_timeout_s,
                      max_connections: int = Limits.max_connections,
                      max_client_connections: int = Limits.max_client_connections) -> type:
    """:class:`DeadlineH11Protocol` with these deadlines and slots, for ``uvicorn.Config(http=…)``
    (uvicorn takes a protocol *class* and makes one per connection, so the settings ride on a subclass)."""
    return type(
        "DeadlineH11Protocol",
        (DeadlineH11Protocol,),
        {"header_timeout": header_timeout_s, "body_timeout": body_timeout_s, "send_timeout": send_timeout_s,
         "max_connections": max_connections, "max_client_connections": max_client_connections},
    )


def uvicorn_config(app: FastAPI, host: str, port: int, limits: Limits, log_level: str = "info") -> Any:
    """The uvicorn settings ``attnlab serve`` uses: read deadlines, fair connection slots, small heads."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=deadline_protocol(limits.header_timeout_s, limits.body_timeout_s, limits.send_timeout_s,
                               limits.max_connections, limits.max_client_connections),
        ws="none",
        limit_concurrency=None,  # it counts idle sockets too: the protocol's slots (web/slots.py) replace it
        timeout_keep_alive=limits.keep_alive_s,
        h11_max_incomplete_event_size=limits.max_header_bytes,
        timeout_graceful_shutdown=5,
    )


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port``, as uvicorn binds one (IPv6 when ``host`` has a colon;
    ``SO_REUSEADDR``), for :func:`serve`. ``port`` 0 takes a free one (``getsockname()`` says which).

    Raises :class:`AttnlabError` (one line: what, why, the fix) when the port is not a TCP port,
    is taken, needs privileges, or ``host`` is not an address of this machine.
    """
    if not 0 <= port <= 65535:
        raise AttnlabError(_("--port {port} is not a TCP port; give one from 1 to 65535, e.g. --port 8000").format(port=port))
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.set_inheritable(True)
    except OSError as e:
        sock.close()
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if e.errno == errno.EADDRINUSE:
            fix = _("port {port} is in use (another server?); stop it or choose another port with --port N").format(port=port)
        elif e.errno == errno.EACCES:
            fix = _("port {port} needs privileges here; choose one above 1023 with --port N").format(port=port)
        else:
            fix = _("{error}; --host must be an address of this machine, e.g. 127.0.0.1").format(error=e.strerror or e)
        raise AttnlabError(_("cannot listen on {where}: {fix}").format(where=where, fix=fix)) from None
    return sock


def serve(app: FastAPI, host: str, port: int, limits: Limits, log_level: str = "info",
          sock: socket.socket | None = None) -> None:
    """Run ``app`` with :func:`uvicorn_config` until interrupted, on ``sock`` (from :func:`listen_socket`)
    or on a socket bound here."""
    sock = sock or listen_socket(host, port)
    uvicorn.Server(uvicorn_config(app, host, port, limits, log_level)).run(sockets=[sock])
