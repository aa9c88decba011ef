"""The learner's language: the teaching text in English or in the notes' Chinese.

The notes are Chinese; the commands that teach (``doctor``, ``explain``, ``data``'s walk-through, the
``params`` tables, the web page's notes) speak Chinese on request, in the notes' own terms (查询/键/值,
更新门/重置门, 上下文向量, 位置编码, 参数/超参数, 注意力权重, …). The mechanism is the standard one, Python's
:mod:`gettext`: the English text is the message id, wrapped in ``_()`` where it is printed, and the
catalogue ``locale/<lang>/LC_MESSAGES/attnlab.po`` holds each translation. The compiled ``.mo`` beside
it is committed (so an installed package needs nothing to build it) and must agree with the ``.po``:
``tests/test_i18n.py`` compiles the ``.po`` with Babel and compares. After editing the ``.po``::

    pybabel compile -D attnlab -d src/attnlab/locale          # Babel is a dev dependency

Texts with values are ``str.format`` templates (``_("loss {loss:.3f}").format(loss=x)``), never
f-strings, so the message id is a constant that a catalogue can hold; ``N_()`` marks a constant that
is stored first and translated where it is shown (a table of titles). The web page's own text is marked
in its files (``data-i18n`` in index.html, ``t("…")`` in app.js; :mod:`attnlab.web.page_text`) and its
translations live in this same catalogue; :func:`catalogue` reads one language without switching to it.

Which language: :func:`set_language` (``--lang``), else ``ATTNLAB_LANG``, else English, process-wide;
:func:`speaking` overrides it for one context (a :class:`contextvars.ContextVar`), so that the web server
answers concurrent requests each in its own. The system locale (``LANG``) is not read: output should not
change with the machine. A language without a catalogue is a :class:`LanguageError` naming the others.

Imports only the standard library and :mod:`attnlab.errors` (the base layer).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import gettext
import os
import re
from pathlib import Path

from attnlab.errors import AttnlabError

__all__ = ["DOMAIN", "ENV_VAR", "LOCALE_DIR", "LanguageError", "N_", "Templates", "_", "add_lang_argument",
           "available_languages", "catalogue", "center", "language", "ljust", "missing", "rjust", "set_language",
           "speaking", "using", "width"]

DOMAIN = "attnlab"
ENV_VAR = "ATTNLAB_LANG"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
SOURCE_LANGUAGE = "en"  # the message ids themselves: no catalogue


class LanguageError(AttnlabError):
    """A language asked for (``--lang`` or ``ATTNLAB_LANG``) that has no catalogue."""


_translations: gettext.NullTranslations | None = None  # None: not chosen yet (read ATTNLAB_LANG on first use)
_language = SOURCE_LANGUAGE
#: this context's own language and translations (:func:`speaking`); None: the process-wide ones above
_context: contextvars.ContextVar[tuple[str, gettext.NullTranslations] | None] = contextvars.ContextVar(
    "attnlab_language", default=None)


def available_languages() -> list[str]:
    """``en`` and every language with a compiled catalogue (``locale/<lang>/LC_MESSAGES/attnlab.mo``)."""
    found = sorted(p.parent.parent.name for p in LOCALE_DIR.glob(f"*/LC_MESSAGES/{DOMAIN}.mo"))
    return [SOURCE_LANGUAGE, *(lang for lang in found if lang != SOURCE_LANGUAGE)]


def _normalise(lang: str) -> str:
    """``zh``, ``zh_CN``, ``zh-Hans``, ``zh_CN.UTF-8`` → ``zh``: one catalogue per language, not per region."""
    return lang.strip().replace("-", "_").split(".")[0].split("_")[0].lower()


def catalogue(lang: str, source: str = "--lang") -> tuple[str, gettext.NullTranslations]:
    """``lang``'s code (``zh_CN`` → ``zh``) and its translations, without making it the current language
    (the web server answers each page in the language it asks for). English: the message ids themselves.

    Raises:
        LanguageError: no catalogue for ``lang``; the message names ``source`` (where the value came
            from: ``--lang``, ``ATTNLAB_LANG``, ``lang``) and the available languages.
    """
    code = _normalise(lang)
    if code == SOURCE_LANGUAGE:
        return code, gettext.NullTranslations()
    langs = available_languages()
    if code not in langs:
        shown = repr(lang) if len(lang) <= 40 else f"{lang[:40]!r}… ({len(lang):,} characters)"  # never echo 100 KB
        raise LanguageError(
            f"{source} {shown} is not an available language; choose one of: {', '.join(langs)}"
        )
    return code, gettext.translation(DOMAIN, localedir=LOCALE_DIR, languages=[code])


def set_language(lang: str | None = None) -> str:
    """Speak ``lang`` from now on (``None``: ``$ATTNLAB_LANG``, else English); returns the language set.

    Raises:
        LanguageError: no catalogue for ``lang`` (the message names the available languages).
    """
    global _translations, _language
    _missing.clear()
    source = "--lang"
    if lang is None or not lang.strip():
        lang, source = os.environ.get(ENV_VAR, "").strip() or SOURCE_LANGUAGE, ENV_VAR
    _language, _translations = catalogue(lang, source)
    return _language


@functools.lru_cache(maxsize=16)
def _known(code: str, source: str) -> tuple[str, gettext.NullTranslations]:
    """:func:`catalogue` of a normalised code, read once (an unknown one raises, and is not kept)."""
    return catalogue(code, source)


@contextlib.contextmanager
def speaking(lang: str | None, source: str = "lang"):
    """Speak ``lang`` inside the ``with`` block in this context only (this thread or asyncio task, and the
    work it hands its context to, e.g. ``contextvars.copy_context().run``); the process-wide language
    (:func:`set_language`, the CLI's) is neither read nor changed. ``None``: no change. Yields the code.
    Messages left untranslated here are not listed by :func:`missing` (that list is the CLI's).

    Raises:
        LanguageError: no catalogue for ``lang``; the message names ``source`` and the available languages.
    """
    if lang is None:
        yield language()
        return
    try:
        chosen = _known(_normalise(lang), source)
    except LanguageError:
        catalogue(lang, source)  # the message names the value as it was given
        raise
    token = _context.set(chosen)
    try:
        yield chosen[0]
    finally:
        _context.reset(token)


@contextlib.contextmanager
def using(lang: str | None):
    """Speak ``lang`` inside the ``with`` block and the language before it afterwards (``None``: no change).
    For ``Report.format(lang)``; the CLI itself sets the language once, with :func:`set_language`. Inside
    :func:`speaking` (a web request) it changes that context's language only."""
    if lang is None:
        yield language()
        return
    if _context.get() is not None:
        with speaking(lang, "--lang") as code:
            yield code
        return
    before = (_translations, _language, dict(_missing))
    try:
        yield set_language(lang)
    finally:  # the messages missing inside the block stay listed: the caller still says so once
        inside = dict(_missing)
        globals().update(_translations=before[0], _language=before[1])
        _missing.clear()
        _missing.update(before[2])
        _missing.update(inside)


def language() -> str:
    """The language the text is written in now (``en``, ``zh``, …): this context's (:func:`speaking`), else
    the process-wide one."""
    own = _context.get()
    if own is not None:
        return own[0]
    if _translations is None:
        set_language(None)
    return _language


_missing: dict[str, None] = {}
_FIELDS = re.compile(r"\{[^{}]*\}")
_WORDS = re.compile(r"[^\W\d_]{2,}")  # messages asked for in a language whose catalogue lacks them, in order


def _(message: str) -> str:
    """``message`` in the current language. When the catalogue has no translation the English text is
    returned and remembered (:func:`missing`), so that the command can say so once instead of
    falling back silently. Inside :func:`speaking`, that context's language."""
    own = _context.get()
    if own is not None:
        return own[1].gettext(message)
    if _translations is None:
        set_language(None)
    text = _translations.gettext(message)  # type: ignore[union-attr]
    if text is message and _language != SOURCE_LANGUAGE and _WORDS.search(_FIELDS.sub("", message)):
        _missing.setdefault(message)  # (a template of fields and symbols alone has nothing to translate)
    return text


def missing() -> list[str]:
    """The messages shown untranslated since the language was set (empty in English)."""
    return list(_missing)


def N_(message: str) -> str:
    """Mark ``message`` for the catalogue without translating it now (translate it where it is shown)."""
    return message


def add_lang_argument(parser, top_level: bool = False) -> None:
    """Add ``--lang LANG`` to an argparse ``parser`` (the CLI puts it on the top level and every command).

    Commands' copies leave the value unset unless given (``SUPPRESS``), so ``attnlab --lang zh doctor RUN``
    and ``attnlab doctor RUN --lang zh`` both work; :func:`set_language` checks the value (one clear line).
    """
    import argparse  # the CLI's business; this module is otherwise only gettext

    parser.add_argument(
        "--lang", metavar="LANG", default=None if top_level else argparse.SUPPRESS,
        help=_("language of the teaching text: {languages} (default: ${variable}, else en)").format(
            languages=" or ".join(available_languages()), variable=ENV_VAR),
    )


class Templates(dict):
    """A ``{key: English template}`` table whose lookups are translated: ``T[key]`` is ``_(stored value)``.

    The table a module prints from (its values wrapped in :func:`N_` for the catalogue) stays one plain
    dict literal; ``.items()`` / ``.values()`` give the English originals."""

    def __getitem__(self, key: str) -> str:
        return _(super().__getitem__(key))


# ---------------------------------------------------------------------------------------------------
# Columns that line up in a terminal: a CJK character takes two cells, a combining mark none.


def width(text: str) -> int:
    """Terminal cells ``text`` takes: 2 for East Asian wide and fullwidth characters (汉字, ，),
    0 for combining marks and zero-width characters, 1 otherwise (``len`` counts characters)."""
    import unicodedata

    cells = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        cells += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return cells


def ljust(text: str, cells: int) -> str:
    """``text`` padded with spaces on the right to ``cells`` terminal cells (``str.ljust`` by width)."""
    return text + " " * max(0, cells - width(text))


def rjust(text: str, cells: int) -> str:
    """``text`` padded with spaces on the left to ``cells`` terminal cells."""
    return " " * max(0, cells - width(text)) + text


def center(text: str, cells: int) -> str:
    """``text`` centred in ``cells`` terminal cells."""
    pad = max(0, cells - width(text))
    return " " * (pad // 2) + text + " " * (pad - pad // 2)
