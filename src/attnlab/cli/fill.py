"""``attnlab fill RUN "i'm [MASK] ."``: the top-k fillers of each ``[MASK]`` with an encoder-only run
(notes §28.2; the library is :mod:`attnlab.decoding.fill`). Thin: parse, call the library, print.

The handler imports the library in its body, so building the ``attnlab`` parser never imports torch.
"""

from __future__ import annotations

from attnlab.cli.common import add_device_arg, load_translator
from attnlab.errors import AttnlabError
from attnlab.i18n import _
from attnlab.notes import cite


def cmd_fill(args) -> int:
    from attnlab.decoding.fill import fill_masks, format_fills
    from attnlab.models import traits

    if args.top < 1:
        raise AttnlabError(_("--top {top} must be >= 1").format(top=args.top))
    tr = load_translator(args)
    if traits(tr.cfg.model).task != "fill":
        raise AttnlabError(_("{run} is a {kind} run, a translation model: `fill` needs an encoder-only "
                             "run (attnlab train --model encoder-only); use `attnlab translate` for "
                             "this one").format(run=args.run, kind=tr.cfg.model.kind))
    print(format_fills(fill_masks(tr.model, tr.src_tok, args.sentences, top_k=args.top, device=tr.device)))
    return 0


def register(sub) -> None:
    """Add ``fill`` to the ``attnlab`` parser's subparsers ``sub``."""
    f = sub.add_parser("fill", help=_("an encoder-only run's top-k fillers of each [MASK] in a sentence: notes "
                                      "{cite}").format(cite=cite("28.2")))
    f.add_argument("run", metavar="RUN", help=_("run folder of an encoder-only model"))
    f.add_argument("sentences", nargs="+", metavar=_("sentence"), help=_("a sentence in the run's language, with "
                                                                      "[MASK] where a word is missing"))
    f.add_argument("--top", type=int, default=5, help=_("fillers shown per [MASK] (default 5)"))
    f.add_argument("--checkpoint", default="best", help=_("best, last or step-N"))
    add_device_arg(f)
    f.set_defaults(func=cmd_fill)
