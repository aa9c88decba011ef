"""Subcommand ``attribute``: is attention an explanation? (notes §27.5, §28.5; thin: parse, call
:mod:`attnlab.analysis.attribution`, print). Prints the tables and correlations and writes the
figure ``<sentence>_<method>.png`` to ``--save-dir`` (default ``RUN/figures``)."""

from __future__ import annotations

from pathlib import Path

from attnlab.cli.common import add_device_arg, add_verbosity_args, load_translator
from attnlab.cli.present import present, stem
from attnlab.errors import AttnlabError
from attnlab.i18n import _
from attnlab.notes import cite

METHOD_CHOICES = ("ig", "ixg", "rollout")  # attribution.METHODS's keys, without importing torch here
DEFAULT_STEPS = 64  # attribution.DEFAULT_STEPS (a test keeps them equal)


def cmd_attribute(args) -> int:
    from attnlab.analysis import attribution as A

    if args.steps < 1:
        raise AttnlabError(_("--steps {steps} must be >= 1 (integrated gradients' interpolation points)").format(
            steps=args.steps))
    tr = load_translator(args)
    steps = args.steps if args.method == "ig" and args.steps != DEFAULT_STEPS else None  # only ig has steps
    name = stem("", sentence=args.sentence, steps=steps, checkpoint=args.checkpoint) + f"_{args.method}"
    present(lambda: A.run(tr, args.sentence, args.method, steps=args.steps), name, save_dir=args.save_dir,
            default_dir=Path(args.run) / "figures", files=(), formats=("png",), as_json=args.json)
    return 0


def register(sub) -> None:
    """Add ``attribute`` to the ``attnlab`` subcommands."""
    a = sub.add_parser(
        "attribute",
        help=_("gradient attribution and attention rollout beside the attention: notes {cite}").format(
            cite=cite("27.5, 28.5")),
        description=_("Translate a sentence greedily and attribute each output token's log-probability to the "
          "source tokens (integrated gradients or input × gradient, through Captum: the `explain` extra), "
          "beside the last layer's cross-attention and the rollout, with Spearman's rank correlation per "
          "output token and per sentence; or --method rollout: the attention rollout of each self-attention "
          "stack (Abnar & Zuidema 2020) beside its last layer."),
    )
    a.add_argument("run", metavar="RUN", help=_("run folder (from `attnlab train --out`)"))
    a.add_argument("sentence", metavar=_("sentence"), help=_("a sentence in the run's source language"))
    a.add_argument("--method", default="ig", choices=METHOD_CHOICES,
                   help=_("ig: integrated gradients (default), ixg: input × gradient, rollout: "
                          "attention rollout"))
    a.add_argument("--steps", type=int, default=DEFAULT_STEPS, metavar="N",
                   help=_("integrated gradients' interpolation points from the zero-embedding "
                          "baseline; more points close the completeness gap the report prints "
                          "(default: 64)"))
    a.add_argument("--checkpoint", default="best", help=_("best, last or step-N"))
    add_device_arg(a)
    a.add_argument("--save-dir", dest="save_dir", metavar="DIR",
                   help=_("folder for the figure <sentence>_<method>.png (default: RUN/figures)"))
    a.add_argument("--json", action="store_true", help=_("print the report as JSON instead of the "
                                                         "tables"))
    add_verbosity_args(a)
    a.set_defaults(func=cmd_attribute)
