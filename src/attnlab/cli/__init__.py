"""The `attnlab` command: thin — parse, call the library, print.

A user mistake (bad path, config typo, corrupt checkpoint) prints one line, ``error: …``, and
exits with code 2; a command-line mistake prints that (sub)command's usage above that line. A command
stopped by Ctrl-C or SIGTERM exits 130 or 143 (attnlab.interrupts). Anything else is a bug and keeps its
traceback. A torchrun worker (one that joined a process group) ends with that code through
:func:`attnlab.training.distributed.end_process` instead of returning.

Each command imports the library inside its body (here and in the command modules): building the
parser then never imports torch, so ``attnlab --help`` and a mistyped option answer at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from attnlab._version import __version__
from attnlab.cli import (
    align,
    analysis,
    attribution,
    average,
    data,
    demo,
    export,
    fill,
    scaling,
    serve,
    train,
    translate,
    views,
)
from attnlab.cli.common import Parser
from attnlab.config import DATASETS, MODEL_KINDS
from attnlab.errors import AttnlabError
from attnlab.i18n import N_, _, add_lang_argument, missing, set_language
from attnlab.interrupts import exit_code, sigterm_interrupts

# {models} and {corpora} are filled from the tables the subcommands' --model and --dataset choices come from
# (config.MODEL_KINDS; config.DATASETS, the names of data/pairs.py's CORPORA), so this list cannot drift.
DESCRIPTION = N_("""\
Train, evaluate, serve and explain attention-based translation models on Tatoeba corpora, the offline
`numbers` task, or a parallel corpus of your own (--data FILE):
  models (--model)      {models}
  corpora (--dataset)   {corpora}
Every command below has its own --help; options show their defaults there.
"§N" is section N of the learner's notes on attention; each is cited with the section of Dive into Deep
Learning (D2L) that teaches it, in the Chinese 2nd edition (zh, attention = chapter 10) and the English
edition (en, chapter 11): docs/notes-sections.md and the web page list them all.""")

EPILOG = N_("""\
examples:
  attnlab demo                                   train two models briefly, translate, draw attention
  attnlab train --model transformer --max-minutes 15 --out runs/t
  attnlab config --model transformer train.lr=3e-4     the config `train` would run, as TOML
  attnlab translate runs/t "i'm home ." --beam 4
  echo "he's calm ." | attnlab translate runs/t
  attnlab evaluate runs/t --split test
  attnlab attention runs/t "i'm home ."           the three attention maps, token-labelled
  attnlab serve runs/t                           web page + HTTP API on 127.0.0.1:8000
  attnlab completion bash > ~/.local/share/bash-completion/completions/attnlab

environment variables:
  ATTNLAB_DATA_DIR          folder (or file) holding fra-eng.zip, cmn-eng.zip or their .txt; after --data,
                            before the cache ($XDG_CACHE_HOME/attnlab, else ~/.cache/attnlab)
  ATTNLAB_OFFLINE=1         never download the corpus (use --data, ATTNLAB_DATA_DIR or --dataset numbers)
  ATTNLAB_DOWNLOAD_TIMEOUT  seconds the whole corpus download may take (default 120)
  ATTNLAB_GOLD_DIR          folder of the WPT-2003 English-French gold word alignments for
                            `attnlab align` (default: $ATTNLAB_DATA_DIR/hansards-enfr)
  ATTNLAB_DIST_TIMEOUT      seconds data-parallel processes wait for each other in one collective
                            (default 1800)
  ATTNLAB_MAX_RESTARTS      times `train --nproc N` restarts all workers from the last checkpoint
                            after one fails (default 0)
  ATTNLAB_LAUNCHER_PID, ATTNLAB_AGENT_PID
                            set by `train --nproc N` for torchrun and its workers (the run folder's lock
                            holder, the process they die with); never set them yourself
  ATTNLAB_LANG              language of the teaching text (doctor, explain, data, params, the web notes):
                            en or zh (the notes' Chinese); --lang on any command overrides it
  ATTNLAB_TORCH_INDEX       scripts/setup.sh only: the wheel index to install torch from (a CPU-only
                            or a CUDA one; default: pip's configured indexes)
  ATTNLAB_TORCH_VERSION     scripts/setup.sh only: the torch version to install (default 2.13.0)

A mistake (bad path, config typo, corrupt checkpoint) prints one `error:` line and exits 2. Ctrl-C
or SIGTERM stops any command within seconds (a training run saves its last step first) and exits
130 or 143.""")


def _path_completion(parser: argparse.ArgumentParser, shtab) -> None:
    """Complete folders for RUN and DIR arguments, files for FILE and PATH, in every subcommand."""
    kinds = {"RUN": shtab.DIRECTORY, "DIR": shtab.DIRECTORY, "FILE": shtab.FILE, "PATH": shtab.FILE}
    parsers = [parser, *next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices.values()]
    for p in parsers:
        for action in p._actions:
            if action.metavar in kinds:
                action.complete = kinds[action.metavar]


def cmd_completion(args) -> int:
    import shtab  # imported here: only this command needs it, and it is not free to import

    parser = make_parser()
    _path_completion(parser, shtab)
    print(shtab.complete(parser, shell=args.shell))
    return 0


# ---------------------------------------------------------------------------------------------- main

#: Every command group, in the order `attnlab --help` lists their commands: one module each, with
#: ``register(sub)`` adding its subcommands (and ``cmd_*`` functions that import the library when run).
COMMANDS = (data, train, translate, average, demo, views, analysis, fill, align, attribution, scaling, serve, export)


def make_parser() -> argparse.ArgumentParser:
    p = Parser(prog="attnlab", description=_(DESCRIPTION).format(models=", ".join(MODEL_KINDS),
                                                                  corpora=", ".join(DATASETS)), epilog=_(EPILOG))
    p.add_argument("--version", action="version", version=f"attnlab {__version__}",
                   help=_("show program's version number and exit"))
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND")

    for module in COMMANDS:  # each adds its subcommands, in the order --help lists them
        module.register(sub)
    _add_completion(sub)
    for parser in (p, *dict.fromkeys(sub.choices.values())):  # --lang on every command (aliases: once)
        add_lang_argument(parser, top_level=parser is p)
    return p


def _add_completion(sub) -> None:
    x = sub.add_parser("completion", help=_("print a shell completion script (bash or zsh)"),
                       description=_("Print a completion script for attnlab's commands and options. bash: "
                                     "`attnlab completion bash > ~/.local/share/bash-completion/completions/attnlab`; "
                                     "zsh: `attnlab completion zsh > ~/.zfunc/_attnlab` (with ~/.zfunc on $fpath)."))
    x.add_argument("shell", choices=("bash", "zsh"), help=_("the shell to complete in"))
    x.set_defaults(func=cmd_completion)


def _language_before_parsing(argv: list[str]) -> str | None:
    """``--lang X`` / ``--lang=X`` from ``argv`` (the last one wins, as argparse's), else None (then
    ``$ATTNLAB_LANG``): the help text is written when the parser is built, before argparse reads --lang."""
    lang = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--lang" and i + 1 < len(argv):
            lang = argv[i + 1]
        elif arg.startswith("--lang="):
            lang = arg.split("=", 1)[1]
    return lang


def _say_what_is_missing() -> None:
    """Name, once, the messages shown in English because the catalogue has no translation for them."""
    untranslated = missing()
    if untranslated:
        print(_("note: {n} message(s) have no translation yet and are shown in English: {messages}").format(
            n=len(untranslated), messages="; ".join(repr(m[:60]) for m in untranslated)), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    try:
        code = _main(argv)
    except Exception as e:
        if _worker() is None:
            raise
        line = _worker().lost_peer_line(e)  # another worker died: the launcher names it, no traceback here
        if line is None:
            traceback.print_exc()
        elif line:
            print(line, file=sys.stderr)
        code = 1
    worker = _worker()
    if worker is not None:
        worker.end_process(code)
    return code


def _worker():
    """attnlab.training.distributed when this process joined a process group, else None (never
    imported here: building the parser must not import torch)."""
    D = sys.modules.get("attnlab.training.distributed")
    return D if D is not None and D.joined_a_group() else None


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed as ``attnlab`` parses it (usage errors exit 2 through :class:`Parser`); the tests
    parse every command the notebooks and READMEs show through this, without running it."""
    # argparse stops filling a trailing `nargs="*"` positional once an option follows it
    # (`translate RUN --beam 4 "text"`); leftovers go back to that positional list.
    args, rest = parser.parse_known_args(argv)
    if rest:
        slot = next((n for n in ("text", "overrides") if isinstance(getattr(args, n, None), list)), None)
        bad = [r for r in rest if r.startswith("-") and r != "-"]
        if slot is None or bad:
            # the subcommand's own usage and --help, not the top level's
            sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            sub.choices.get(args.command, parser).unknown_options(bad or rest)
        setattr(args, slot, [*getattr(args, slot), *rest])
    return args


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        set_language(_language_before_parsing(argv))  # --lang, else $ATTNLAB_LANG, else English
    except AttnlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    args = parse(make_parser(), argv)
    try:
        with sigterm_interrupts():  # SIGTERM stops a command as Ctrl-C does (attnlab.interrupts)
            set_language(args.lang)  # --lang, else $ATTNLAB_LANG, else English; a bad one is an error: line
            try:
                return int(args.func(args) or 0)
            finally:
                _say_what_is_missing()
    except AttnlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C, or attnlab.interrupts.Interrupted: 128 + the signal's number
        print(_("interrupted") if not str(e) else _("interrupted by {signal}").format(signal=e), file=sys.stderr)
        return exit_code(e)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
