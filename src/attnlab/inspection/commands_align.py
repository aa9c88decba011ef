"""Subcommand ``align``: cross-attention against gold word alignments (notes §25; thin: parse, call
:mod:`attnlab.inspection.align`, print). Writes ``align.json`` and ``align.png`` to ``--out``
(default ``RUN/inspect/align``)."""

from __future__ import annotations

import json
from pathlib import Path

from attnlab.cli_common import add_device_arg
from attnlab.errors import AttnlabError


def cmd_align(args) -> int:
    from attnlab.inspection import align as A
    from attnlab.inspection.plots import save_figure
    from attnlab.io import atomic_write_json
    from attnlab.translator import Translator

    if args.ibm_pairs < 0 or args.ibm_iterations < 1:
        raise AttnlabError(
            f"--ibm-pairs {args.ibm_pairs} must be >= 0 and --ibm-iterations {args.ibm_iterations} >= 1"
        )
    gold = A.read_gold(
        A.gold_dir(args.gold), args.split
    )  # a missing gold folder fails before the model loads
    tr = Translator.from_run(args.run, which=args.checkpoint, device=args.device or "auto")
    report = A.align_run(
        tr,
        gold,
        contract=not args.no_contractions,
        ibm_pairs=args.ibm_pairs,
        ibm_iterations=args.ibm_iterations,
        ibm=not args.no_ibm,
        data_path=args.data,
    )
    out = Path(args.save_dir) if args.save_dir else Path(args.run) / "inspect" / "align"
    atomic_write_json(out / "align.json", report.to_json())
    paths = [out / "align.json", *save_figure(A.heatmap_figure(report), out / "align", ("png",))]
    if args.json:
        print(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
    else:
        print(A.format_report(report))
        for path in paths:
            print(f"wrote {path}")
    return 0


def register(sub) -> None:
    """Add ``align`` to the ``attnlab`` subcommands."""
    a = sub.add_parser(
        "align",
        help="AER of every attention head against gold en-fr word alignments (§25)",
        description="Force-decode the WPT-2003 en-fr gold sentences through a run, link each target word to "
        "its most-attended source word (at the predicting step and shifted by one), and score every "
        "layer × head by AER beside an IBM Model 2 baseline trained in the same run.",
    )
    a.add_argument("run", metavar="RUN", help="run folder (from `attnlab train --out`)")
    a.add_argument("--checkpoint", default="best", help="best, last or step-N")
    add_device_arg(a)
    a.add_argument(
        "--gold",
        metavar="DIR",
        help="WPT-2003 en-fr gold folder (default: $ATTNLAB_GOLD_DIR, then $ATTNLAB_DATA_DIR/hansards-enfr)",
    )
    a.add_argument("--split", default="test", choices=("test", "trial"), help="gold files {split}.en-fr.*")
    a.add_argument(
        "--ibm-pairs",
        type=int,
        default=5000,
        dest="ibm_pairs",
        metavar="N",
        help="Tatoeba pairs added to the gold sentences to train IBM Model 2 (about 30 s for 5000)",
    )
    a.add_argument(
        "--ibm-iterations",
        type=int,
        default=5,
        dest="ibm_iterations",
        metavar="N",
        help="IBM Model 2 EM iterations (NLTK runs twice as many of Model 1 first)",
    )
    a.add_argument("--no-ibm", action="store_true", dest="no_ibm", help="skip the IBM Model 2 baseline")
    a.add_argument(
        "--no-contractions",
        action="store_true",
        dest="no_contractions",
        help="feed the gold's French as written (de le, le ordre) instead of re-joined (du, l'ordre)",
    )
    a.add_argument(
        "--data",
        metavar="PATH",
        help="fra-eng corpus for --ibm-pairs (default: the run's data.data_path, then $ATTNLAB_DATA_DIR)",
    )
    a.add_argument(
        "--save-dir",
        dest="save_dir",
        metavar="DIR",
        help="folder for align.json and align.png (default: RUN/inspect/align)",
    )
    a.add_argument("--json", action="store_true", help="print the report as JSON")
    a.set_defaults(func=cmd_align)
