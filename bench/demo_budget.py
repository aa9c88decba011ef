"""The demo's two models on a slow machine, at fixed update counts: which sized config gets the notes' four
sentences right, and whose attention map of ``i'm home .`` forms, over seeds. ``--as train --minutes 12``
does the same for the config ``attnlab train`` sizes for a 12-minute budget (the tiers of training/sizing.py).

    python bench/demo_budget.py --model transformer --updates 700,420 --seeds 1,2,3
    python bench/demo_budget.py --model bahdanau --updates 990 --set model.attention_query=current
    python bench/demo_budget.py --as train --minutes 12 --updates 1232 --seeds 1,2 --set train.lr=0.0025
    python bench/demo_budget.py --report

Each run builds exactly the config ``attnlab demo`` builds on a machine whose probe reads ``--peak`` GFLOP/s
(``demo._config``: the tier, the slow path's width or shortest pairs, the demo's validations), then trains it
for a FIXED number of updates (the schedule planned on them) on one thread, so that load on a shared machine
changes nothing. The update counts stand for what the demo's 1.5 minutes buy under the quota
(``slow_machine.sh``), measured by running the demo there (bench/RESULTS.md, ``## Slow machine under a CPU
quota``). What is scored is what the demo shows: the ``best`` checkpoint's translations of the notes' four
sentences (the demo's ``ACCEPTED``), the one alignment verdict (evaluation/alignment.py) on its map of
``i'm home .``, and greedy test BLEU on the first ``--test-sentences`` distinct test sources.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from _fixed_updates import add_common_args, run_all, whole_test_split  # noqa: E402

from attnlab import config as C  # noqa: E402
from attnlab import demo  # noqa: E402
from attnlab.data import corpus  # noqa: E402
from attnlab.evaluation.alignment import check_result  # noqa: E402
from attnlab.evaluation.evaluate import evaluate_split, is_right, notes_examples  # noqa: E402
from attnlab.training import sizing  # noqa: E402
from attnlab.training.loop import train  # noqa: E402
from attnlab.translator import Translator  # noqa: E402

SENTENCE = "i'm home ."


def sized_config(kind: str, args) -> C.Config:
    """The config ``attnlab demo`` (``--as demo``) or ``attnlab train --model KIND --max-minutes M``
    (``--as train``) builds on a machine whose probe reads ``--peak``, for ``--minutes``."""
    if args.as_ == "demo":
        return demo._config(kind, "fra-eng", args.data, args.minutes, 1, args.peak)[0]
    cfg = C.apply_overrides(C.preset(kind), [f"data.data_path={args.data}", f"train.max_minutes={args.minutes}",
                                              "train.threads=1"])
    return sizing.resolve(cfg, frozenset(), peak=args.peak)[0]


def run_one(kind: str, updates: int, seed: int, extra: list[str], args, cache: dict) -> dict:
    cfg = sized_config(kind, args)
    overrides = ["train.max_minutes=0", f"train.max_steps={updates}", f"train.seed={seed}", *extra]
    cfg = C.apply_overrides(cfg, overrides)
    tag = "-".join([args.as_, f"{args.minutes:g}min", kind, str(updates), *[e.replace("=", "_").replace("/", "_") for e in extra], f"s{seed}"])
    run = args.out / tag
    key = (cfg.data.tokenizer, cfg.data.min_freq, cfg.data.bpe_vocab_size, cfg.data.max_pairs)
    if key not in cache:
        cache[key] = corpus.prepare(cfg.data)
    t0 = time.time()
    res = train(cfg, run, progress=False, prepared=cache[key])
    train_s = time.time() - t0
    tr = Translator.from_run(run, which="best")  # what the demo shows
    test = whole_test_split(cache, key, tr)
    examples = notes_examples(tr)
    res_map = tr.attention(SENTENCE)
    verdict = check_result(res_map)
    scores = evaluate_split(tr, test, beam_size=1, max_sentences=args.test_sentences)
    m = tr.cfg.model
    return {"as": args.as_, "minutes": args.minutes, "model": kind, "updates": res.step, "seed": seed, "extra": extra, "peak": args.peak,
            "train_s": round(train_s, 1), "size": tr.cfg.train.size, "d": m.num_hiddens,
            "max_pairs": tr.cfg.data.max_pairs, "lr": tr.cfg.train.lr,
            "notes_right": sum(is_right(e["source"], e["translation"]) for e in examples),
            "notes": {e["source"]: e["translation"] for e in examples},
            "translation": res_map.translation,
            "agree": f"{verdict.agree}/{verdict.judged}" if verdict else "-",
            "formed": bool(verdict and verdict.formed),
            "test_bleu": scores["bleu"], "test_chrf": scores["chrf"]}


def report(path: Path) -> str:
    rows: dict[tuple, dict] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        rows[(r.get("as", "demo"), r.get("minutes", 1.5), r["model"], r["updates"], tuple(r["extra"]), r["seed"])] = r
    groups: dict[tuple, list[dict]] = {}
    for (as_, minutes, kind, updates, extra, _seed), r in sorted(rows.items()):
        groups.setdefault((as_, minutes, kind, updates, extra), []).append(r)
    out = ["| sized as | model | updates | overrides | seeds | notes' right per seed | map formed | rows on the table | "
           "test BLEU (mean) |", "|---|---|---|---|---|---|---|---|---|"]
    for (as_, minutes, kind, updates, extra), rs in groups.items():
        out.append(f"| {as_} {minutes:g} min | {kind} | {updates} | {' '.join(extra) or '(as it ships)'} | "
                   f"{','.join(str(r['seed']) for r in rs)} | {' '.join(str(r['notes_right']) for r in rs)} | "
                   f"{sum(r['formed'] for r in rs)}/{len(rs)} | {' '.join(r['agree'] for r in rs)} | "
                   f"{sum(r['test_bleu'] for r in rs) / len(rs):.1f} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="transformer", help="comma-separated: bahdanau, transformer")
    ap.add_argument("--updates", default="700", help="comma-separated update counts")
    ap.add_argument("--peak", type=float, default=64.0, help="the probe the config is sized for (GFLOP/s)")
    ap.add_argument("--as", dest="as_", choices=("demo", "train"), default="demo",
                    help="the config of `attnlab demo` or of `attnlab train --max-minutes M` (default: demo)")
    ap.add_argument("--minutes", type=float, default=1.5, help="the budget the config is sized for (default 1.5)")
    add_common_args(ap, "/tmp/demo_budget")
    args = ap.parse_args()
    jobs = [(kind, int(updates), int(seed), args.set, args) for kind in args.model.split(",")
            for updates in args.updates.split(",") for seed in args.seeds.split(",")]

    def line(r: dict) -> str:
        return (f"{r['model']} {r['updates']} {' '.join(r['extra'])} seed {r['seed']}: {r['train_s']:.0f} s | "
                f"notes {r['notes_right']}/4 {r['notes']} | {r['translation']} map {r['agree']} | "
                f"BLEU {r['test_bleu']:.1f}")

    return run_all(args, jobs, run_one, line, report)


if __name__ == "__main__":
    raise SystemExit(main())
