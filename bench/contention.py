"""A laptop is never idle: the demo's two models beside busy neighbours, on each fixed thread count and on
the adaptive one (attnlab/threads.py), in one invocation.

    python bench/contention.py                   # 100 updates + 4096 sentences, 0/1/2 neighbours, nice 0 and 19
    python bench/contention.py --quick           # a few updates and sentences, 0 and 1 neighbour: it works

For each model (the demo's Bahdanau and Transformer, sized as ``attnlab demo`` sizes them for a probe of
``--peak`` GFLOP/s and ``--minutes``) and each case (``0``, ``1`` or ``2`` busy neighbours: plain busy loops
this script starts at nice 0 or 19 and stops), it times a FIXED number of updates (a fresh model and
optimizer each time, the same batches) and a fixed greedy decode, on each fixed thread count (1 to this
process's CPUs) and adaptive, ``--repeats`` times each in turn (the median is kept). It prints seconds and each time over the best fixed count's for that
case (< 1: the adaptive choice beat every fixed count; 1.00: it matched the best). Timings mean something
only on a machine with nothing else running: the neighbours must be the only load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from attnlab import demo  # noqa: E402
from attnlab.data import corpus  # noqa: E402
from attnlab.data.batching import collate  # noqa: E402
from attnlab.device import cpu_threads, idle_sampler  # noqa: E402
from attnlab.models import build_model  # noqa: E402
from attnlab.threads import ThreadTuner  # noqa: E402
from attnlab.training import distributed as D  # noqa: E402
from attnlab.training.loop import train_step  # noqa: E402
from attnlab.training.optim import make_optimizer  # noqa: E402
from attnlab.translator import decode_many  # noqa: E402

BUSY = "while True: pass"


def neighbours(count: int, nice: int) -> list[subprocess.Popen]:
    """``count`` busy loops at ``nice``; the caller stops them."""
    return [subprocess.Popen([sys.executable, "-c", BUSY], preexec_fn=lambda: os.nice(nice))  # noqa: PLW1509
            for _ in range(count)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def timed(cfg, prepared, batches, sources, threads: int | str) -> tuple[float, float, list[dict]]:
    """Seconds for the fixed updates and the fixed decode on ``threads`` (a count, or ``auto``), and the
    adaptive run's changes."""
    torch.manual_seed(cfg.train.seed)
    most = cpu_threads()
    model = build_model(cfg.model, len(prepared.src_tok), len(prepared.tgt_tok))
    opt = make_optimizer(model, cfg.train)
    tuner = ThreadTuner(most, sense=idle_sampler) if threads == "auto" else None
    if tuner is None:
        torch.set_num_threads(int(threads))
    model.train()
    t0 = time.perf_counter()
    for batch in batches:
        s = tuner.begin() if tuner else 0.0
        train_step(model, opt, batch, 1.0 / batch.num_tgt_tokens, cfg.train.lr, cfg.train, torch.device("cpu"))
        if tuner:
            tuner.end(s, batch.src.numel() + batch.tgt_in.numel())
    t_train = time.perf_counter() - t0
    dtuner = (ThreadTuner(most, window=6, warmup=1, recheck_every=200, unit="batch", sense=idle_sampler)
              if threads == "auto" else None)
    t0 = time.perf_counter()
    decode_many(model, sources, cfg.decode, torch.device("cpu"), beam_size=1, batch_size=32, threads=dtuner)
    t_decode = time.perf_counter() - t0
    changes = [c.to_json() for t in (tuner, dtuner) if t for c in t.changes]
    if tuner and dtuner:
        changes.insert(0, {"free": (tuner.sensed, dtuner.sensed)})
    return t_train, t_decode, changes


def _median_run(runs: list[tuple[float, float, list[dict]]]) -> tuple[float, float, list[dict]]:
    """The median training and decoding seconds of repeated runs, with the changes of the median training."""
    train = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
    return train[0], sorted(r[1] for r in runs)[len(runs) // 2], train[2]


def _spread(runs: list, n: int | str) -> str:
    """The repeats' range for count ``n``, train and decode (empty for one run): how far a median can be trusted."""
    mine = [r for m, r in runs if m == n]
    if len(mine) < 2:
        return ""
    tt, td = sorted(r[0] for r in mine), sorted(r[1] for r in mine)
    return f"  range: train {tt[0]:.2f}-{tt[-1]:.2f} decode {td[0]:.2f}-{td[-1]:.2f}"


def overhead_us(units: int = 20000) -> float:
    """Microseconds the controller adds per unit (its begin and end, with a no-op setter), with a clock
    that moves as a real one does."""
    tuner = ThreadTuner(cpu_threads(), apply=lambda n: None, sense=idle_sampler)
    t0 = time.perf_counter()
    for _ in range(units):
        tuner.end(tuner.begin(), 1.0)
    return (time.perf_counter() - t0) / units * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few updates and sentences, 0 and 1 neighbour, nice 0")
    ap.add_argument("--updates", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=1, help="runs of each count in each case, taking turns; "
                    "the median is printed (single timings beside busy neighbours vary by 10-20 %%)")
    ap.add_argument("--sentences", type=int, default=4096,
                    help="sentences decoded greedily: the validation sources, repeated as needed (about a test "
                    "split; a decode of a second or so varies too much from run to run to judge a 10 %% difference)")
    ap.add_argument("--neighbours", default="0,1,2")
    ap.add_argument("--nice", default="0,19")
    ap.add_argument("--models", default=",".join(demo.DEMO_MODELS))
    ap.add_argument("--peak", type=float, default=100.0, help="the probe's GFLOP/s the demo sizes for")
    ap.add_argument("--minutes", type=float, default=1.5, help="the demo's minutes per model (sizes the models)")
    ap.add_argument("--dataset", default="fra-eng", help="the named corpus the demo trains on")
    ap.add_argument("--data", default=None, help="its file (default: $ATTNLAB_DATA_DIR, the cache; else numbers)")
    args = ap.parse_args()
    if args.quick:
        args.updates, args.sentences, args.neighbours, args.nice = 4, 32, "0,1", "0"
    cases = [(int(k), int(n)) for k in args.neighbours.split(",") for n in args.nice.split(",")
             if int(k) or n == args.nice.split(",")[0]]  # no neighbour: one case, whatever the nice
    counts: list[int | str] = [*range(1, cpu_threads() + 1), "auto"]
    dataset, path = demo._dataset(args.data, args.dataset)
    print(f"# {cpu_threads()} CPUs; {args.updates} updates + {args.sentences} sentences; dataset {dataset}; "
          f"sized for {args.peak:g} GFLOP/s x {args.minutes:g} min", flush=True)
    for kind in args.models.split(","):
        cfg, _why = demo._config(kind, dataset, path, args.minutes, 0, args.peak)
        prepared = corpus.prepare(cfg.data)
        split = prepared.splits["train"]
        plan = D.epoch_batches([len(s) for s in split.src], [len(t) for t in split.tgt], cfg.data.batch_tokens,
                               cfg.data.max_batch_size, cfg.train.seed, 0, 1, None)[: args.updates]
        batches = [collate([split.src[i] for i in b], [split.tgt[i] for i in b], b) for b in plan]
        valid = prepared.splits["valid"].src  # repeated up to --sentences: a decode as long as an evaluate's
        sources = [valid[i % len(valid)] for i in range(args.sentences)]
        for k, nice in cases:
            procs = neighbours(k, nice)
            try:  # the counts take turns, so that a drift in the neighbours' share spreads over all of them
                runs = [(n, timed(cfg, prepared, batches, sources, n)) for _ in range(args.repeats) for n in counts]
            finally:
                stop(procs)
            rows = {n: _median_run([r for m, r in runs if m == n]) for n in counts}
            best_train = min(rows[n][0] for n in counts if n != "auto")
            best_decode = min(rows[n][1] for n in counts if n != "auto")
            most = counts[-2]
            for n, (tt, td, changes) in rows.items():
                moves = " ".join(f"{c['old']}->{c['new']}" for c in changes if "old" in c)
                free = "".join(f"  free cores sensed (train, decode): {c['free']}" for c in changes if "free" in c)
                versus = (f"  all-cores/adaptive: train {rows[most][0] / tt:4.2f}x decode {rows[most][1] / td:4.2f}x"
                          if n == "auto" else "")
                print(f"{kind:<12} neighbours {k} nice {nice:>2}  threads {n!s:>4}: train {tt:7.2f} s "
                      f"({tt / best_train:4.2f}x best fixed)  decode {td:6.2f} s ({td / best_decode:4.2f}x)"
                      + versus + free + (f"  changes: {moves}" if moves else "") + _spread(runs, n), flush=True)
    print(f"# controller overhead: {overhead_us():.1f} us per unit (begin + end)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
