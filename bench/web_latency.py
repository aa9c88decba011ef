"""Bounded loopback load test of `attnlab serve`: latency p50/p99, errors, and /health under load.

    python bench/web_latency.py RUN [RUN…] [--requests 200] [--concurrency 8]
    python bench/web_latency.py --url http://127.0.0.1:8000   # an already running server

Without --url it starts `attnlab serve` on a free 127.0.0.1 port and stops it afterwards. It only
ever talks to a loopback address (anything else is refused), sends a fixed number of requests with
a fixed number in flight, and probes /health every 50 ms while translations run: /health must stay
fast because models run in worker threads, never on the event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import socket
import statistics
import subprocess
import sys
import time
from urllib.parse import urlparse

import httpx

SENTENCES = [
    "i'm home .",
    "go .",
    "he's calm .",
    "i lost .",
    "twenty one",
    "three hundred and forty two",
    "we are going to the station together tomorrow morning .",
]


def _loopback_only(url: str) -> str:
    host = urlparse(url).hostname or ""
    try:
        ok = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        sys.exit(f"error: --url {url} is not a loopback address; this benchmark only targets 127.0.0.1")
    return url.rstrip("/")


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


async def run_load(url: str, requests: int, concurrency: int, beam: int) -> dict:
    lat: list[float] = []
    health: list[float] = []
    codes: dict[int, int] = {}
    errors = 0
    sem = asyncio.Semaphore(concurrency)
    done = asyncio.Event()
    limits = httpx.Limits(max_connections=concurrency + 2)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as c:

        async def one(i: int) -> None:
            nonlocal errors
            async with sem:
                t0 = time.perf_counter()
                try:
                    r = await c.post(
                        "/api/translate", json={"text": SENTENCES[i % len(SENTENCES)], "beam_size": beam}
                    )
                    codes[r.status_code] = codes.get(r.status_code, 0) + 1
                    if r.status_code != 200:
                        errors += 1
                except httpx.HTTPError:
                    errors += 1
                lat.append(time.perf_counter() - t0)

        async def probe_health() -> None:
            async with httpx.AsyncClient(base_url=url, timeout=10) as hc:
                while not done.is_set():
                    t0 = time.perf_counter()
                    try:
                        r = await hc.get("/health")
                        if r.status_code == 200:
                            health.append(time.perf_counter() - t0)
                    except httpx.HTTPError:
                        pass
                    await asyncio.sleep(0.05)

        prober = asyncio.create_task(probe_health())
        t_start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(requests)))
        wall = time.perf_counter() - t_start
        done.set()
        await prober
    return {"lat": lat, "health": health, "codes": codes, "errors": errors, "wall": wall}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="*", help="run folders (or NAME=PATH) to serve; omit with --url")
    p.add_argument("--url", help="an already running server on a loopback address")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--beam", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args()
    if not 1 <= a.requests <= 10_000 or not 1 <= a.concurrency <= 64:
        sys.exit("error: --requests must lie in 1..10000 and --concurrency in 1..64 (a bounded test)")
    proc = None
    if a.url:
        url = _loopback_only(a.url)
    else:
        if not a.runs:
            sys.exit("error: give run folders to serve, or --url of a running server")
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "attnlab",
                "serve",
                *a.runs,
                "--port",
                str(port),
                "--workers",
                str(a.workers),
                "--max-pending",
                str(max(a.concurrency, a.workers)),
                "--log-level",
                "warning",
            ]
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit("error: the server did not start")
            time.sleep(0.2)
    try:
        httpx.post(url + "/api/translate", json={"text": "go ."}, timeout=60)  # warm-up
        res = asyncio.run(run_load(url, a.requests, a.concurrency, a.beam))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    lat_ms = [x * 1000 for x in res["lat"]]
    h_ms = [x * 1000 for x in res["health"]]
    print(
        f"{a.requests} requests, {a.concurrency} at a time, beam {a.beam}: {res['wall']:.1f} s, "
        f"{a.requests / res['wall']:.1f} req/s"
    )
    print(
        f"translate latency  p50 {statistics.median(lat_ms):7.1f} ms   p99 {_pct(lat_ms, 99):7.1f} ms   "
        f"max {max(lat_ms):7.1f} ms"
    )
    if h_ms:
        print(
            f"/health under load p50 {statistics.median(h_ms):7.1f} ms   p99 {_pct(h_ms, 99):7.1f} ms   "
            f"({len(h_ms)} probes)"
        )
    print(f"errors: {res['errors']}   status codes: {dict(sorted(res['codes'].items()))}")
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
