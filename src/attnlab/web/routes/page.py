"""``GET /``, ``GET /docs`` and ``/static/``: the explorer page and the API reference, from the package.

Everything the page needs is in ``web/static/`` (no CDN, nothing remote); ``StaticFiles`` serves
only files inside that folder.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"


def router() -> APIRouter:
    """The two pages; they stay out of the OpenAPI schema."""
    api = APIRouter()

    @api.get("/", include_in_schema=False)
    async def index():
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    @api.get("/docs", include_in_schema=False)
    async def docs():
        return FileResponse(STATIC_DIR / "docs.html", media_type="text/html")

    return api


def mount_static(app: FastAPI) -> None:
    """``/static/…``: the page's scripts and styles (an ``APIRouter`` cannot carry a mount)."""
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
