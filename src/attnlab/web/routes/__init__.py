"""The API's routes, grouped by what they serve; each module's ``router(state)`` returns an ``APIRouter``.

- :mod:`.runs`: ``GET /health``, ``GET /api/runs``, ``GET /api/probes`` (what is loaded and recorded);
- :mod:`.translate`: ``POST /api/translate`` (a translation and its attention maps);
- :mod:`.page`: ``GET /``, ``GET /docs`` and ``/static/`` (the explorer page, from the package).
"""
