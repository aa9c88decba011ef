"""Subcommand ``scaling``: why Transformers scale (notes §28.1; thin: parse, call
:mod:`attnlab.analysis.experiments.scaling`, print). Writes ``scaling.json``, ``scaling.png`` and one run folder
per rung into ``--runs-dir``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from attnlab.cli.common import add_verbosity_args, progress_log, show_progress
from attnlab.config import DATASETS
from attnlab.errors import AttnlabError
from attnlab.i18n import _
from attnlab.notes import cite


def parse_widths(text: str) -> tuple[int, ...]:
    """``"64,128"`` → ``(64, 128)``; one clear line for anything else."""
    try:
        widths = tuple(int(w) for w in text.split(",") if w.strip())
    except ValueError:
        raise AttnlabError(_("--widths {text!r} must be comma-separated integers, e.g. --widths "
                             "64,128,256").format(text=text)) from None
    if not widths:
        raise AttnlabError(_("--widths lists no width; give e.g. --widths 64,128,256"))
    return widths


def parse_budget(text: str) -> float:
    """A FLOP count: ``2e12``, or with a unit suffix ``2T``, ``500G`` (G = 10⁹, T = 10¹², P = 10¹⁵)."""
    units = {"G": 1e9, "T": 1e12, "P": 1e15}
    t = text.strip()
    scale = units.get(t[-1:].upper(), 1.0)
    try:
        value = float(t[:-1] if scale != 1.0 else t) * scale
    except ValueError:
        raise AttnlabError(_("--budget {text!r} must be a FLOP count such as 2e12 or 2T (G, T, P "
                             "suffixes)").format(text=text)) from None
    if not value > 0 or value == float("inf"):
        raise AttnlabError(_("--budget {text!r} must be a positive FLOP count such as 2e12").format(text=text))
    return value


def cmd_scaling(args) -> int:
    import dataclasses

    from attnlab.analysis.experiments import scaling as S

    ladder = S.QUICK if args.quick else S.DEFAULT
    changes = {}
    if args.budget is not None:
        changes["budget_flops"] = parse_budget(args.budget)
    if args.widths is not None:
        widths = parse_widths(args.widths)
        changes["widths"] = {name: widths for name in ladder.widths}
    ladder = dataclasses.replace(ladder, **changes)
    where = S.Where(args.dataset, args.data, args.device, args.threads)
    out = Path(args.runs_dir)
    log = progress_log(args)
    report = S.run(ladder, out, where, log=log, progress=show_progress(args), plan_only=args.plan_only)
    print(json.dumps(report.to_json(), indent=2, ensure_ascii=False) if args.json else report.format())
    if not (args.json or args.plan_only):
        for name in ("scaling.json", "scaling.png"):
            print(_("wrote {path}").format(path=out / name))
        print(f"run folders: {out / 'runs'}/<family>-d<width> (attnlab doctor / evaluate read them)")
    sys.stdout.flush()
    return 0


def register(sub) -> None:
    """Add ``scaling`` to the ``attnlab`` subcommands."""
    s = sub.add_parser(
        "scaling",
        help=_("why Transformers scale: GRU vs Transformer at equal training FLOPs, tokens/s, KV cache: notes "
          "{cite}").format(cite=cite("28.1")),
        description=_("Train a ladder of model sizes of the GRU + Bahdanau model and of the Transformer, every "
          "rung for the same number of counted training FLOPs (torch's FlopCounterMode on its own batches, "
          "turned into train.max_steps), then measure training tokens/s against sentence length and greedy "
          "decoding with and without the KV cache. Prints the estimated time before training. Default: 3 widths "
          "per family, 2e12 FLOPs per rung (--plan-only prints this machine's time estimate without training; "
          "docs/experiments/scaling.md has measured ones); --quick: 2 widths, 2e11."),
    )
    s.add_argument("--runs-dir", default="runs/scaling", dest="runs_dir", metavar="DIR",
                   help=_("folder for scaling.json, scaling.png and the rungs' run folders (must not "
                          "hold a ladder)"))
    s.add_argument("--quick", action="store_true", help=_("the tiny ladder: widths 32,64 and 2e11 "
                                                          "FLOPs per rung"))
    s.add_argument("--budget", metavar="FLOPS",
                   help=_("counted training FLOPs per rung, e.g. 2e12 or 2T (default: 2e12; --quick: "
                          "2e11)"))
    s.add_argument("--widths", metavar="W1,W2,…",
                   help=_("model widths (num_hiddens) of both families, multiples of 4 (default: "
                          "64,128,256; --quick: 32,64)"))
    s.add_argument("--dataset", choices=DATASETS, default=DATASETS[0], help=_("corpus (numbers: offline, "
                                                                            "for tests)"))
    s.add_argument("--data", metavar="PATH",
                   help=_("fra-eng zip, fra.txt or folder (default: $ATTNLAB_DATA_DIR, then the cache)"))
    s.add_argument("--device", default="auto", metavar="DEVICE", help=_("auto, cpu, cuda or cuda:N"))
    s.add_argument("--threads", type=int, default=0, metavar="N",
                   help=_("torch threads for training and the benchmarks (default 0: PyTorch's choice)"))
    s.add_argument("--plan-only", action="store_true", dest="plan_only",
                   help=_("count the FLOPs, print the steps and the time estimate, train nothing, "
                          "write nothing"))
    s.add_argument("--json", action="store_true", help=_("print the report as JSON"))
    add_verbosity_args(s)
    s.set_defaults(func=cmd_scaling)
