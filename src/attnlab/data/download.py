"""Finding a named corpus (its record: :mod:`attnlab.data.pairs`), and fetching it when it has a download and is
nowhere on the machine: Tatoeba fra-eng from D2L's copy; cmn-eng has none and is only found.

Where a corpus is looked for (first hit wins), see :func:`locate` (fra-eng's: :func:`locate_fra_eng`): ``--data PATH`` (a zip, a
``fra.txt`` or a folder holding one), ``$ATTNLAB_DATA_DIR``, the user cache ``$XDG_CACHE_HOME/attnlab``
(default ``~/.cache/attnlab``), and finally a download into that cache, kept only if its sha256 matches.
``ATTNLAB_OFFLINE=1`` forbids the download. A download stops past :data:`MAX_DOWNLOAD_BYTES` or its total
deadline (``$ATTNLAB_DOWNLOAD_TIMEOUT`` seconds, default 120, on top of the per-operation socket timeout).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from attnlab.errors import CorpusError
from attnlab.files import atomic_write_bytes, file_kind, mib
from attnlab.i18n import _

FRA_ENG_URL = "https://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"  # tried first
FRA_ENG_HTTP_URL = "http://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip"  # D2L's own link; only if HTTPS fails
FRA_ENG_SHA256 = "b0ace3af111f771f8bfadb44b83fbdb24ef5bc252d014f080fe4e3e8f0b3650b"
FRA_ENG_ZIP = "fra-eng.zip"
CANDIDATES = ("fra-eng.zip", "fra.txt", "fra-eng/fra.txt")  # looked for, in this order, inside a folder
_DOWNLOAD_TIMEOUT_S = 15.0  # per socket operation (connect, one read)
DOWNLOAD_DEADLINE_S = 120.0  # the whole download, both URLs together; $ATTNLAB_DOWNLOAD_TIMEOUT overrides
MAX_DOWNLOAD_BYTES = 64 * 2**20  # the zip is 3.4 MB
CHUNK = 1 << 16

__all__ = ["CorpusError", "FRA_ENG_HTTP_URL", "FRA_ENG_SHA256", "FRA_ENG_URL", "MAX_DOWNLOAD_BYTES", "cache_dir",
           "download_deadline", "find_in", "locate", "locate_fra_eng"]


# ----------------------------------------------------------------------------------------------
# Finding (and fetching) fra-eng


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/attnlab``, else ``~/.cache/attnlab`` (where downloads are kept)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "attnlab"


def find_in(folder: Path, candidates: tuple[str, ...] = CANDIDATES) -> Path | None:
    """The first of ``candidates`` (names inside ``folder``) that is a file, else None."""
    for name in candidates:
        p = folder / name
        if p.is_file():
            return p
    return None


def download_deadline() -> float:
    """Seconds a whole download may take: ``$ATTNLAB_DOWNLOAD_TIMEOUT``, else :data:`DOWNLOAD_DEADLINE_S`.

    Raises :class:`CorpusError` for a value that is not a positive number.
    """
    raw = os.environ.get("ATTNLAB_DOWNLOAD_TIMEOUT", "").strip()
    if not raw:
        return DOWNLOAD_DEADLINE_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise CorpusError(
            _("ATTNLAB_DOWNLOAD_TIMEOUT={raw!r} is not a positive number of seconds; set e.g. "
              "ATTNLAB_DOWNLOAD_TIMEOUT=300 or unset it (default {default:g})").format(raw=raw, default=DOWNLOAD_DEADLINE_S)
        )
    return seconds


class _FetchFailed(Exception):
    """Why one URL gave no usable bytes (one clause of the final error); ``final``: no other URL can help."""

    def __init__(self, reason: str, final: bool = False) -> None:
        super().__init__(reason)
        self.final = final


_LATE = "past the deadline"


def _fetch(url: str, cap: int, deadline: float, cancel: threading.Event) -> bytes:
    """The body at ``url``: at most ``cap`` bytes, read before ``deadline`` (``time.monotonic()``)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise _FetchFailed(_LATE, final=True)
    try:
        with urllib.request.urlopen(url, timeout=min(_DOWNLOAD_TIMEOUT_S, left)) as resp:
            headers = getattr(resp, "headers", None)
            declared = (headers.get("Content-Length") or "").strip() if headers is not None else ""
            if declared.isdigit() and int(declared) > cap:
                raise _FetchFailed(
                    f"the server announces {int(declared)} bytes, more than the {mib(cap)} limit", final=True
                )
            read = getattr(resp, "read1", resp.read)  # read1: whatever has arrived, so a trickle meets the deadline
            buf = bytearray()
            while True:
                if cancel.is_set() or time.monotonic() > deadline:
                    raise _FetchFailed(_LATE, final=True)
                chunk = read(CHUNK)
                if not chunk:
                    return bytes(buf)
                buf += chunk
                if len(buf) > cap:
                    raise _FetchFailed(f"more than the {mib(cap)} limit (stopped reading)", final=True)
    except _FetchFailed:
        raise
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
        raise _FetchFailed(str(getattr(e, "reason", None) or e) or type(e).__name__) from None


def _fetch_within(url: str, cap: int, deadline: float) -> bytes:
    """:func:`_fetch` in a daemon thread, given up on at ``deadline`` however slowly the bytes come.

    A socket timeout bounds one operation, not the sum: a server sending a byte every few seconds
    (or a slow TLS handshake, or trickled headers) would otherwise hold the caller for ever.
    """
    box: dict[str, Any] = {}
    cancel = threading.Event()

    def work() -> None:
        try:
            box["data"] = _fetch(url, cap, deadline, cancel)
        except BaseException as e:  # handed to the caller
            box["error"] = e

    worker = threading.Thread(target=work, name="attnlab-download", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        cancel.set()  # it stops at its next chunk, or when its socket times out; nobody waits for it
        raise _FetchFailed(_LATE, final=True)
    if "error" in box:
        raise box["error"]
    return box["data"]


def _download(dest: Path, urls: tuple[str, ...], sha256: str) -> str | None:
    """Fetch the first of ``urls`` that delivers to ``dest`` if its sha256 is ``sha256``; None on success,
    else why not (one line).

    At most :data:`MAX_DOWNLOAD_BYTES`, within :func:`download_deadline` seconds in all. fra-eng's plain HTTP
    is tried only when HTTPS fails to deliver, and is as safe: nothing is kept unless its sha256 matches.
    """
    urls = list(dict.fromkeys(urls))
    total = download_deadline()
    deadline = time.monotonic() + total
    why: list[str] = []
    for url in urls:
        try:
            data = _fetch_within(url, MAX_DOWNLOAD_BYTES, deadline)
        except _FetchFailed as e:
            reason = str(e)
            if reason == _LATE:
                reason = f"not done within {total:g} s; a slow link needs a larger ATTNLAB_DOWNLOAD_TIMEOUT"
            why.append(f"download from {url} failed ({reason})")
            if e.final:
                break  # the size cap and the deadline hold for every URL
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha256:
            why.append(f"download from {url} has sha256 {digest[:12]}..., expected {sha256[:12]}... (not kept)")
            break  # the source answered, with other bytes: the same file over HTTP would not match either
        try:
            atomic_write_bytes(dest, data)  # a crash mid-write never leaves a truncated zip in the cache
        except OSError as e:
            return f"cannot write {dest} ({e.strerror or e})"
        return None
    return "; ".join(why)  # never empty: the first URL always gets an entry


def locate_fra_eng(data_path: str | os.PathLike[str] | None = None) -> Path:
    """:func:`locate` for fra-eng: a zip or ``fra.txt``, fetched from :data:`FRA_ENG_URL` (then
    :data:`FRA_ENG_HTTP_URL`) into the cache if needed, kept only if its sha256 is :data:`FRA_ENG_SHA256`
    (module attributes read at call time, so tests can point them elsewhere)."""
    return locate("fra-eng", CANDIDATES, (FRA_ENG_URL, FRA_ENG_HTTP_URL), FRA_ENG_SHA256, data_path)


def locate(name: str, candidates: tuple[str, ...], urls: tuple[str, ...], sha256: str,
           data_path: str | os.PathLike[str] | None = None) -> Path:
    """Return the path of corpus ``name``'s file, fetching it into the cache if it has ``urls``.

    ``candidates``: what is looked for inside a folder, in order (its zip first, e.g. ``fra-eng.zip``, then its
    text file, ``fra.txt``, then ``fra-eng/fra.txt``). Looks, in order, at ``data_path`` (a file, or a folder
    holding a candidate), ``$ATTNLAB_DATA_DIR`` (same rules), the cache folder (:func:`cache_dir`), then
    downloads ``urls`` into the cache and keeps the zip only if its sha256 is ``sha256`` (skipped when
    ``ATTNLAB_OFFLINE=1`` or there is no URL).

    Raises :class:`CorpusError` if ``data_path`` names something that does not exist (a typo must
    not silently fall back to another copy), or, when every place fails, with one line naming all
    places looked and the fix.
    """
    zip_name, file_name = candidates[0], candidates[1]
    looked: list[str] = []
    if data_path is not None and str(data_path) != "":
        p = Path(data_path).expanduser()
        if p.is_file():
            return p
        kind = file_kind(p)
        if kind is not None:  # /dev/null, a FIFO: there, but not a corpus (and not "missing")
            raise CorpusError(_("data path {p} is {kind}, not a file; a corpus is read again by later commands "
                                "and checked by its sha256: save it to a file and pass --data that file").format(
                                    p=p, kind=kind))
        if not p.exists():
            raise CorpusError(
                _("data path {p} does not exist; pass --data a {zip}, a {file} or a folder with "
                  "one").format(p=p, zip=zip_name, file=file_name)
            )
        found = find_in(p, candidates)
        if found:
            return found
        looked.append(f"{p} (--data)")
    env = os.environ.get("ATTNLAB_DATA_DIR")
    if env:
        p = Path(env).expanduser()
        found = p if p.is_file() else find_in(p, candidates)
        if found:
            return found
        looked.append(f"{p} ($ATTNLAB_DATA_DIR)")
    else:
        looked.append(_("$ATTNLAB_DATA_DIR (unset)"))
    cache = cache_dir()
    found = find_in(cache, candidates)
    if found:
        return found
    looked.append(_("{cache} (cache)").format(cache=cache))
    if not urls:
        raise CorpusError(
            _("{name} corpus not found; looked in: {looked}. It has no download: put its {zip} (or {file}) in "
              "{cache}, or set ATTNLAB_DATA_DIR to its folder, or pass --data PATH").format(
                name=name, looked="; ".join(looked), zip=zip_name, file=file_name, cache=cache))
    if os.environ.get("ATTNLAB_OFFLINE", "") not in ("", "0"):
        looked.append(_("no download (ATTNLAB_OFFLINE is set)"))
    else:
        why = _download(cache / zip_name, urls, sha256)
        if why is None:
            return cache / zip_name
        looked.append(why)
    raise CorpusError(
        _("{name} corpus not found; looked in: {looked}. Fix: pass --data PATH (a {zip} or {file}, e.g. from "
          "{url}) or set ATTNLAB_DATA_DIR to its folder").format(name=name, looked="; ".join(looked), zip=zip_name,
                                                                  file=file_name, url=urls[0])
    )
