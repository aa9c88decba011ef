"""What the fixed-update benchmarks share (``bahdanau_align.py``, ``demo_budget.py``): their common options,
the whole test split a short-data run is scored on, and the loop that appends one JSON line per run.

A run trained for a fixed number of updates on one thread gives the same result however busy the machine
is, so these benchmarks can compare designs and settings on a shared machine; what each run measures is the
calling script's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Iterable
from pathlib import Path

from attnlab.data import corpus, download
from attnlab.device import set_threads


def add_common_args(ap: argparse.ArgumentParser, out: str) -> None:
    """``--seeds --set --out --results --data --test-sentences --report``."""
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="extra overrides, applied last")
    ap.add_argument("--out", type=Path, default=Path(out))
    ap.add_argument("--results", type=Path, default=None, help="JSON lines (default OUT/results.jsonl)")
    ap.add_argument("--data", default=None, help="fra-eng zip, fra.txt or folder (default: $ATTNLAB_DATA_DIR, "
                                                 "then the cache)")
    ap.add_argument("--test-sentences", type=int, default=1000, help="first N distinct test sources (0 = all)")
    ap.add_argument("--report", action="store_true", help="print the table of the results so far and stop")


def whole_test_split(cache: dict, key: tuple, tr):
    """The test split at every length, in ``tr``'s vocabularies (cached under ``key``): a run trained on the
    shortest pairs is scored on the whole split."""
    tkey = ("test", *key)
    if tkey not in cache:
        full = corpus.prepare(dataclasses.replace(tr.cfg.data, max_pairs=0), tokenizers=(tr.src_tok, tr.tgt_tok))
        cache[tkey] = full.splits["test"]
    return cache[tkey]


def run_all(args, jobs: Iterable[tuple], run: Callable[..., dict], line: Callable[[dict], str],
            report: Callable[[Path], str]) -> int:
    """``--report``: print ``report(results)``. Otherwise resolve ``--data``, then for each job of ``jobs``
    call ``run(*job, cache)`` on one thread, append its record to the results and print ``line(record)``."""
    results = args.results or args.out / "results.jsonl"
    if args.report:
        print(report(results))
        return 0
    args.data = str(download.locate_fra_eng(args.data))
    set_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    cache: dict = {}
    for job in jobs:
        record = run(*job, cache)
        with results.open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(line(record), flush=True)
    return 0
