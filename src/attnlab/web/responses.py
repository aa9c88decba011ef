"""The bodies the API sends: compact JSON, gzipped by the worker that built it, and the refusals.

Large answers (translations, probe timelines) are encoded and compressed in a model thread, inside
the admission slot (:mod:`attnlab.web.state`), and sent as they are by :func:`encoded`; the app's
``GZipMiddleware`` compresses only the small ones, with the same level and threshold.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from attnlab.web.guards import Limits

GZIP_LEVEL = 4  # cheap: about as fast as the JSON encoding, most of the size win of level 9
GZIP_MIN = 2048  # bytes; smaller bodies are sent as they are


def accepts_gzip(request: Request) -> bool:
    enc = request.headers.get("accept-encoding", "")
    return any(part.split(";")[0].strip() == "gzip" for part in enc.lower().split(","))


def gzip_bytes(data: bytes, level: int = GZIP_LEVEL) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


def json_bytes(payload: Any) -> bytes:
    """``payload`` as compact UTF-8 JSON (no spaces, non-ASCII kept: the tokens are French)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def encoded(body: bytes, gz: bool) -> Response:
    """A JSON body built by a worker (gzipped when ``gz``), never cached by the client."""
    headers = {"Cache-Control": "no-store", "Vary": "Accept-Encoding"}
    if gz:
        headers["Content-Encoding"] = "gzip"
    return Response(body, media_type="application/json", headers=headers)


def error(status: int, loc: list[str], msg: str, type_: str) -> JSONResponse:
    """A refusal shaped like FastAPI's validation errors: ``{"detail": [{"loc", "msg", "type"}]}``."""
    return JSONResponse(status_code=status, content={"detail": [{"loc": loc, "msg": msg, "type": type_}]})


def busy(limits: Limits) -> JSONResponse:
    """429: every admission slot is taken; ``Retry-After`` says when to try again."""
    return JSONResponse(
        status_code=429,
        headers={"Retry-After": "1"},
        content={"detail": f"the server is busy ({limits.max_pending} requests in progress); retry in a moment"},
    )


def too_slow(
    limits: Limits, what: str = "the translation", instead: str = "a shorter sentence or beam_size 1"
) -> JSONResponse:
    """504: ``what`` ran past ``deadline_s`` and was stopped; ``instead``: what to ask for."""
    return JSONResponse(
        status_code=504,
        content={"detail": f"{what} took longer than {limits.deadline_s:g} s and was stopped; try {instead}"},
    )


class HeadAsGet:
    """ASGI middleware: ``HEAD`` is answered as ``GET`` is, headers and all, without the body (RFC 9110
    §9.3.2), as web servers do; FastAPI routes ``GET`` only, so ``HEAD /`` was 405. The route sees
    ``GET``; a ``HEAD`` where ``GET`` is not allowed gets the 405 a ``GET`` gets."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)
