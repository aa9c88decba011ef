"""The explorer page's own teaching text, in the learner's language.

The page's English strings are marked where they are written, and their translations live in the
one catalogue of the CLI (``locale/<lang>/LC_MESSAGES/attnlab.po``, read through :mod:`attnlab.i18n`);
nothing is listed twice and the page holds no dictionary of its own:

- ``static/index.html``: an element with ``data-i18n`` has a message id as its text (whitespace
  collapsed; it holds no other element), and ``data-i18n-attrs="placeholder aria-label"`` names
  attributes whose values are message ids;
- ``static/app.js``: ``t("…", {name: value})`` is translated where it is shown (``{name}`` fields as in
  the Python templates) and ``N_("…")`` marks a constant stored first and translated where shown;
  only a double-quoted literal is a message id.

:func:`page_messages` finds them (the tests check each has a translation); :func:`page_catalogue` is
what ``GET /api/messages`` sends, and the page applies it when it loads. Model outputs (tokens,
translations) and the API's error messages are not the page's text and stay as they are.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from attnlab.errors import AttnlabError
from attnlab.i18n import available_languages, catalogue

STATIC_DIR = Path(__file__).resolve().parent / "static"
PAGE_FILES = ("index.html", "app.js")
# t("…") or N_("…"), not a method call (x.t) nor the tail of a longer name (set(…)).
_JS_MARK = re.compile(r'(?<![\w.$])(?:t|N_)\(\s*"((?:[^"\\\n]|\\.)*)"')


class _Marked(HTMLParser):
    """Collects the ``data-i18n`` texts and ``data-i18n-attrs`` values of one HTML page."""

    def __init__(self, name: str) -> None:
        super().__init__(convert_charrefs=True)
        self.name, self.found, self._open, self._text = name, [], None, []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if self._open is not None:
            raise AttnlabError(
                f"{self.name}: <{tag}> inside <{self._open} data-i18n>: mark a plain text only"
            )
        for attr in (a.get("data-i18n-attrs") or "").split():
            if not a.get(attr):
                raise AttnlabError(
                    f"{self.name}: <{tag}> names {attr!r} in data-i18n-attrs but has no such value"
                )
            self.found.append(a[attr])
        if "data-i18n" in a:
            self._open, self._text = tag, []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if self._open == tag:
            text = " ".join("".join(self._text).split())
            if not text:
                raise AttnlabError(f"{self.name}: an empty <{tag} data-i18n>")
            self.found.append(text)
            self._open = None


def html_messages(html: str, name: str = "index.html") -> list[str]:
    """The message ids marked in an HTML page, in order (repeats kept)."""
    parser = _Marked(name)
    parser.feed(html)
    parser.close()
    return parser.found


def js_messages(js: str) -> list[str]:
    """The message ids of ``t("…")`` and ``N_("…")`` in a script, in order (repeats kept)."""
    return [json.loads(f'"{m}"') for m in _JS_MARK.findall(js)]


@lru_cache(maxsize=1)
def page_messages() -> dict[str, str]:
    """Every message id the page marks → the file that marks it first (``index.html``, ``app.js``), and the
    language names of :data:`attnlab.data.pairs.LANGUAGE_NAMES` (``data/pairs.py``), which the page shows."""
    from attnlab.data.pairs import LANGUAGE_NAMES

    out: dict[str, str] = {}
    for name in PAGE_FILES:
        text = (STATIC_DIR / name).read_text(encoding="utf-8")
        for msg in html_messages(text, name) if name.endswith(".html") else js_messages(text):
            out.setdefault(msg, name)
    for lang in LANGUAGE_NAMES.values():  # /api/runs names each run's languages in English; the page shows them so
        out.setdefault(lang, "data/pairs.py")
    return out


@lru_cache(maxsize=8)
def page_catalogue(lang: str) -> dict[str, Any]:
    """``{"lang", "languages", "messages": {English: translation}}`` for the page's marked strings.

    English maps each message to itself; a message the catalogue lacks stays English (the tests make
    sure none does). Raises :class:`~attnlab.i18n.LanguageError` for a language without a catalogue.
    """
    code, tr = catalogue(lang, source="lang")
    return {
        "lang": code,
        "languages": available_languages(),
        "messages": {m: tr.gettext(m) for m in page_messages()},
    }
