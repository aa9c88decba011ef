"""Fixtures for the web tests: apps over the session's tiny trained runs."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the web extra (fastapi, uvicorn, httpx) is not installed")


@pytest.fixture(scope="module")
def client(tiny_runs):
    """A TestClient over a tiny Transformer (default) and a tiny Bahdanau run."""
    from fastapi.testclient import TestClient

    from attnlab.web.app import create_app

    app = create_app([f"transformer={tiny_runs('transformer')}", f"bahdanau={tiny_runs('bahdanau')}"])
    with TestClient(app, base_url="http://127.0.0.1") as c:  # a loopback Host (HostGuard)
        yield c
