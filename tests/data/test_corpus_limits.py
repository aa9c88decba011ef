"""Bounds on what a server or an archive can make attnlab read: bytes downloaded, total download
time, bytes unpacked from a zip member. Every server here is on 127.0.0.1, inside the test."""

from __future__ import annotations

import hashlib
import http.server
import struct
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from attnlab.data import corpus, download
from attnlab.data.corpus import read_pairs
from attnlab.data.download import locate_fra_eng
from attnlab.errors import CorpusError
from tests.data.test_corpus import SAMPLE, make_zip

MiB = 2**20
Route = Callable[[http.server.BaseHTTPRequestHandler, threading.Event], None]


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No $ATTNLAB_DATA_DIR, an empty private cache, downloads allowed."""
    monkeypatch.delenv("ATTNLAB_DATA_DIR", raising=False)
    monkeypatch.delenv("ATTNLAB_DOWNLOAD_TIMEOUT", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("ATTNLAB_OFFLINE", "0")
    return tmp_path


@pytest.fixture
def server(isolated, monkeypatch) -> Iterator[dict[str, Route]]:
    """A local HTTP server that both download URLs point at; the test fills ``routes[path]``.

    Handlers get the server's ``stop`` event and must return once it is set, so the server shuts
    down within a fraction of a second whatever the test did. No proxy: nothing leaves 127.0.0.1.
    """
    routes: dict[str, Route] = {}
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self):  # noqa: N802 (http.server's name)
            route = routes.get(self.path)
            try:
                if route is None:
                    self.send_error(404)
                else:
                    route(self, stop)
            except OSError:  # the client hung up: what a capped or timed-out download does
                pass

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "*")
    url = f"http://127.0.0.1:{httpd.server_port}/fra-eng.zip"
    monkeypatch.setattr(download, "FRA_ENG_URL", url)
    monkeypatch.setattr(download, "FRA_ENG_HTTP_URL", url)
    try:
        yield routes
    finally:
        stop.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _headers(h: http.server.BaseHTTPRequestHandler, length: int | None = None) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "application/zip")
    if length is not None:
        h.send_header("Content-Length", str(length))
    h.end_headers()


def _cache(isolated: Path) -> Path:
    return isolated / "xdg" / "attnlab"


def test_the_shipped_limits():
    """The tests below use small caps; these are the real ones (D2L's zip is 3.4 MB, fra.txt 11.7 MB)."""
    assert download.MAX_DOWNLOAD_BYTES == 64 * MiB
    assert corpus.MAX_MEMBER_BYTES == 128 * MiB
    assert download.DOWNLOAD_DEADLINE_S == 120


def test_download_from_a_local_server_is_verified_and_kept(isolated, server, monkeypatch):
    payload = make_zip(isolated / "remote.zip", SAMPLE).read_bytes()
    server["/fra-eng.zip"] = lambda h, stop: (_headers(h, len(payload)), h.wfile.write(payload))
    monkeypatch.setattr(download, "FRA_ENG_SHA256", hashlib.sha256(payload).hexdigest())
    path = locate_fra_eng(None)
    assert path == _cache(isolated) / "fra-eng.zip" and path.read_bytes() == payload
    assert read_pairs(path)[0] == ("Go.", "Va !")


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "no-content-length"])
def test_download_stops_past_the_size_cap(isolated, server, monkeypatch, declared):
    """A server sending more than the cap (announced or not) gets a one-line CorpusError, nothing kept."""
    monkeypatch.setattr(download, "MAX_DOWNLOAD_BYTES", 1 * MiB)
    total = 8 * MiB  # what the server would send: bounded, so the test ends on old code too

    def flood(h, stop):
        _headers(h, total if declared else None)
        block = b"\0" * 65536
        for _ in range(total // len(block)):
            if stop.is_set():
                return
            h.wfile.write(block)

    server["/fra-eng.zip"] = flood
    with pytest.raises(CorpusError) as err:
        locate_fra_eng(None)
    msg = str(err.value)
    assert "\n" not in msg and "more than the 1 MiB limit" in msg, msg
    assert not list(_cache(isolated).glob("*"))  # nothing kept, no temporary file left


@pytest.mark.parametrize("where", ["body", "headers"])
def test_a_trickling_server_is_given_up_on_at_the_total_deadline(isolated, server, monkeypatch, where):
    """A byte every 50 ms never trips a 15 s per-read timeout; the total deadline stops it."""
    monkeypatch.setenv("ATTNLAB_DOWNLOAD_TIMEOUT", "1")

    def trickle(h, stop):
        if where == "body":
            _headers(h)
        else:
            h.wfile.write(b"HTTP/1.0 200 OK\r\n")
        t0 = time.monotonic()
        while not stop.is_set() and time.monotonic() - t0 < 10:  # ends by itself too
            h.wfile.write(b"x" if where == "body" else b"X-Pad: 1\r\n")
            h.wfile.flush()
            time.sleep(0.05)

    server["/fra-eng.zip"] = trickle
    t0 = time.monotonic()
    with pytest.raises(CorpusError) as err:
        locate_fra_eng(None)
    elapsed = time.monotonic() - t0
    msg = str(err.value)
    assert "\n" not in msg and "not done within 1 s" in msg and "ATTNLAB_DOWNLOAD_TIMEOUT" in msg, msg
    assert elapsed < 4, f"gave up after {elapsed:.1f} s, not at the 1 s deadline"
    assert not list(_cache(isolated).glob("*"))


def test_the_download_deadline_comes_from_the_environment(isolated, monkeypatch):
    assert download.download_deadline() == 120
    monkeypatch.setenv("ATTNLAB_DOWNLOAD_TIMEOUT", "2.5")
    assert download.download_deadline() == 2.5
    for bad in ("soon", "0", "-1", "inf", "nan"):
        monkeypatch.setenv("ATTNLAB_DOWNLOAD_TIMEOUT", bad)
        with pytest.raises(CorpusError, match="ATTNLAB_DOWNLOAD_TIMEOUT") as err:
            locate_fra_eng(None)
        assert "\n" not in str(err.value)


def test_https_is_tried_first_and_plain_http_only_when_it_fails(isolated, monkeypatch):
    requested: list[str] = []

    def refuse(url, timeout):
        requested.append(url)
        raise download.urllib.error.URLError("no network")

    monkeypatch.setattr(download.urllib.request, "urlopen", refuse)
    with pytest.raises(CorpusError, match="no network") as err:
        locate_fra_eng(None)
    assert "\n" not in str(err.value)
    assert [u.split("://")[0] for u in requested] == ["https", "http"]
    assert requested[0].split("://")[1] == requested[1].split("://")[1] == "d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"


# ----------------------------------------------------------------------------------- zip bombs


def _bomb(path: Path, size: int) -> Path:
    """A zip whose fra-eng/fra.txt is ``size`` zero bytes (a few KB compressed)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("fra-eng/fra.txt", "w") as f:
            block = b"\0" * MiB
            for _ in range(size // MiB):
                f.write(block)
    return path


def _lie_about_size(path: Path, size: int) -> Path:
    """Rewrite the member's uncompressed size in its local header and central directory entry."""
    data = bytearray(path.read_bytes())
    local = data.index(b"PK\x03\x04")
    central = data.index(b"PK\x01\x02")
    struct.pack_into("<I", data, local + 22, size)
    struct.pack_into("<I", data, central + 24, size)
    path.write_bytes(bytes(data))
    return path


def test_a_zip_member_declared_larger_than_the_cap_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "MAX_MEMBER_BYTES", 1 * MiB)
    bomb = _bomb(tmp_path / "bomb.zip", 4 * MiB)
    assert bomb.stat().st_size < 64 * 1024
    with pytest.raises(CorpusError) as err:
        read_pairs(bomb)
    msg = str(err.value)
    assert "\n" not in msg and "bomb.zip:fra-eng/fra.txt" in msg and "more than the 1 MiB" in msg, msg


def test_a_zip_member_whose_header_understates_its_size_is_refused(tmp_path, monkeypatch):
    """The declared size passes the cap, the real one does not: refused (counted, or by the CRC)."""
    monkeypatch.setattr(corpus, "MAX_MEMBER_BYTES", 1 * MiB)
    liar = _lie_about_size(_bomb(tmp_path / "liar.zip", 4 * MiB), 1000)
    with pytest.raises(CorpusError) as err:
        read_pairs(liar)
    msg = str(err.value)
    assert "\n" not in msg and "liar.zip" in msg, msg


def test_a_member_just_under_the_cap_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "MAX_MEMBER_BYTES", len(SAMPLE.encode()))
    assert read_pairs(make_zip(tmp_path / "ok.zip", SAMPLE))[0] == ("Go.", "Va !")
    monkeypatch.setattr(corpus, "MAX_MEMBER_BYTES", len(SAMPLE.encode()) - 1)
    with pytest.raises(CorpusError, match="more than the"):
        read_pairs(tmp_path / "ok.zip")


# ----------------------------------------------------------------------------------- plain text


def test_a_plain_text_corpus_over_the_cap_is_refused(tmp_path, monkeypatch):
    """A plain fra.txt is capped as a zip member is (it was read whole into memory, whatever its size)."""
    monkeypatch.setattr(corpus, "MAX_MEMBER_BYTES", 1024)
    big = tmp_path / "fra.txt"
    big.write_text("Go.\tVa !\n" * 200, encoding="utf-8")  # 1,800 bytes
    with pytest.raises(CorpusError) as err:
        read_pairs(big)
    msg = str(err.value)
    assert "\n" not in msg and str(big) in msg and "holds 1800 bytes, more than the" in msg, msg
    with pytest.raises(CorpusError, match="more than the"):
        read_pairs(tmp_path)  # found in a folder: the same cap
    small = tmp_path / "small" / "fra.txt"
    small.parent.mkdir()
    small.write_text("Go.\tVa !\n" * 100, encoding="utf-8")  # 900 bytes: read
    assert len(read_pairs(small)) == 100


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_stream_without_a_size_is_counted_as_it_is_read(monkeypatch):
    """/dev/zero has no size to check first: the bytes read are counted and reading stops past the cap."""
    monkeypatch.setattr(corpus, "MAX_MEMBER_BYTES", 1 * MiB)
    with pytest.raises(CorpusError, match="stopped reading") as err:
        read_pairs("/dev/zero")
    assert "\n" not in str(err.value)
