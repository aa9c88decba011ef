"""A GET that computes refuses another site's page: an ``<img src=…/api/alignment>`` on any site used
to make the server force-decode the gold sentences; the page itself, a typed URL and clients that are
not browsers (curl) are still served."""

from __future__ import annotations

import pytest

from attnlab.analysis.align.gold import GOLD_ENV
from attnlab.web import registry
from attnlab.web.routes import alignment as alignment_routes
from tests.analysis.align.test_gold import write_gold

CROSS = [
    {"sec-fetch-site": "cross-site"},
    {"sec-fetch-site": "same-site"},  # another port of this host is another origin
    {"sec-fetch-site": "cross-site", "origin": "http://127.0.0.1"},  # the browser's own word wins
    {"origin": "http://attacker.example"},  # an older browser: no Sec-Fetch-Site, a foreign Origin
    {"origin": "null"},  # a sandboxed frame or a file: page
]
SAME = [
    {},  # curl, scripts
    {"sec-fetch-site": "same-origin", "origin": "http://127.0.0.1"},  # the explorer page's fetch
    {"sec-fetch-site": "none"},  # a URL typed in the address bar
    {"origin": "http://127.0.0.1"},  # an older browser on the page itself
]


@pytest.fixture()
def started(client, tmp_path, monkeypatch):
    """The computing GETs' work, counted (and a gold folder, so that /api/alignment can compute)."""
    monkeypatch.setenv(GOLD_ENV, str(write_gold(tmp_path / "gold", [["twenty", "one"]], [["vingt", "et", "un"]],
                                                  [(1, 1, 1, "S")])))
    calls = []
    job, probes = alignment_routes.alignment_job, registry.ProbeCache.get

    def counted_job(*args):
        calls.append("alignment")
        return job(*args)

    def counted_probes(self, *args):
        calls.append("probes")
        return probes(self, *args)

    monkeypatch.setattr(alignment_routes, "alignment_job", counted_job)
    monkeypatch.setattr(registry.ProbeCache, "get", counted_probes)
    return calls


PATHS = [("/api/alignment", {"run": "transformer", "sentences": 1}), ("/api/probes", {"run": "transformer"})]


@pytest.mark.parametrize(("path", "params"), PATHS, ids=["alignment", "probes"])
@pytest.mark.parametrize("headers", CROSS, ids=lambda h: ",".join(f"{k}={v}" for k, v in h.items()))
def test_a_cross_site_get_is_refused_before_any_work(client, started, path, params, headers):
    r = client.get(path, params=params, headers=headers)
    assert r.status_code == 403, r.text
    (item,) = r.json()["detail"]
    assert item["type"] == "cross_site" and item["loc"][0] == "header" and "\n" not in item["msg"]
    assert "another site" in item["msg"]
    assert started == []


@pytest.mark.parametrize(("path", "params"), PATHS, ids=["alignment", "probes"])
@pytest.mark.parametrize("headers", SAME, ids=lambda h: ",".join(f"{k}={v}" for k, v in h.items()) or "none")
def test_the_page_a_typed_url_and_curl_are_served(client, started, path, params, headers):
    r = client.get(path, params=params, headers=headers)
    assert r.status_code == 200, r.text
    assert started or r.json().get("cached")  # computed here, or served from an earlier answer


def test_the_schema_lists_the_refusal(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert "403" in paths["/api/alignment"]["get"]["responses"]
    assert "403" in paths["/api/probes"]["get"]["responses"]
