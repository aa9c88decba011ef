"""`attnlab average`: the mean of a run's last N checkpoints, as the checkpoint ``averaged``."""

from __future__ import annotations

from attnlab.i18n import _


def cmd_average(args) -> int:
    from attnlab.runs.average import average_checkpoints

    path = average_checkpoints(args.run, args.last, args.name)
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
                                     "LAST and BEST."))
    a.add_argument("run", metavar="RUN", help=_("run folder (the --out of `attnlab train`)"))
    a.add_argument("--last", type=int, required=True, metavar="N", help=_("how many of the newest checkpoints"))
    a.add_argument("--name", default="averaged", help=_("the checkpoint's name in RUN/checkpoints/"))
    a.set_defaults(func=cmd_average)
