"""Bounded loopback load checks of `attnlab serve`: overload, /health under load, leaks, crossed answers.

    python bench/load.py                      # trains a tiny `numbers` run first (~20 s), then checks it
    python bench/load.py runs/transformer     # an existing run folder
    python bench/load.py --quick --results /tmp/R.md --json /tmp/load.json   # the small variant the tests run

It starts `attnlab serve` itself on a free 127.0.0.1 port (never another address), and stops it at the
end. Every phase is bounded in requests and in seconds (``--max-seconds`` for the whole run):

1. **overload**: 4x the admission limit (``--max-pending``) at once. Pass: every answer is 200 or a
   refusal (429/503), refusals come back fast (p99 < 1 s), no 5xx besides 503, nothing hangs.
2. **/health under load**: ``--max-pending`` long beam-search translations kept in flight while /health
   is polled every 20 ms. Pass: /health p99 < 250 ms (models run in worker threads, not on the event loop).
3. **leaks**: ``--sequential`` requests one after the other. Pass: the server's resident memory grows by at
   most 5 % from the end of the warm-up (first 10 %) to the end, its thread count does not grow, and
   matplotlib is not even loaded in the server (so no figure can leak).
4. **crossed answers**: distinct sentences sent concurrently (admission-limited rounds, greedy and beam 3).
   Pass: each response equals the one the same sentence gets alone.

It prints the figures and writes them under ``## Load`` in bench/RESULTS.md (only that section is
replaced; the file is created if missing). Exit status 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnlab.files import atomic_write_text  # noqa: E402

HOST = "127.0.0.1"  # loopback only: this script never talks to another address
SENTENCES = [
    "twenty one",
    "three hundred and forty two",
    "nine thousand and seven",
    "one hundred and eleven",
    "eighty eight",
    "five hundred",
    "seventy three thousand two hundred and nine",
    "sixteen",
    "four thousand four hundred and forty four",
    "two",
    "six hundred and sixty",
    "ninety nine thousand",
]
LONG = "seven hundred and seventy seven thousand seven hundred and seventy seven " * 3  # long, valid


class Server:
    """`attnlab serve RUN` on a free loopback port, in its own process (whose memory we read in /proc)."""

    def __init__(self, run: Path, workers: int, max_pending: int, deadline: float) -> None:
        with socket.socket() as s:
            s.bind((HOST, 0))
            self.port = s.getsockname()[1]
        cmd = [
            sys.executable,
            "-m",
            "attnlab",
            "serve",
            str(run),
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--checkpoint",
            "last",
            "--workers",
            str(workers),
            "--max-pending",
            str(max_pending),
            "--deadline",
            str(deadline),
            "--log-level",
            "warning",
        ]
        env = {**os.environ, "ATTNLAB_OFFLINE": "1"}
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        deadline_t = time.monotonic() + 120
        while True:
            try:
                if request("GET", self.port, "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit(f"error: `attnlab serve` exited: {self.proc.stderr.read().strip()[-500:]}")
            if time.monotonic() > deadline_t:
                self.stop()
                raise SystemExit("error: `attnlab serve` did not answer /health within 120 s")
            time.sleep(0.2)

    def status(self) -> dict[str, int]:
        """Resident memory (kB) and thread count of the server process, from /proc."""
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "Threads"):
                out[key] = int(value.split()[0])
        return out

    def has_loaded(self, needle: str) -> bool:
        return needle in Path(f"/proc/{self.proc.pid}/maps").read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def request(
    method: str,
    port: int,
    path: str,
    body: dict | None = None,
    timeout: float = 60.0,
    conn: http.client.HTTPConnection | None = None,
) -> tuple[int, dict, float]:
    """One HTTP request to the loopback server: (status, JSON body, seconds)."""
    own = conn is None
    conn = conn or http.client.HTTPConnection(HOST, port, timeout=timeout)
    t0 = time.perf_counter()
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"content-type": "application/json"} if data else {})
        resp = conn.getresponse()
        raw = resp.read()
        elapsed = time.perf_counter() - t0
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {"raw": raw[:200].decode("utf-8", "replace")}
        return resp.status, parsed, elapsed
    finally:
        if own:
            conn.close()


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


# ------------------------------------------------------------------------------------------- phases


def overload(srv: Server, max_pending: int) -> dict:
    n = 4 * max_pending
    barrier = threading.Barrier(n)

    def one(_i: int):
        conn = http.client.HTTPConnection(HOST, srv.port, timeout=120)
        conn.connect()  # connect first, so the requests really arrive together
        barrier.wait(30)
        try:
            return request("POST", srv.port, "/api/translate", {"text": LONG, "beam_size": 4}, conn=conn)
        except OSError as e:  # a timeout is a hang: counted as a failure
            return (0, {"error": str(e)}, float("inf"))
        finally:
            conn.close()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(one, range(n)))
    wall = time.perf_counter() - t0
    codes: dict[int, int] = {}
    for status, _, _ in results:
        codes[status] = codes.get(status, 0) + 1
    refused = [t for s, _, t in results if s in (429, 503)]
    ok = codes.get(200, 0)
    bad = {c: k for c, k in codes.items() if c not in (200, 429, 503)}
    passed = not bad and ok >= 1 and bool(refused) and _pct(refused, 99) < 1.0
    return {
        "requests": n,
        "codes": codes,
        "ok": ok,
        "refused": len(refused),
        "refusal_p99_ms": 1000 * _pct(refused, 99),
        "wall_s": wall,
        "pass": passed,
    }


def health_under_load(srv: Server, max_pending: int, seconds: float) -> dict:
    stop = threading.Event()
    codes: dict[int, int] = {}
    lock = threading.Lock()

    def keep_busy(k: int):
        conn = http.client.HTTPConnection(HOST, srv.port, timeout=120)
        n = 0
        while not stop.is_set():
            n += 1  # a sentence the server has not seen: each request computes (no answer from its cache)
            try:
                status, _, _ = request(
                    "POST", srv.port, "/api/translate", {"text": f"{LONG} {k} {n}", "beam_size": 8}, conn=conn
                )
            except OSError:
                status = 0
                conn.close()
                conn = http.client.HTTPConnection(HOST, srv.port, timeout=120)
            with lock:
                codes[status] = codes.get(status, 0) + 1
        conn.close()

    busy = [threading.Thread(target=keep_busy, args=(k,), daemon=True) for k in range(max_pending)]
    for t in busy:
        t.start()
    time.sleep(0.5)  # let the translations start
    lat, busy_seen = [], 0
    conn = http.client.HTTPConnection(HOST, srv.port, timeout=10)
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        status, body, t = request("GET", srv.port, "/health", conn=conn)
        if status == 200:
            lat.append(t)
            busy_seen = max(busy_seen, int(body.get("busy", 0)))
        time.sleep(0.02)
    conn.close()
    stop.set()
    for t in busy:
        t.join(180)
    p99 = 1000 * _pct(lat, 99)
    bad = {c: k for c, k in codes.items() if c not in (200, 429)}
    return {
        "probes": len(lat),
        "p50_ms": 1000 * _pct(lat, 50),
        "p99_ms": p99,
        "max_ms": 1000 * max(lat),
        "translations": codes,
        "busy_seen": busy_seen,
        "pass": bool(lat) and p99 < 250 and not bad and busy_seen >= 1,
    }


def sequential(srv: Server, n: int) -> dict:
    warm = max(10, n // 10)
    conn = http.client.HTTPConnection(HOST, srv.port, timeout=60)
    codes: dict[int, int] = {}
    before = after = {}
    t0 = time.perf_counter()
    for i in range(n):
        if i == warm:
            before = srv.status()
        status, _, _ = request(
            "POST",
            srv.port,
            "/api/translate",
            {"text": SENTENCES[i % len(SENTENCES)], "beam_size": 1 + i % 3},
            conn=conn,
        )
        codes[status] = codes.get(status, 0) + 1
    wall = time.perf_counter() - t0
    after = srv.status()
    conn.close()
    growth = (after["VmRSS"] - before["VmRSS"]) / before["VmRSS"]
    mpl = srv.has_loaded("matplotlib")
    return {
        "requests": n,
        "warmup": warm,
        "codes": codes,
        "rss_kb_before": before["VmRSS"],
        "rss_kb_after": after["VmRSS"],
        "rss_growth_pct": 100 * growth,
        "threads_before": before["Threads"],
        "threads_after": after["Threads"],
        "matplotlib_loaded": mpl,
        "req_per_s": n / wall,
        "pass": codes == {200: n} and growth <= 0.05 and after["Threads"] <= before["Threads"] and not mpl,
    }


def crossed_answers(srv: Server, max_pending: int) -> dict:
    def key(body: dict) -> tuple:
        return body.get("translation"), tuple(body.get("tgt_tokens", ())), tuple(body.get("src_tokens", ()))

    checked, mismatches, refused = 0, [], 0
    for beam in (1, 3):
        alone = {}
        for s in SENTENCES:
            status, body, _ = request("POST", srv.port, "/api/translate", {"text": s, "beam_size": beam})
            assert status == 200, (status, body)
            alone[s] = key(body)
        todo = [s for _ in range(3) for s in SENTENCES]  # every sentence three times, interleaved
        with ThreadPoolExecutor(max_pending) as pool:
            while todo:
                batch, todo = todo[:max_pending], todo[max_pending:]
                got = list(
                    pool.map(
                        lambda s, b=beam: (
                            s,
                            request("POST", srv.port, "/api/translate", {"text": s, "beam_size": b}),
                        ),
                        batch,
                    )
                )
                for s, (status, body, _) in got:
                    if status == 429:  # a slot not yet released by the previous round: resend later
                        refused += 1
                        todo.append(s)
                        continue
                    checked += 1
                    if status != 200 or key(body) != alone[s]:
                        mismatches.append(
                            {
                                "sentence": s,
                                "beam": beam,
                                "status": status,
                                "got": body.get("translation"),
                                "alone": alone[s][0],
                            }
                        )
    return {
        "checked": checked,
        "resent_after_429": refused,
        "mismatches": mismatches[:5],
        "pass": checked > 0 and not mismatches,
    }


# ------------------------------------------------------------------------------------------ results


def write_section(path: Path, text: str) -> None:
    """Replace (or append) the ``## Load`` section of ``path``, leaving every other section as it is."""
    old = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    section = "## Load\n\n" + text.rstrip("\n") + "\n"
    m = re.search(r"^## Load\n.*?(?=^## |\Z)", old, flags=re.S | re.M)
    if m:
        new = old[: m.start()] + section + ("\n" if old[m.end() :] else "") + old[m.end() :]
    else:
        new = old.rstrip("\n") + "\n\n" + section
    atomic_write_text(path, new)


def report(res: dict, args, run: Path) -> str:
    o, h, s, c = res["overload"], res["health"], res["sequential"], res["crossed"]
    mark = lambda ok: "pass" if ok else "**FAIL**"  # noqa: E731
    commit = (
        subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        or "unknown"
    )
    return (
        "\n".join(
            [
                f"`python bench/load.py{' --quick' if args.quick else ''}` on {time.strftime('%Y-%m-%d')}, commit {commit}, "
                f"{platform.machine()} with {os.cpu_count()} cores; `attnlab serve` on 127.0.0.1 with --workers "
                f"{args.workers} --max-pending {args.max_pending}, run `{run.name}` (tiny `numbers` Transformer unless "
                "given). Figures from one run on this machine.",
                "",
                "| check | figures | criterion | result |",
                "|---|---|---|---|",
                f"| 4x the admission limit at once | {o['requests']} requests: {o['ok']} answered, {o['refused']} refused "
                f"(codes {o['codes']}), refusal p99 {o['refusal_p99_ms']:.0f} ms, all done in {o['wall_s']:.1f} s | "
                f"only 200/429/503, refusals p99 < 1 s, no hang | {mark(o['pass'])} |",
                f"| /health while {args.max_pending} beam-8 translations run | {h['probes']} probes: p50 {h['p50_ms']:.1f} ms, "
                f"p99 {h['p99_ms']:.1f} ms, max {h['max_ms']:.1f} ms (busy up to {h['busy_seen']}) | p99 < 250 ms | "
                f"{mark(h['pass'])} |",
                f"| {s['requests']} sequential requests | RSS {s['rss_kb_before'] / 1024:.1f} -> {s['rss_kb_after'] / 1024:.1f} MiB "
                f"({s['rss_growth_pct']:+.2f} % after {s['warmup']} warm-up), threads {s['threads_before']} -> "
                f"{s['threads_after']}, matplotlib loaded: {s['matplotlib_loaded']}, {s['req_per_s']:.0f} req/s | "
                f"growth <= 5 %, no new threads, no figures | {mark(s['pass'])} |",
                f"| concurrent requests get their own answer | {c['checked']} answers compared with one-at-a-time "
                f"(greedy and beam 3), {len(c['mismatches'])} differ | none differ | {mark(c['pass'])} |",
            ]
        )
        + "\n"
    )


def tiny_run(out: Path) -> Path:
    """A small Transformer trained on the offline `numbers` task: real, distinct translations in ~20 s."""
    from attnlab import config as C
    from attnlab.training.loop import train

    cfg = C.apply_overrides(
        C.preset("transformer"),
        [
            "data.dataset=numbers",
            "data.numbers_size=1000",
            "data.batch_tokens=600",
            "data.num_steps=16",
            "model.num_hiddens=32",
            "model.num_layers=1",
            "model.num_heads=2",
            "model.ffn_num_hiddens=64",
            "train.lr=3e-3",
            "train.warmup_steps=5",
            "train.max_steps=300",
            "train.eval_every=0",
            "train.save_every=0",
            "train.eval_max_sentences=16",
            "train.threads=1",
            "decode.max_len_b=6",
        ],
    )
    train(cfg, out, progress=False)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "run", nargs="?", help="run folder to serve (default: train a tiny one in a temporary folder)"
    )
    p.add_argument("--quick", action="store_true", help="the small variant: fewer requests, shorter phases")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--max-pending", type=int, default=4, dest="max_pending")
    p.add_argument("--sequential", type=int, default=None, help="requests of the leak check (default 2000)")
    p.add_argument("--health-seconds", type=float, default=None, dest="health_seconds")
    p.add_argument(
        "--max-seconds", type=float, default=900, dest="max_seconds", help="bound for the whole run"
    )
    p.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    p.add_argument("--no-write", action="store_true", dest="no_write", help="print only")
    p.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = p.parse_args(argv)
    if args.sequential is None:
        args.sequential = 200 if args.quick else 2000
    if args.health_seconds is None:
        args.health_seconds = 3.0 if args.quick else 10.0
    if not (
        1 <= args.workers <= args.max_pending <= 16
        and 20 <= args.sequential <= 5000
        and 0 < args.health_seconds <= 60
    ):
        p.error(
            "bounded test: 1 <= --workers <= --max-pending <= 16, 20 <= --sequential <= 5000, "
            "0 < --health-seconds <= 60"
        )

    # The whole run is bounded: a watchdog ends it (and the server) if it overruns.
    timer = threading.Timer(args.max_seconds, lambda: os._exit(124))
    timer.daemon = True
    timer.start()
    with tempfile.TemporaryDirectory(prefix="attnlab-load-") as tmp:
        if args.run:
            run = Path(args.run)
        else:
            print("training a tiny numbers run (~20 s) ...", flush=True)
            run = tiny_run(Path(tmp) / "tiny-numbers")
        srv = Server(run, args.workers, args.max_pending, deadline=60.0)
        try:
            request("POST", srv.port, "/api/translate", {"text": "go ."})  # warm-up
            res = {}
            t0 = time.perf_counter()
            res["overload"] = overload(srv, args.max_pending)
            print(f"overload: {res['overload']}", flush=True)
            res["health"] = health_under_load(srv, args.max_pending, args.health_seconds)
            print(f"health: {res['health']}", flush=True)
            res["crossed"] = crossed_answers(srv, args.max_pending)
            print(f"crossed answers: {res['crossed']}", flush=True)
            res["sequential"] = sequential(srv, args.sequential)
            print(f"sequential: {res['sequential']}", flush=True)
            res["seconds"] = time.perf_counter() - t0
            res["server_alive"] = srv.proc.poll() is None
        finally:
            srv.stop()
    timer.cancel()
    text = report(res, args, run)
    print("\n" + text)
    if not args.no_write:
        write_section(args.results, text)
        print(f"wrote the ## Load section of {args.results}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2, default=str))
    ok = res["server_alive"] and all(res[k]["pass"] for k in ("overload", "health", "sequential", "crossed"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
