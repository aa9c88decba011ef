"""``GET /``, ``GET /docs``, ``/static/``, ``GET /api/messages`` and ``GET /api/sections``: the explorer page,
the API reference, the page's own text in the learner's language and what its "§N" means (the notes'
sections with D2L's numbers in both editions, :data:`attnlab.notes.SECTIONS`), all from the package.

Everything the page needs is in ``web/static/`` (no CDN, nothing remote); ``StaticFiles`` serves
only files inside that folder. The page's teaching text comes from the CLI's one catalogue
(:mod:`attnlab.web.page_text`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, FastAPI, Query
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from attnlab.i18n import LanguageError
from attnlab.notes import SECTIONS
from attnlab.web.page_text import page_catalogue
from attnlab.web.responses import error
from attnlab.web.schemas import ErrorBody

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"


def router(lang: str = "en") -> APIRouter:
    """The two pages (out of the OpenAPI schema) and the page's text; ``lang``: the server's language
    (``attnlab serve --lang`` / ``$ATTNLAB_LANG``), what the page speaks unless it asks for another."""
    api = APIRouter()

    @api.get("/", include_in_schema=False)
    async def index():
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    @api.get("/docs", include_in_schema=False)
    async def docs():
        return FileResponse(STATIC_DIR / "docs.html", media_type="text/html")

    @api.get(
        "/api/messages",
        summary="the page's teaching text in a language (default: the server's)",
        responses={422: {"model": ErrorBody}},
    )
    async def messages(
        lang_: Annotated[
            str | None,
            Query(alias="lang", max_length=16, description="en, zh, … (default: the server's --lang)"),
        ] = None,
    ):
        try:
            return page_catalogue(lang_ or lang)
        except LanguageError as e:
            return error(422, ["query", "lang"], str(e), "value_error")

    @api.get("/api/sections", summary="what the page's “§N” means: the notes' sections and where D2L teaches each")
    async def sections():
        # One row per section of the notes: its topic in English and Chinese, and D2L's section numbers in the
        # Chinese second edition (attention = chapter 10) and the English edition (chapter 11).
        return {"sections": [{"number": s.number, "title": s.title, "title_zh": s.title_zh, "d2l_zh": s.d2l_zh,
                              "d2l_en": s.d2l_en} for s in SECTIONS]}

    return api


def mount_static(app: FastAPI) -> None:
    """``/static/…``: the page's scripts and styles (an ``APIRouter`` cannot carry a mount)."""
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
