"""How ``attnlab serve`` runs the app: uvicorn with read deadlines, a connection cap and model threads.

uvicorn bounds idle keep-alive connections but not a request in progress, so
:func:`deadline_protocol` adds the two read deadlines of :class:`~attnlab.web.guards.Limits` to its
h11 protocol; :func:`uvicorn_config` is every setting ``attnlab serve`` uses, and the tests start
their live servers with it.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import h11  # uvicorn's HTTP/1.1 parser: comes with the web extra
import torch
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from attnlab.web.guards import Limits


def model_threads(workers: int, threads: int | None = None) -> int:
    """Set PyTorch's intra-op threads for ``workers`` model threads and return the number set.

    Model work runs in ``workers`` threads; PyTorch's intra-op pool is shared by all of them, so
    split the cores (``threads`` overrides) instead of letting each worker ask for all of them.
    """
    n = threads or max(1, (os.cpu_count() or 1) // workers)
    torch.set_num_threads(n)
    return n


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with read deadlines (uvicorn has none for a request in progress).

    A request head must be complete within ``header_timeout`` seconds of the connection's start or
    of the request's first byte, and its body within ``body_timeout`` after the head; otherwise the
    client gets ``408`` (when no response has begun) and the connection is closed. Idle keep-alive
    connections are closed by uvicorn's ``timeout_keep_alive``; a request being answered has no
    deadline here (the app's ``deadline_s`` bounds the model). :func:`deadline_protocol` sets the two.
    """

    header_timeout = Limits.header_timeout_s  # seconds; the defaults, replaced by deadline_protocol
    body_timeout = Limits.body_timeout_s

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._phase: str | None = None
        super().connection_made(transport)
        self._arm("head")  # a connection that sends nothing is closed too

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._track(bool(data))

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._track(False)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
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


def deadline_protocol(header_timeout_s: float, body_timeout_s: float) -> type:
    """:class:`DeadlineH11Protocol` with these deadlines, for ``uvicorn.Config(http=…)`` (uvicorn
    takes a protocol *class* and makes one per connection, so the settings ride on a subclass)."""
    return type(
        "DeadlineH11Protocol",
        (DeadlineH11Protocol,),
        {"header_timeout": header_timeout_s, "body_timeout": body_timeout_s},
    )


def uvicorn_config(app: FastAPI, host: str, port: int, limits: Limits, log_level: str = "info") -> Any:
    """The uvicorn settings ``attnlab serve`` uses: read deadlines, a connection limit, small heads."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=deadline_protocol(limits.header_timeout_s, limits.body_timeout_s),
        ws="none",
        limit_concurrency=limits.max_connections,
        timeout_keep_alive=limits.keep_alive_s,
        h11_max_incomplete_event_size=limits.max_header_bytes,
        timeout_graceful_shutdown=5,
    )


def serve(app: FastAPI, host: str, port: int, limits: Limits, log_level: str = "info") -> None:
    """Run ``app`` with :func:`uvicorn_config` until interrupted."""
    uvicorn.Server(uvicorn_config(app, host, port, limits, log_level)).run()
