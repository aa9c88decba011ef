"""Each request in its own language: the text a learner reads in an answer (the alignment verdict's
``summary``, warnings, messages) follows the request, not the process.

:mod:`attnlab.i18n` keeps one process-wide language, the CLI's ``--lang``; two requests in different
languages at once would clash there. :class:`RequestLanguage` speaks each request's language through
:func:`attnlab.i18n.speaking` (a context variable), which the model threads inherit
(:meth:`~attnlab.web.state.ServerState.run_admitted` runs the work in a copy of the request's context).

The language: the ``lang`` query parameter, else the first language of the ``Accept-Language`` header
(RFC 9110 §12.5.4, by its ``q`` weights) that has a catalogue, else the server's (``attnlab serve --lang``).
A ``lang`` with no catalogue is left to the route that reads it to refuse (``/api/translate``, 422); the
page and the other routes answer in the next choice.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from attnlab.i18n import available_languages, speaking


def language_code(tag: str) -> str:
    """``zh-Hans-CN`` → ``zh``: one catalogue per language, as :mod:`attnlab.i18n` keeps them."""
    return tag.strip().replace("_", "-").split("-")[0].lower()


def accepted_language(header: str, available: set[str] | frozenset[str]) -> str | None:
    """The language of ``available`` an ``Accept-Language`` header prefers most (ties: the first named);
    None when it names none of them (``*`` names none in particular)."""
    ranked: list[tuple[float, int, str]] = []
    for i, item in enumerate(header.split(",")[:32]):  # a client's list is short; a longer one is cut
        tag, *params = item.split(";")
        q = 1.0
        for p in params:
            name, _eq, value = p.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        code = language_code(tag)
        if q > 0 and code in available:
            ranked.append((-q, i, code))
    return min(ranked)[2] if ranked else None


class RequestLanguage:
    """ASGI middleware: every HTTP request runs in :func:`~attnlab.i18n.speaking` its language
    (``lang`` query parameter, ``Accept-Language``, else ``default``, the server's)."""

    def __init__(self, app: Any, default: str) -> None:
        self.app, self.default = app, default
        self.available = frozenset(available_languages())

    def choose(self, scope: dict[str, Any]) -> str:
        query = scope.get("query_string", b"").decode("latin-1")
        for name, value in parse_qsl(query[:4096]):
            if name == "lang" and language_code(value) in self.available:
                return language_code(value)
        for name, value in scope.get("headers", ()):
            if name == b"accept-language":
                found = accepted_language(value.decode("latin-1")[:1024], self.available)
                if found:
                    return found
        return self.default

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with speaking(self.choose(scope)):
            await self.app(scope, receive, send)
