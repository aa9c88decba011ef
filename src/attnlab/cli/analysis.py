"""Subcommands `doctor`, `sweep`, `heads` and `compare` (thin: parse, call the library, print)."""

from __future__ import annotations

from pathlib import Path

from attnlab.cli.common import (
    add_config_args,
    add_deprecated_alias,
    add_device_arg,
    add_run_data_arg,
    add_verbosity_args,
    build_config,
    load_translator,
    show_progress,
)
from attnlab.cli.present import present, stem
from attnlab.config import DATASETS, MODEL_KINDS
from attnlab.errors import AttnlabError
from attnlab.i18n import _
from attnlab.notes import cite

HEADS_SENTENCES = 100  # `heads --sentences`' default: a file name says any other number
COMPARE_SENTENCES = 200  # `compare --sentences`' default


def default_out(run: str | Path, name: str) -> Path:
    """Where a command writes when no ``--save-dir`` is given: a folder inside the run."""
    return Path(run) / "inspect" / name


def cmd_doctor(args) -> int:
    from attnlab.analysis.diagnose import doctor

    # AttnlabError (exit 2) only when the run cannot be read
    present(lambda: doctor.run(args.run), "doctor", save_dir=None, default_dir=None, as_json=args.json)
    return 0  # a diagnosis is a report, not a failure


def cmd_sweep(args) -> int:
    if args.runs_dir is None:
        raise AttnlabError(_("sweep needs --runs-dir DIR, the folder its trial runs and sweep.json go "
                             "into"))
    from attnlab.analysis.experiments import sweep

    axes = sweep.parse_grid(args.grid)
    base = build_config(args, kind=args.model, dataset=args.dataset)
    result = sweep.run(
        base,
        axes,
        Path(args.runs_dir),
        args.max_minutes,
        random_n=args.random or 0,
        seed=args.seed if args.seed is not None else 0,
        progress=show_progress(args),
    )
    print(result.format())
    best = result.trials[result.best]
    print(_("best: {name} ({overrides})").format(
        name=best.name, overrides=" ".join(f"{k}={v}" for k, v in best.overrides.items())))
    for name in ("sweep.json", "sweep.md", "sweep.png", "sweep.svg", "best.toml"):
        print(_("wrote {path}").format(path=result.out_dir / name))
    print(_("train it again with: {command} (--max-minutes or --max-steps change its budget)").format(
        command=result.train_command()))
    return 0


def cmd_heads(args) -> int:
    from attnlab.analysis import heads
    from attnlab.analysis.align import against_gold as A

    folder = A.gold_for_heads(getattr(args, "gold", None))  # a bad folder fails before the long analysis
    gold = A.read_gold(folder) if folder is not None else None

    def analyse():
        report = heads.run(args.run, sentences=args.sentences, which=args.checkpoint, device=args.device or "auto",
                           importance=not args.no_importance, progress=show_progress(args), data=args.data)
        if gold is not None:  # `--gold` / $ATTNLAB_GOLD_DIR: each head's AER against gold alignments (§25)
            A.annotate_heads(report, A.attention_scores(load_translator(args), gold))
        return report

    name = stem("heads", sentences=None if args.sentences == HEADS_SENTENCES else args.sentences,
                importance="no-importance" if args.no_importance else None,
                gold="gold" if gold is not None else None, checkpoint=args.checkpoint)
    present(analyse, name, save_dir=args.save_dir, default_dir=default_out(args.run, "heads"))
    return 0


def cmd_compare(args) -> int:
    from attnlab.analysis.diagnose import compare

    def analyse():
        return compare.run(args.runs, bleu_sentences=args.sentences, which=args.checkpoint,
                           device=args.device or "auto", progress=show_progress(args), data=args.data,
                           cap_s=args.timing_cap)

    name = stem("compare", text=[Path(r).name for r in args.runs],  # the runs compared, by folder name
                sentences=None if args.sentences == COMPARE_SENTENCES else args.sentences,
                checkpoint=args.checkpoint)
    present(analyse, name, save_dir=args.save_dir, default_dir=default_out(args.runs[0], "compare"))
    return 0


def register(sub) -> None:
    """Add `doctor`, `sweep`, `heads` and `compare` to the `attnlab` subparsers ``sub``."""
    for add in (_add_doctor, _add_sweep, _add_heads, _add_compare):
        add(sub)


def _add_doctor(sub) -> None:
    d = sub.add_parser(
        "doctor",
        help=_("diagnose a run's curves: lr too high/low, overfitting, num_steps: notes {cite}").format(cite=cite(10)),
        description=_("Read a run's curves and per-length scores and say what they suggest: lr too high or "
          "too low, overfitting, num_steps too small (notes {cite}). Always exits 0 when the run can be "
          "read.").format(cite=cite(10)),
    )
    d.add_argument("run", metavar="RUN", help=_("run folder"))
    d.add_argument("--json", action="store_true", help=_("print the findings as JSON instead of text"))
    d.set_defaults(func=cmd_doctor)


def _add_sweep(sub) -> None:
    s = sub.add_parser(
        "sweep",
        help=_("a small hyperparameter search (grid or random), time budget per trial"),
        description=_("Train one run per point of a grid (or N random points) into --runs-dir/trial-XX, "
          "each under the same budget, and pick the best by validation BLEU, then loss."),
    )
    s.add_argument("--model", choices=MODEL_KINDS, required=True,
                   help=_("model kind; its preset is every trial's base (a --grid model.kind axis "
                          "changes the kind on that base); a --config file's model.kind must be the "
                          "same"))
    s.add_argument(
        "--dataset", choices=DATASETS, default=None, help=_("fra-eng or numbers (default: the "
                                                            "preset's, fra-eng)")
    )
    s.add_argument(
        "--grid",
        nargs="+",
        required=True,
        metavar="section.key=v1,v2",
        help=_("axes of the grid, e.g. --grid train.lr=1e-3,3e-3 model.num_layers=1,2 (put fixed "
               "overrides before --grid)"),
    )
    s.add_argument(
        "--random", type=int, default=0, metavar="N", help=_("try N random points of the grid instead "
                                                             "of all (0 = all)")
    )
    s.add_argument(
        "--max-minutes",
        type=float,
        default=1.0,
        dest="max_minutes",
        metavar="M",
        help=_("time budget of each trial, in minutes (0 = none: then give --max-steps)"),
    )
    add_deprecated_alias(s, "--minutes-per-trial", "--max-minutes", dest="max_minutes", type=float)
    s.add_argument(
        "--max-steps",
        type=int,
        dest="max_steps",
        metavar="N",
        help=_("also stop each trial after N updates (default: no step limit)"),
    )
    s.add_argument(
        "--seed",
        type=int,
        help=_("seed of the random points (default: 0) and train.seed of every trial (default: the "
               "config's, 42)"),
    )
    s.add_argument("--threads", type=int, help=_("torch threads (default: the config's train.threads: "
                                                 "one per core this process may use)"))
    add_device_arg(s, config_key=True)
    s.add_argument(  # not required=True: argparse would refuse the deprecated --out that sets it too
        "--runs-dir",
        dest="runs_dir",
        metavar="DIR",
        help=_("sweep folder: sweep.json/md/png, best.toml and one run folder per trial (default: "
               "none, required)"),
    )
    add_deprecated_alias(s, "--out", "--runs-dir", dest="runs_dir")
    add_verbosity_args(s)
    add_config_args(s)
    s.set_defaults(func=cmd_sweep)


def _add_heads(sub) -> None:
    h = sub.add_parser(
        "heads",
        help=_("do heads specialise? per-head statistics, importance, and which heads are noise: notes {cite}").format(
            cite=cite("11, 28")),
        description=_("Per-head statistics (distance, previous/next token, <eos>, entropy, alignment) and "
          "importance by masking each head, as a table, JSON and figures, ending with a plain answer: which heads "
          "do what and which are indistinguishable from noise (notes {cite}).").format(cite=cite("11, 28.5")),
    )
    h.add_argument("run", metavar="RUN", help=_("run folder (transformer or decoder-only)"))
    h.add_argument("--sentences", type=int, default=HEADS_SENTENCES, help=_("validation sentences to measure on"))
    h.add_argument("--checkpoint", default="best", help=_("best, last or step-N"))
    h.add_argument(
        "--no-importance",
        action="store_true",
        dest="no_importance",
        help=_("skip masking each head (one decoding pass per head)"),
    )
    add_device_arg(h)
    add_run_data_arg(h)
    h.add_argument(
        "--save-dir", dest="save_dir", metavar="DIR", help=_("folder for heads.md/json and figures "
                                                             "(default: RUN/inspect/heads)")
    )
    add_deprecated_alias(h, "--out", "--save-dir", dest="save_dir")
    add_verbosity_args(h)
    h.add_argument(
        "--gold",
        metavar="DIR",
        help=_("WPT-2003 en-fr gold alignments: add each cross head's AER (default: $ATTNLAB_GOLD_DIR "
               "if set)"),
    )
    h.set_defaults(func=cmd_heads)


def _add_compare(sub) -> None:
    c = sub.add_parser(
        "compare",
        help=_("runs side by side: the notes' comparison table measured, parameters, speed, BLEU by length, "
          "examples: notes {cite}").format(cite=cite(26)),
        description=_("Two or more runs side by side: parameters, decoding speed, BLEU by source length and "
          "examples, and the notes' comparison of Bahdanau and the Transformer with each row measured on the runs "
          "(notes {cite}), as Markdown and figures.").format(cite=cite(26)),
    )
    c.add_argument("runs", nargs="+", metavar="RUN", help=_("two or more run folders"))
    c.add_argument(
        "--sentences",
        type=int,
        default=COMPARE_SENTENCES,
        help=_("validation sentences for speed (and BLEU when a run has no eval-test.json)"),
    )
    c.add_argument("--checkpoint", default="best", help=_("best, last or step-N (for every run)"))
    c.add_argument("--timing-cap", dest="timing_cap", type=float, default=5.0, metavar="SECONDS",
                   help=_("each speed is timed again until its 95 per cent interval is within ±10 per cent, or for at most "
                          "this many seconds"))
    add_device_arg(c)
    add_run_data_arg(c)
    c.add_argument(
        "--save-dir", dest="save_dir", metavar="DIR", help=_("folder for the comparison (default: "
                                                             "RUN_A/inspect/compare)")
    )
    add_deprecated_alias(c, "--out", "--save-dir", dest="save_dir")
    add_verbosity_args(c)
    c.set_defaults(func=cmd_compare)
