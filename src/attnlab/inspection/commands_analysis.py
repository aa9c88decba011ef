"""Subcommands `doctor`, `sweep`, `heads` and `compare` (thin: parse, call the library, print)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from attnlab.cli_common import add_config_args, build_config
from attnlab.config import DATASETS, MODEL_KINDS


def default_out(run: str | Path, name: str) -> Path:
    """Where a command writes when no ``--out`` is given: a folder inside the run."""
    return Path(run) / "inspect" / name


def cmd_doctor(args) -> int:
    from attnlab.inspection.doctor import diagnose, format_report

    report = diagnose(args.run)  # AttnlabError (exit 2) only when the run cannot be read
    if args.json:
        print(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
    else:
        print(format_report(report))
    return 0  # a diagnosis is a report, not a failure


def cmd_sweep(args) -> int:
    from attnlab.inspection.sweep import format_table, parse_grid, run_sweep

    axes = parse_grid(args.grid)
    base = build_config(args, kind=args.model, dataset=args.dataset)
    result = run_sweep(
        base,
        axes,
        Path(args.out),
        args.minutes_per_trial,
        random_n=args.random or 0,
        seed=args.seed if args.seed is not None else 0,
        progress=not args.quiet,
    )
    print(format_table(result))
    best = result.trials[result.best]
    print(f"best: {best.name} (" + " ".join(f"{k}={v}" for k, v in best.overrides.items()) + ")")
    for name in ("sweep.json", "sweep.md", "sweep.png", "sweep.svg", "best.toml"):
        print(f"wrote {result.out_dir / name}")
    print(
        f"train it longer with: attnlab train --model {base.model.kind} --config {result.out_dir / 'best.toml'} "
        f"--out runs/best"
    )
    return 0


def cmd_heads(args) -> int:
    from attnlab.inspection.heads import analyse_heads, draw_heads, format_table
    from attnlab.io import atomic_write_json, atomic_write_text

    out = Path(args.out) if args.out else default_out(args.run, "heads")
    report = analyse_heads(
        args.run,
        sentences=args.sentences,
        which=args.checkpoint,
        device=args.device or "cpu",
        importance=not args.no_importance,
        log=None if args.quiet else (lambda m: print(m, file=sys.stderr)),
    )
    table = format_table(report)
    print(table)
    atomic_write_text(out / "heads.md", table + "\n")
    atomic_write_json(out / "heads.json", report.to_json())
    for path in [out / "heads.md", out / "heads.json", *draw_heads(report, out)]:
        print(f"wrote {path}")
    return 0


def cmd_compare(args) -> int:
    from attnlab.inspection.compare import compare_runs, format_markdown, write_comparison

    runs = compare_runs(
        args.runs, bleu_sentences=args.sentences, which=args.checkpoint, device=args.device or "cpu"
    )
    out = Path(args.out) if args.out else default_out(args.runs[0], "compare")
    print(format_markdown(runs))
    for path in write_comparison(runs, out):
        print(f"wrote {path}")
    return 0


def register(sub) -> None:
    """Add `doctor`, `sweep`, `heads` and `compare` to the `attnlab` subparsers ``sub``."""
    d = sub.add_parser(
        "doctor", help="diagnose a run's curves: lr too high/low, overfitting, num_steps (notes §10)"
    )
    d.add_argument("run", help="run folder")
    d.add_argument("--json", action="store_true", help="print the findings as JSON")
    d.set_defaults(func=cmd_doctor)

    s = sub.add_parser("sweep", help="a small hyperparameter search (grid or random), time budget per trial")
    s.add_argument("--model", choices=MODEL_KINDS, required=True)
    s.add_argument("--dataset", choices=DATASETS, default=None)
    s.add_argument(
        "--grid",
        nargs="+",
        required=True,
        metavar="section.key=v1,v2",
        help="axes of the grid, e.g. --grid train.lr=1e-3,3e-3 model.num_layers=1,2 "
        "(put fixed overrides before --grid)",
    )
    s.add_argument(
        "--random", type=int, default=0, metavar="N", help="try N random points of the grid instead of all"
    )
    s.add_argument("--minutes-per-trial", type=float, default=1.0, dest="minutes_per_trial")
    s.add_argument(
        "--max-steps", type=int, dest="max_steps", help="also stop each trial after this many steps"
    )
    s.add_argument("--seed", type=int)
    s.add_argument("--threads", type=int)
    s.add_argument("--device")
    s.add_argument("--out", required=True, help="sweep folder (one run folder per trial inside)")
    s.add_argument("--quiet", action="store_true", help="no progress bars")
    add_config_args(s)
    s.set_defaults(func=cmd_sweep)

    h = sub.add_parser(
        "heads", help="do heads specialise? per-head statistics and importance (notes §11, §28)"
    )
    h.add_argument("run", help="run folder (transformer or decoder-only)")
    h.add_argument("--sentences", type=int, default=100, help="validation sentences to measure on")
    h.add_argument("--checkpoint", default="best", help="best, last or step-N")
    h.add_argument(
        "--no-importance",
        action="store_true",
        dest="no_importance",
        help="skip masking each head (one decoding pass per head)",
    )
    h.add_argument("--device")
    h.add_argument("--out", help="output folder (default RUN/inspect/heads)")
    h.add_argument("--quiet", action="store_true")
    h.set_defaults(func=cmd_heads)

    c = sub.add_parser("compare", help="runs side by side: parameters, speed, BLEU by length, examples (§26)")
    c.add_argument("runs", nargs="+", help="two or more run folders")
    c.add_argument(
        "--sentences",
        type=int,
        default=200,
        help="validation sentences for speed (and BLEU when a run has no eval-test.json)",
    )
    c.add_argument("--checkpoint", default="best", help="best, last or step-N")
    c.add_argument("--device")
    c.add_argument("--out", help="output folder (default RUN_A/inspect/compare)")
    c.set_defaults(func=cmd_compare)
