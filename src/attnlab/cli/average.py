"""`attnlab average`: the mean of a run's last N checkpoints (or of its decay phase's), as the checkpoint
``averaged``."""

from __future__ import annotations

import sys

from attnlab.i18n import _


def cmd_average(args) -> int:
    from attnlab.runs.average import average_checkpoints, decay_note

    if args.from_decay:
        path = average_checkpoints(args.run, name=args.name, from_decay=True)
        print(_("wrote {path}: the mean of the checkpoints written while the learning rate decayed; use it with "
                "--checkpoint {name}, e.g. `attnlab evaluate {run} --checkpoint {name}`").format(
            path=path, name=args.name, run=args.run))
        return 0
    path = average_checkpoints(args.run, args.last, args.name)
    note = decay_note(args.run, args.last)  # a warning, not an error: the average was written
    if note:
        print(note, file=sys.stderr)
    print(_("wrote {path}: the mean of the last {n} checkpoints; use it with --checkpoint {name}, e.g. "
            "`attnlab evaluate {run} --checkpoint {name}`").format(path=path, n=args.last, name=args.name,
                                                                   run=args.run))
    return 0


def register(sub) -> None:
    helptext = _("average the weights of a run's last N checkpoints (checkpoint averaging)")
    a = sub.add_parser("average", help=helptext,
                       description=_("Write RUN/checkpoints/NAME/, the element-wise mean of the last N step "
                                     "checkpoints' weights (Vaswani et al. 2017 averaged the last 5), verified and "
                                     "loaded like any checkpoint: translate, evaluate, export and serve take it as "
                                     "--checkpoint NAME. A run keeps train.keep_checkpoints step checkpoints besides "
                                     "LAST, BEST and, in a budgeted run, the train.average_last ones written while "
                                     "the learning rate decays: --from-decay averages those, near convergence."))
    a.add_argument("run", metavar="RUN", help=_("run folder (the --out of `attnlab train`)"))
    which = a.add_mutually_exclusive_group(required=True)
    which.add_argument("--last", type=int, metavar="N", help=_("how many of the newest checkpoints (default: none; this or --from-decay is required)"))
    which.add_argument("--from-decay", action="store_true",
                       help=_("the checkpoints written while the learning rate decayed (a budgeted run keeps "
                              "train.average_last of them, spread over its decay phase)"))
    a.add_argument("--name", default="averaged", help=_("the checkpoint's name in RUN/checkpoints/"))
    a.set_defaults(func=cmd_average)
