"""Subcommand ``align``: cross-attention against gold word alignments (notes §25; thin: parse, call
:func:`attnlab.analysis.align.against_gold.run`, print the report's ``format()`` or ``to_json()``). Writes
``align.json`` and ``align.png`` (the report's ``figure()``) to ``--save-dir`` (default ``RUN/inspect/align``)."""

from __future__ import annotations

import sys
from pathlib import Path

from attnlab.cli.common import add_device_arg, load_translator
from attnlab.cli.present import present
from attnlab.errors import AttnlabError
from attnlab.i18n import _
from attnlab.notes import cite

#: the link methods (attnlab.analysis.align.extract.METHODS, written here so --help imports no torch)
A_METHODS = ("argmax", "intersect", "union", "grow-diag", "grow-diag-final-and")


def cmd_align(args) -> int:
    from attnlab.analysis.align.against_gold import run
    from attnlab.analysis.align.extract import Extraction
    from attnlab.analysis.align.gold import gold_dir, read_gold

    _check_numbers(args)
    ex = Extraction(args.links, args.threshold, args.null)
    gold = read_gold(gold_dir(args.gold), args.split)  # a missing gold folder fails before the model loads
    tr = load_translator(args)
    reverse = load_translator(args, run=args.reverse, which="best") if args.reverse else None

    def analyse():
        report = run(
            tr,
            gold,
            contract=not args.no_contractions,
            ex=ex,
            top_k=args.top_k,
            saliency=not args.no_saliency,
            ibm=not args.no_ibm,
            ibm_pairs=args.ibm_pairs,
            ibm_iterations=args.ibm_iterations,
            ibm_method=args.ibm_links,
            ibm_null=not args.ibm_no_null,
            data_path=args.data,
            adapt_epochs=args.adapt,
            adapt_lr=args.adapt_lr,
            teach_epochs=args.teach,
            teach_weight=args.teach_weight,
            reverse=reverse,
            seed=args.seed,
        )
        for line in report.warnings:
            print(f"warning: {line}", file=sys.stderr)
        return report

    present(analyse, "align", save_dir=args.save_dir, default_dir=Path(args.run) / "inspect" / "align",
            files=("json",), formats=("png",), as_json=args.json)
    return 0


def _check_numbers(args) -> None:
    """The numeric options' ranges, checked before anything is read (one line naming the option)."""
    if args.adapt < 0 or not args.adapt_lr > 0:
        raise AttnlabError(_("--adapt {adapt} must be >= 0 epochs and --adapt-lr {adapt_lr} > 0").format(adapt=args.adapt, adapt_lr=args.adapt_lr))
    if args.teach < 0 or not args.teach_weight > 0:
        raise AttnlabError(_("--teach {teach} must be >= 0 epochs and --teach-weight {teach_weight} > 0").format(teach=args.teach, teach_weight=args.teach_weight))
    if args.ibm_pairs < 0 or args.ibm_iterations < 1 or args.top_k < 0:
        raise AttnlabError(
            _("--ibm-pairs {ibm_pairs} and --top-k {top_k} must be >= 0 and --ibm-iterations "
              "{ibm_iterations} >= 1").format(ibm_pairs=args.ibm_pairs, top_k=args.top_k, ibm_iterations=args.ibm_iterations)
        )
    if not 0.0 <= args.threshold < 1.0:
        raise AttnlabError(_("--threshold {threshold} is an attention share: give a number in [0, 1)").format(threshold=args.threshold))


def register(sub) -> None:
    """Add ``align`` to the ``attnlab`` subcommands (its options in --help's order, one group per helper)."""
    a = sub.add_parser(
        "align",
        help=_("AER of every attention head against gold en-fr word alignments: notes {cite}").format(cite=cite(25)),
        description=_("Force-decode the WPT-2003 en-fr gold sentences through a run, link each target word to "
          "its most-attended source word (at the predicting step and shifted by one), and score every "
          "layer × head by AER beside the links read from gradients (saliency) and an IBM Model 2 baseline trained "
          "in the same run."),
    )
    a.add_argument("run", metavar="RUN", help=_("run folder (from `attnlab train --out`)"))
    a.add_argument("--checkpoint", default="best", help=_("best, last or step-N"))
    add_device_arg(a)
    _add_gold_args(a)
    _add_link_args(a)
    _add_copy_args(a)
    _add_other_args(a)
    a.set_defaults(func=cmd_align)


def _add_gold_args(a) -> None:
    """The gold folder and split, and how much IBM Model 2 trains on beside them."""
    a.add_argument(
        "--gold",
        metavar="DIR",
        help=_("WPT-2003 en-fr gold folder (default: $ATTNLAB_GOLD_DIR, then "
               "$ATTNLAB_DATA_DIR/hansards-enfr)"),
    )
    a.add_argument("--split", default="test", choices=("test", "trial"), help=_("gold files "
                                                                                "{split}.en-fr.*"))
    a.add_argument(
        "--ibm-pairs",
        type=int,
        default=5000,
        dest="ibm_pairs",
        metavar="N",
        help=_("Tatoeba pairs added to the gold sentences to train IBM Model 2 (more pairs, a longer fit; "
               "what it costs: docs/experiments/alignment.md)"),
    )
    a.add_argument(
        "--ibm-iterations",
        type=int,
        default=5,
        dest="ibm_iterations",
        metavar="N",
        help=_("IBM Model 2 EM iterations (NLTK runs twice as many of Model 1 first)"),
    )


def _add_copy_args(a) -> None:
    """Read a copy instead of the run: adapted to the gold text (--adapt), one head taught (--teach)."""
    a.add_argument(
        "--adapt",
        type=int,
        default=0,
        metavar="EPOCHS",
        help=_("first train a copy of the model EPOCHS epochs on the gold sentences' text (never their "
               "links), the data IBM Model 2 gets, and read that copy's maps; the run is not changed "
               "(what it costs: docs/experiments/alignment.md; default 0: the model as trained)"),
    )
    a.add_argument(
        "--adapt-lr",
        type=float,
        default=1e-3,
        dest="adapt_lr",
        metavar="LR",
        help=_("AdamW learning rate for --adapt (default 1e-3, constant)"),
    )
    a.add_argument(
        "--teach",
        type=int,
        default=0,
        metavar="EPOCHS",
        help=_("then train one head of a copy (the one picked on the trial split) EPOCHS epochs toward "
               "the links of the model's own average of all heads, beside the translation loss (Garg "
               "et al. 2019, unsupervised: no gold links), and read that copy (default 0: no head "
               "taught)"),
    )
    a.add_argument(
        "--teach-weight",
        type=float,
        default=1.0,
        dest="teach_weight",
        metavar="W",
        help=_("weight of the head's cross-entropy to those links beside the translation loss (default "
               "1)"),
    )
    a.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="N",
        help=_("seed of --adapt's and --teach's batch order and dropout; another seed is a repeat "
               "(default 0)"),
    )


def _add_other_args(a) -> None:
    """A run of the other direction, the corpus IBM Model 2 samples, and where the answer goes."""
    a.add_argument(
        "--reverse",
        metavar="RUN2",
        help=_("a run of the other direction (train one with `attnlab train --model KIND --out RUN2 "
               "data.direction=fr-en`): each map's one-way links of the two runs are symmetrised by "
               "--ibm-links, as IBM Model 2's two directions are, and the best pair of heads is picked "
               "on the trial split (default: none, one direction only)"),
    )
    a.add_argument(
        "--data",
        metavar="PATH",
        help=_("fra-eng corpus for --ibm-pairs (default: $ATTNLAB_DATA_DIR, then the cache)"),
    )
    a.add_argument(
        "--save-dir",
        dest="save_dir",
        metavar="DIR",
        help=_("folder for align.json and align.png (default: RUN/inspect/align)"),
    )
    a.add_argument("--json", action="store_true", help=_("print the report as JSON"))


def _add_link_args(a) -> None:
    """How links are read from the maps, and the IBM Model 2 baseline's options."""
    a.add_argument(
        "--links",
        default="argmax",
        choices=A_METHODS,
        help=_("how a map becomes links: argmax = each target word to its most-attended source word; "
               "the others also read the map source→target and symmetrise the two (default: argmax)"),
    )
    a.add_argument(
        "--threshold",
        type=float,
        default=0.0,
        metavar="P",
        help=_("drop a link whose attention share is below P (0 = keep all)"),
    )
    a.add_argument(
        "--null",
        action="store_true",
        help=_("leave a target word unaligned when it attends to the source <eos> more than to any word"),
    )
    a.add_argument(
        "--top-k",
        type=int,
        default=3,
        dest="top_k",
        metavar="K",
        help=_("also score the average of the K best heads (default 3; 0 or 1: skip)"),
    )
    a.add_argument(
        "--no-saliency",
        action="store_true",
        dest="no_saliency",
        help=_("skip the gradient saliency map (links from ‖∂ log p(word) / ∂ source embedding‖, Ding "
               "et al. 2019; one backward pass per sentence)"),
    )
    a.add_argument("--no-ibm", action="store_true", dest="no_ibm", help=_("skip the IBM Model 2 "
                                                                          "baseline"))
    a.add_argument(
        "--ibm-links",
        default="grow-diag-final-and",
        choices=A_METHODS,
        dest="ibm_links",
        help=_("IBM Model 2: argmax = one direction; otherwise both directions symmetrised (default: "
               "grow-diag-final-and, the usual practice)"),
    )
    a.add_argument(
        "--ibm-no-null",
        action="store_true",
        dest="ibm_no_null",
        help=_("IBM Model 2: every word takes its best real word instead of NULL"),
    )
    a.add_argument(
        "--no-contractions",
        action="store_true",
        dest="no_contractions",
        help=_("feed the gold's French as written (de le, le ordre) instead of re-joined (du, l'ordre)"),
    )
