"""What the server refuses before any model work: the limits, the Host guard, the body cap, admission.

- :class:`Limits`: every number one server accepts (characters, beam, workers, deadlines, bytes);
- :class:`HostGuard` (ASGI, outermost): the ``Host`` header must name this server (400), the guard
  against DNS rebinding; :func:`allowed_host_names` is the list ``attnlab serve`` gives it;
- :class:`BodyLimit` (ASGI): a body over ``max_body_bytes`` gets 413 before the app reads it;
- :func:`security_headers` (HTTP middleware): nosniff, no referrer, a same-origin CSP on every answer;
- :func:`refuse_cross_site` (a route dependency): a GET that computes refuses another site's page (403);
- :class:`Admission`: at most ``max_pending`` translations and probe timelines at once (429 above).

The read deadlines of a request in progress belong to the HTTP protocol: see :mod:`attnlab.web.serving`.
"""

from __future__ import annotations

import ipaddress
import json
import math
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fastapi import HTTPException, Request

from attnlab.errors import AttnlabError
from attnlab.i18n import _


@dataclass(frozen=True)
class Limits:
    """What one server accepts; every limit answers with a 4xx/5xx *before* the model runs."""

    max_chars: int = 300  # characters of `text` (of each sentence of a list)
    max_sentences: int = 32  # sentences of a `text` list, translated together in one admission slot
    max_body_bytes: int = 16_384  # request body (413 above)
    max_beam: int = 8
    workers: int = 2  # threads that run models
    max_pending: int = 8  # translations admitted at once (running + queued); 429 above
    deadline_s: float = 30.0  # per request that computes; 504 after, and the work stops (web/deadline.py)
    max_probe_bytes: int = 64 * 2**20  # the newest this many bytes of probes.jsonl are read
    max_output_tokens: int = 160  # output tokens per translation (final <eos> included); `max_len` <= this
    max_response_bytes: int = 1_000_000  # attention maps per response (estimated before encoding)
    max_connections: int = 64  # open connections; past it an idle one is closed, or the new one gets 503 (web/slots.py)
    max_client_connections: int = 16  # open connections of one client address; 503 to its next one
    header_timeout_s: float = 10.0  # a request head must arrive within this (408 and closed)
    body_timeout_s: float = 10.0  # ... and its body within this after the head
    send_timeout_s: float = 10.0  # a response whose unsent bytes do not go down for this long is dropped
    keep_alive_s: float = 5.0  # an idle keep-alive connection is closed after this
    max_header_bytes: int = 16_384  # request line + headers (431 above, serving.HeadLimitConnection)

    def __post_init__(self) -> None:
        for name in (
            "max_chars",
            "max_sentences",
            "max_body_bytes",
            "max_beam",
            "workers",
            "max_pending",
            "max_probe_bytes",
            "max_output_tokens",
            "max_response_bytes",
            "max_connections",
            "max_client_connections",
            "max_header_bytes",
        ):
            if getattr(self, name) < 1:
                raise AttnlabError(_("web limit {name}={value} must be >= 1").format(name=name, value=getattr(self, name)))
        if self.max_pending < self.workers:
            raise AttnlabError(_("web limit max_pending={pending} must be >= workers={workers}").format(
                pending=self.max_pending, workers=self.workers))
        if self.max_connections < 2:
            raise AttnlabError(_("web limit max_connections={value} must be >= 2: one slot stays free for /health").format(
                value=self.max_connections))
        for name in ("deadline_s", "header_timeout_s", "body_timeout_s", "send_timeout_s", "keep_alive_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):  # inf would turn the deadline off; nan compares false
                raise AttnlabError(_("web limit {name}={value} must be a finite number of seconds > 0, e.g. 10").format(
                    name=name, value=value))


# ------------------------------------------------------------------------------------ Host guard

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without the port, lower-case: ``[::1]:8000`` → ``::1``."""
    h = header.strip().lower()
    if h.startswith("["):
        end = h.find("]")
        rest = h[end + 1 :] if end >= 0 else "?"
        if end < 0 or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return h  # malformed: matches no allowed name
        return h[1:end]
    if h.count(":") == 1:
        name, port = h.split(":")
        if port.isdigit() or not port:
            h = name
    return h.removesuffix(".")  # `localhost.` is `localhost`


def allowed_host_names(bind_host: str | None = None, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The names ``Host`` may carry: the loopback names, a non-loopback, non-wildcard ``bind_host``
    (``--host 192.168.1.5``) and each ``extra`` (``--allowed-host``; ``*`` allows any name)."""

    def bare(x: str) -> str:  # a bare IPv6 address (`fe80::1`) has no port to strip
        x = x.strip()
        return x.lower() if x.count(":") > 1 and not x.startswith("[") else host_name(x)

    names = list(LOOPBACK_NAMES)
    if bind_host and bind_host.strip() not in ("0.0.0.0", "::", "[::]", ""):
        names.append(bare(bind_host))
    names += ["*" if x.strip() == "*" else bare(x) for x in extra]
    return tuple(dict.fromkeys(n for n in names if n))


class HostGuard:
    """ASGI middleware: answer only requests whose ``Host`` names this server (400 otherwise).

    A page on any web site can make a browser send requests to 127.0.0.1 by rebinding its own DNS
    name to it (DNS rebinding); such requests carry that site's name as ``Host``. Loopback IP
    literals (127.0.0.0/8, ::1) are always accepted, any port. ``*`` in ``allowed`` accepts any name.
    """

    def __init__(self, app, allowed: Collection[str]) -> None:
        self.app = app
        self.any = "*" in allowed
        self.allowed = frozenset(host_name(a) for a in allowed if a != "*")

    def accepts(self, header: str | None) -> bool:
        if self.any:
            return True
        if not header:
            return False
        name = host_name(header)
        if name in self.allowed:
            return True
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        raw = next((v for k, v in scope.get("headers", ()) if k == b"host"), None)
        header = raw.decode("latin-1") if raw is not None else None
        if self.accepts(header):
            await self.app(scope, receive, send)
            return
        await self._refuse(send, header)

    async def _refuse(self, send, header: str | None) -> None:
        shown = repr(header[:100]) if header is not None else "(none)"
        names = ", ".join(sorted(self.allowed))
        fix = f"--allowed-host {host_name(header)}" if header else "--allowed-host NAME"
        body = json.dumps(
            {
                "detail": [
                    {
                        "loc": ["header", "host"],
                        "type": "host_not_allowed",
                        "msg": f"the Host header {shown} does not name this server (a guard against DNS "
                        f"rebinding); it answers to {names}; to reach it by another name start "
                        f"`attnlab serve` with {fix}",
                    }
                ]
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 400,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"x-content-type-options", b"nosniff"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


# ------------------------------------------------------------------------------------- body cap


class BodyLimit:
    """ASGI middleware: refuse a body over ``max_bytes`` with 413 before the app reads it.

    Checks ``Content-Length`` first; a chunked body is buffered up to the limit and replayed.
    """

    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                try:
                    n = int(v)
                except ValueError:
                    n = -1
                if n < 0 or n > self.max_bytes:
                    await self._refuse(send, n)
                    return
        chunks, total, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body = msg.get("body", b"")
            total += len(body)
            if total > self.max_bytes:
                await self._refuse(send, total)
                return
            chunks.append(body)
            more = msg.get("more_body", False)
        replay = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        done = False

        async def replay_receive():
            nonlocal done
            if not done:
                done = True
                return replay
            return await receive()

        await self.app(scope, replay_receive, send)

    async def _refuse(self, send, n: int) -> None:
        size = f"{n} bytes" if n >= 0 else "of an invalid length"
        body = json.dumps(
            {
                "detail": [
                    {
                        "loc": ["body"],
                        "type": "body_too_large",
                        "msg": f"the request body is {size}; the limit is {self.max_bytes} bytes",
                    }
                ]
            }
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})


# ------------------------------------------------------------------------------ headers, admission

SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
}


async def security_headers(request: Request, call_next):
    """HTTP middleware: :data:`SECURITY_HEADERS` on every response that does not set its own."""
    response = await call_next(request)
    for k, v in SECURITY_HEADERS.items():
        response.headers.setdefault(k, v)
    return response


SAME_SITE_FETCHES = ("same-origin", "none")  # Sec-Fetch-Site of the page's own requests, and of a typed URL


def cross_site(headers: Any) -> tuple[str, str] | None:
    """``(header, value)`` when a request comes from another site's page, else ``None``.

    Browsers say where a request comes from in ``Sec-Fetch-Site``: only ``same-origin`` (the
    explorer page itself) and ``none`` (a URL typed or bookmarked) pass; ``same-site`` is another
    origin too (another port of this host). Without it (older browsers) an ``Origin`` must name
    this server's ``Host``. A client that sends neither (curl, scripts) is not a web page: it passes.
    """
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None:
        return None if fetch_site.strip().lower() in SAME_SITE_FETCHES else ("sec-fetch-site", fetch_site)
    origin = headers.get("origin")
    if origin is None:
        return None
    try:
        netloc = urlsplit(origin.strip()).netloc.lower()
    except ValueError:
        netloc = ""
    host = (headers.get("host") or "").strip().lower()
    return None if netloc and netloc == host else ("origin", origin)


async def refuse_cross_site(request: Request) -> None:
    """Route dependency of the GETs that compute: 403, one line, for a request from another site.

    A page on any site can make a browser GET a URL of this server (an ``<img>``, a link, a
    ``fetch`` in ``no-cors`` mode); it cannot read the answer, but the server would still compute
    it. The POSTs need no such check: they read only an ``application/json`` body, which a browser
    sends to another site only after asking it first (CORS), and this server never says yes.
    """
    found = cross_site(request.headers)
    if found is None:
        return
    name, value = found
    raise HTTPException(
        status_code=403,
        detail=[
            {
                "loc": ["header", name],
                "type": "cross_site",
                "msg": f"refused a request from another site's page ({name}: {value[:100]!r}); this API answers "
                "its own page, and clients that are not browsers",
            }
        ],
    )


class Admission:
    """Bounded admission: at most ``limit`` translations in flight; a slot frees when its *thread*
    finishes (not when its request gives up), so timed-out work cannot pile up behind new requests."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used, self._lock = limit, 0, threading.Lock()

    def try_acquire(self) -> bool:
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True

    def release(self, _fut: Any = None) -> None:
        with self._lock:
            self.used -= 1
