"""`attnlab demo`: the README's first command."""

from __future__ import annotations

from pathlib import Path

from attnlab import config as config_mod
from attnlab.cli.common import (
    add_deprecated_alias,
    add_verbosity_args,
    show_progress,
)
from attnlab.i18n import _


def cmd_demo(args) -> int:
    from attnlab.demo import run_demo
    from attnlab.files import writable_folder

    writable_folder(args.runs_dir, "--runs-dir")  # before the machine is measured and the corpus read
    return run_demo(out=Path(args.runs_dir), minutes=args.max_minutes, data=args.data, threads=args.threads,
                    progress=show_progress(args), verbose=args.verbose, dataset=args.dataset,
                    seed=args.seed)


def register(sub) -> None:
    m = sub.add_parser("demo", help=_("train Bahdanau and a Transformer briefly, translate, draw attention maps"),
                       description=_("The README's main job: train a GRU + Bahdanau model and a Transformer for "
                                     "a few minutes each (sized for this machine), translate the notes' sentences, "
                                     "say which are right and draw every attention map."))
    m.add_argument("--runs-dir", default="runs/demo", dest="runs_dir", metavar="DIR",
                   help=_("folder for the demo's two run folders (replaced on each demo run)"))
    add_deprecated_alias(m, "--out", "--runs-dir", dest="runs_dir")
    m.add_argument("--max-minutes", type=float, default=1.5, dest="max_minutes", metavar="M",
                   help=_("training minutes per model, more than 0 (default 1.5; the demo trains two models, "
                          "plus its setup); the models are sized for this machine and this budget"))
    add_deprecated_alias(m, "--minutes", "--max-minutes", dest="max_minutes", type=float)
    m.add_argument("--data", metavar="PATH",
                   help=_("the corpus's zip (fra-eng.zip, cmn-eng.zip), text file (fra.txt, cmn.txt) or a folder "
                          "holding one (default: $ATTNLAB_DATA_DIR, then the cache; without the corpus: the "
                          "offline numbers task)"))
    m.add_argument("--dataset", choices=config_mod.DATASETS, default=None,
                   help=_("fra-eng or cmn-eng (Tatoeba English-French, English-Mandarin) or the offline numbers "
                          "task (default: the corpus --data names, else fra-eng where it can be found, else "
                          "numbers)"))
    m.add_argument("--threads", type=int, default=0, help=_("torch threads (0 = one per core this process "
                                                            "may use, no more than a CPU quota allows)"))
    m.add_argument("--seed", type=int, default=config_mod.TrainConfig.seed, metavar="N",
                   help=_("train.seed of both models (default: {seed}); another seed draws other initial "
                          "weights and batches, to see which of the demo's results hold").format(
                       seed=config_mod.TrainConfig.seed))
    add_verbosity_args(m)
    m.set_defaults(func=cmd_demo)
