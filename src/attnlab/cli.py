"""The `attnlab` command: thin — parse, call the library, print.

A user mistake (bad path, config typo, corrupt checkpoint) prints one line, ``error: …``, and
exits with code 2; a command-line mistake prints that (sub)command's usage above that line. A command
stopped by Ctrl-C or SIGTERM exits 130 or 143 (attnlab.interrupts). Anything else is a bug and keeps its
traceback.

Each command imports the library inside its body (here and in the command modules): building the
parser then never imports torch, so ``attnlab --help`` and a mistyped option answer at once.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tomllib
from pathlib import Path

from attnlab import __version__, commands_data, commands_fill
from attnlab import config as config_mod
from attnlab.cli_common import (
    Parser,
    add_config_args,
    add_deprecated_alias,
    add_device_arg,
    add_run_data_arg,
    add_verbosity_args,
    build_config,
    say,
    show_progress,
)
from attnlab.config import MODEL_KINDS, Config
from attnlab.errors import AttnlabError
from attnlab.export import ENGINES
from attnlab.export import commands as export_commands
from attnlab.i18n import add_lang_argument, set_language
from attnlab.inspection import (
    commands_align,
    commands_analysis,
    commands_attribution,
    commands_scaling,
    commands_views,
)
from attnlab.interrupts import exit_code, sigterm_interrupts
from attnlab.web import commands as web_commands

DESCRIPTION = """\
Train, evaluate, serve and explain attention-based translation models (GRU seq2seq, GRU + Bahdanau
attention, Transformer, decoder-only) on Tatoeba English→French, or on the offline `numbers` task.
Every command below has its own --help; options show their defaults there."""

EPILOG = """\
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
  ATTNLAB_DATA_DIR          folder (or file) holding fra-eng.zip or fra.txt; looked at after --data,
                            before the cache ($XDG_CACHE_HOME/attnlab, else ~/.cache/attnlab)
  ATTNLAB_OFFLINE=1         never download the corpus (use --data, ATTNLAB_DATA_DIR or --dataset numbers)
  ATTNLAB_DOWNLOAD_TIMEOUT  seconds the whole corpus download may take (default 120)
  ATTNLAB_GOLD_DIR          folder of the WPT-2003 English-French gold word alignments for
                            `attnlab align` (default: $ATTNLAB_DATA_DIR/hansards-enfr)
  ATTNLAB_DIST_TIMEOUT      seconds data-parallel processes wait for each other in one collective
                            (default 1800)
  ATTNLAB_MAX_RESTARTS      times `train --nproc N` restarts all workers from the last checkpoint
                            after one fails (default 0)
  ATTNLAB_LANG              language of the teaching text (doctor, explain, data, params, the web notes):
                            en or zh (the notes' Chinese); --lang on any command overrides it
  ATTNLAB_TORCH_INDEX       scripts/setup.sh only: the wheel index to install torch from (a CPU-only
                            or a CUDA one; default: pip's configured indexes)
  ATTNLAB_TORCH_VERSION     scripts/setup.sh only: the torch version to install (default 2.13.0)

A mistake (bad path, config typo, corrupt checkpoint) prints one `error:` line and exits 2. Ctrl-C
or SIGTERM stops any command within seconds (a training run saves its last step first) and exits
130 or 143."""


# --------------------------------------------------------------------------------------------- train

def cmd_train(args) -> int:
    from attnlab.runs import read_run
    from attnlab.training.launch import launch_nproc, processes
    from attnlab.training.loop import train
    from attnlab.training.resume import check_resume_overrides

    out = Path(args.out)
    if args.resume:
        saved = read_run(out).config
        cfg = build_config(args, dataset=args.dataset, base=saved)
        if args.model and args.model != cfg.model.kind:
            raise AttnlabError(f"--model {args.model} differs from the run's model.kind={cfg.model.kind}; "
                               "a resumed run keeps its model")
        check_resume_overrides(saved, cfg, out)  # here too: before --nproc starts torchrun's workers
    else:
        if not args.model:
            raise AttnlabError(f"--model is required for a new run; choose one of: {', '.join(MODEL_KINDS)}")
        cfg = build_config(args, kind=args.model, dataset=args.dataset)
        if cfg.train.size == "auto" and "RANK" not in os.environ:  # under torchrun rank 0 sizes for all
            cfg = _size_for_machine(cfg, args)
    if processes(args.nproc, cfg.train.device) > 1:
        return launch_nproc(args.nproc, sys.argv[1:])
    if os.environ.get("RANK", "0") == "0":
        say(args, f"config of {out}:\n{config_mod.dumps_toml(cfg)}")
    res = train(cfg, out, resume=args.resume, progress=show_progress(args), argv=sys.argv,
                explicit=_explicit_keys(args))
    stop_code = exit_code(res.signal) if res.stopped_by == "signal" else 0  # 130 Ctrl-C, 143 SIGTERM
    if os.environ.get("RANK", "0") != "0":  # under torchrun only rank 0 reports
        return stop_code
    v = res.last_valid
    line = (f"stopped by {res.stopped_by} at step {res.step} (epoch {res.epoch}); "
            f"{res.tokens_per_s:,.0f} target tokens/s")
    if "valid_bleu" in v:
        line += f"; valid loss {v['valid_loss']:.3f}, BLEU {v['valid_bleu']:.2f} (best {res.best_bleu:.2f})"
    elif "valid_fill_acc" in v:  # a fill model (encoder-only): masked-token accuracy, its best checkpoint's figure
        line += f"; valid loss {v['valid_loss']:.3f}, fill accuracy {v['valid_fill_acc']:.1f}% (best {res.best_bleu:.1f}%)"
    print(line)
    print(f"run folder: {out}")
    if res.stopped_by == "signal":
        print(f"interrupted: saved the last checkpoint; continue with `attnlab train --resume --out {out}`")
        return stop_code
    return 0


def _add_train_config_args(p: argparse.ArgumentParser, model_required: bool) -> None:
    """The options that shape a training config, shared by `train` and `config` (same line, same config)."""
    p.add_argument("--model", choices=MODEL_KINDS, required=model_required,
                   help="model kind; its preset is the starting config, and a --config file's model.kind must be "
                        "the same" + (
                       "" if model_required else " (default: none: required for a new run; --resume keeps "
                                                 "the run's own)"))
    p.add_argument("--dataset", choices=config_mod.DATASETS, default=None,
                   help="fra-eng (Tatoeba) or the offline numbers task (default: the preset's, fra-eng)")
    p.add_argument("--max-minutes", type=float, dest="max_minutes", metavar="M",
                   help="time budget in minutes; the schedule and (train.size=auto) the model are planned on it "
                        "(default: the config's train.max_minutes; 0 = no time limit)")
    p.add_argument("--max-steps", type=int, dest="max_steps", metavar="N",
                   help="stop after N updates (default: the config's train.max_steps; 0 = no step limit)")
    p.add_argument("--size", choices=config_mod.SIZES,
                   help="model/vocabulary/batch size: auto fits a minute budget to this machine's measured "
                        "speed; base = the preset as it is; or a tier by name (default: the config's, auto)")
    p.add_argument("--seed", type=int, help="random seed (default: the config's train.seed, 42)")
    p.add_argument("--threads", type=int,
                   help="torch threads (default: the config's train.threads; 0 = PyTorch's default, all cores)")
    add_device_arg(p, config_key=True)
    add_config_args(p)


def _explicit_keys(args) -> frozenset[str]:
    """The dotted keys the user set: in --config, as flags or as overrides (train.size=auto leaves them)."""
    keys = {item.split("=", 1)[0].strip() for item in (getattr(args, "overrides", None) or []) if "=" in item}
    if getattr(args, "config", None):
        with open(args.config, "rb") as f:
            keys |= {f"{sec}.{k}" for sec, vals in tomllib.load(f).items() if isinstance(vals, dict) for k in vals}
    return frozenset(keys)


def _size_for_machine(cfg: Config, args) -> Config:
    from attnlab.device import set_threads
    from attnlab.training import sizing

    set_threads(cfg.train.threads)  # the probe measures the threads the run will use
    cfg, why = sizing.resolve(cfg, _explicit_keys(args))
    if why:
        print(why, file=sys.stderr)
    return cfg


# ----------------------------------------------------------------------------------------- translate

def _load_translator(args):
    from attnlab.translator import Translator

    if getattr(args, "engine", "attnlab") != "attnlab":  # attnlab translate OUT --engine ctranslate2
        from attnlab.export.engine import load_translator as load_engine
        return load_engine(args.run, which=args.checkpoint, device=args.device or "auto", engine=args.engine)
    tr = Translator.from_run(args.run, which=args.checkpoint, device=args.device or "auto")
    say(args, f"loaded {args.run} ({tr.cfg.model.kind}, checkpoint {args.checkpoint}) on {tr.device}")
    return tr


def _check_translate_paths(args) -> None:
    """``--file`` is a readable file and ``--output`` is not the input (by name, link or stdin) nor a folder."""
    if args.file is not None:
        if not os.path.exists(args.file):
            raise AttnlabError(f"--file {args.file} does not exist; give a text file with one sentence per line")
        if os.path.isdir(args.file):
            raise AttnlabError(f"--file {args.file} is a folder; give a text file with one sentence per line")
    if not args.output:
        return
    if os.path.isdir(args.output):
        raise AttnlabError(f"--output {args.output} is a folder; give the file to write the translations to")
    if not os.path.exists(args.output):
        return
    out = os.stat(args.output)
    if args.file is not None:
        same = os.path.samestat(os.stat(args.file), out)
    elif not args.text:
        try:
            same = os.path.samestat(os.fstat(sys.stdin.fileno()), out)
        except (OSError, ValueError, io.UnsupportedOperation):  # no real stdin (a test's, a closed one)
            same = False
    else:
        same = False
    if same:
        raise AttnlabError(f"--output {args.output} is the input file; writing it would destroy the sentences "
                           "before they are read. Choose another --output")


class _Output:
    """``--output``: translations go to a temporary file beside the target, renamed over it by
    :meth:`commit` only when every line is written, so a failure or Ctrl-C leaves the previous file
    whole. A symbolic link is written through (the link stays); a device or pipe (``/dev/null``)
    is written to directly, having no content to keep."""

    def __init__(self, path: str) -> None:
        import tempfile

        from attnlab.io import usual_mode

        self.target = os.path.realpath(path)
        self.tmp = None
        try:
            if os.path.exists(self.target) and not os.path.isfile(self.target):
                self.file = open(self.target, "w", encoding="utf-8")  # noqa: SIM115
                return
            fd, self.tmp = tempfile.mkstemp(prefix=f".{os.path.basename(self.target)}.", suffix=".tmp",
                                            dir=os.path.dirname(self.target))
            os.fchmod(fd, usual_mode())  # mkstemp makes 0600
            self.file = os.fdopen(fd, "w", encoding="utf-8")
        except OSError as e:
            raise AttnlabError(f"cannot write --output {path}: {e.strerror or e}; choose a file in a folder "
                               "you can write to") from None

    def commit(self) -> None:
        from attnlab.io import fsync_dir

        self.file.flush()
        if self.tmp is not None:
            os.fsync(self.file.fileno())
        self.file.close()
        if self.tmp is not None:
            os.replace(self.tmp, self.target)
            self.tmp = None
            fsync_dir(os.path.dirname(self.target))

    def abandon(self) -> None:
        self.file.close()
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass


def _check_counts(args, *names: str) -> None:
    """``--beam`` / ``--nbest`` given as 0 or less are mistakes (0 once meant the run's default silently)."""
    for name in names:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise AttnlabError(f"--{name} {value} must be at least 1 (--beam 1 = greedy; leave --{name} out "
                               "for the default)")


def cmd_translate(args) -> int:
    _check_counts(args, "beam", "nbest")
    _check_translate_paths(args)  # before the model loads: a wrong path fails at once
    try:
        stream = open(args.file, encoding="utf-8", errors="replace", newline="\n") if args.file else None  # noqa: SIM115
    except OSError as e:
        raise AttnlabError(f"cannot read --file {args.file}: {e.strerror or e}") from None
    try:
        return _translate(args, stream)
    finally:
        if stream is not None:
            stream.close()


def _translate(args, stream) -> int:
    tr = _load_translator(args)
    beam = args.beam or tr.cfg.decode.beam_size
    nbest = args.nbest or 1
    if nbest > beam:
        raise AttnlabError(f"--nbest {nbest} is larger than --beam {beam}; raise --beam or lower --nbest")
    output = _Output(args.output) if args.output else None
    out = output.file if output else sys.stdout  # stdout is streamed: each chunk as it is translated
    emitted = [0]  # lines handled so far, for warnings that name the input line

    def emit(lines: list[str]) -> None:
        results = tr.translate_full(lines, beam_size=beam, nbest=nbest)
        for n, res in enumerate(results):
            if res and getattr(res[0], "truncated", False):
                print(f"warning: input line {emitted[0] + n + 1} is longer than {tr.max_src_tokens} tokens; "
                      "only its beginning was translated", file=sys.stderr)
        emitted[0] += len(lines)
        try:
            for res in results:
                if nbest == 1:
                    out.write(res[0].text + "\n")
                else:
                    out.write(" ||| ".join(t.text for t in res) + "\n")
            out.flush()
        except OSError as e:
            if output is None or isinstance(e, BrokenPipeError):
                raise  # stdout: a closed pipe ends the command quietly (main)
            raise AttnlabError(f"could not write --output {args.output}: {e.strerror or e}; the previous file "
                               "is unchanged") from None

    bar = None
    try:
        if args.text:
            emit(list(args.text))
        else:
            # Only "\n" ends a line (a stray "\r" inside a line must not split it); "\r\n" is stripped below.
            if stream is not None:
                if show_progress(args):  # a file has a known length: a bar on stderr, ticked per chunk
                    from tqdm.auto import tqdm

                    total, last = 0, b"\n"  # lines as the loop below counts them: a last unended one too
                    with open(args.file, "rb") as f:
                        for block in iter(lambda: f.read(1 << 20), b""):
                            total, last = total + block.count(b"\n"), block[-1:]
                    bar = tqdm(total=total + (last != b"\n"), desc="translate", unit="line", dynamic_ncols=True,
                               file=sys.stderr)
            else:
                stream = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline="\n")
            chunk: list[str] = []
            for line in stream:
                chunk.append(line.rstrip("\n").rstrip("\r"))
                if len(chunk) >= 2000:  # bounded memory, sorted-by-length batches inside each chunk
                    emit(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
                    chunk = []
            if chunk:
                emit(chunk)
                if bar is not None:
                    bar.update(len(chunk))
        if output is not None:
            try:
                output.commit()
            except OSError as e:
                raise AttnlabError(f"could not write --output {args.output}: {e.strerror or e}; the previous file "
                                   "is unchanged") from None
    finally:
        if bar is not None:
            bar.close()
        if output is not None:
            output.abandon()
    return 0


# ------------------------------------------------------------------------------------------ evaluate

def cmd_evaluate(args) -> int:
    from attnlab.evaluation.evaluate import evaluate_split, format_report, notes_examples, write_report

    _check_counts(args, "beam")
    tr = _load_translator(args)
    tr.check_translates()  # a fill model is refused before the corpus is read
    prepared = tr.prepare_corpus(args.data)  # --data, else $ATTNLAB_DATA_DIR, else the cache
    if args.split not in prepared.splits:
        raise AttnlabError(f"--split {args.split} is unknown; choose one of: {', '.join(prepared.splits)}")
    beam = args.beam or tr.cfg.decode.beam_size
    result = evaluate_split(tr, prepared.splits[args.split], beam_size=beam, max_sentences=args.max_sentences,
                            progress=show_progress(args))
    examples = notes_examples(tr, beam_size=beam)
    path = write_report(Path(args.run), args.split, result, examples)
    print(format_report(result, examples))
    print(f"wrote {path}")
    return 0


# ---------------------------------------------------------------------------------------------- demo

def cmd_demo(args) -> int:
    from attnlab.demo import run_demo
    from attnlab.io import writable_folder

    writable_folder(args.runs_dir, "--runs-dir")  # before the machine is measured and the corpus read
    return run_demo(out=Path(args.runs_dir), minutes=args.max_minutes, data=args.data, threads=args.threads,
                    progress=show_progress(args), verbose=args.verbose, dataset=args.dataset)


# -------------------------------------------------------------------------------------- config, completion

def cmd_config(args) -> int:
    cfg = build_config(args, kind=args.model, dataset=args.dataset)
    size = cfg.train.size
    if size == "base":
        note = ""
    elif args.resolve:
        cfg = _size_for_machine(cfg, args)
        note = f"# train.size = \"{size}\" resolved as `attnlab train` would (the reason, if any, is on stderr)\n"
    else:
        how = ("with a minute budget on fra-eng, a 1-second matmul probe sizes the model, vocabulary and batches "
               "for this machine" if size == "auto" else "the tier's model, vocabulary and batch settings")
        note = (f"# train.size = \"{size}\" is NOT applied yet: `attnlab train` applies it when it starts\n"
                f"# ({how}); add --resolve to apply it now\n")
    print(f"# what `attnlab train` would run with these options: the {cfg.model.kind} preset, then --config, "
          f"the flags, the overrides\n{note}")
    print(config_mod.dumps_toml(cfg), end="")
    return 0


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

def make_parser() -> argparse.ArgumentParser:
    p = Parser(prog="attnlab", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND")

    commands_data.register(sub)  # `data` first, as before: the corpus comes before training

    t = sub.add_parser("train", help="train a model into a run folder",
                       description="Train a model into a run folder. The config is the model's preset, then "
                                   "--config, then the flags below, then section.key=value overrides "
                                   "(`attnlab config` prints it). Ctrl-C saves; --resume continues exactly.")
    t.add_argument("--out", required=True, metavar="RUN",
                   help="the run folder to create (or, with --resume, to continue)")
    t.add_argument("--resume", action="store_true", help="continue the run in --out exactly where it stopped")
    _add_train_config_args(t, model_required=False)
    t.add_argument("--nproc", type=int, default=0,
                   help="data-parallel processes on this machine, through torchrun, at most one per CPU core "
                        "(one per GPU on CUDA); 0 or 1 = this process alone")
    add_verbosity_args(t)
    t.set_defaults(func=cmd_train)

    c = sub.add_parser("config", help="print the config `attnlab train` would run, as TOML",
                       description="Print, as TOML, the config `attnlab train` would start from with the same "
                                   "options: the preset, --config, the flags and the overrides. train.size=auto "
                                   "is resolved only when training starts (a 1-second matmul probe sizes the "
                                   "model for the machine); --resolve runs that probe now. The output is a "
                                   "valid --config file.")
    _add_train_config_args(c, model_required=True)
    c.add_argument("--resolve", action="store_true",
                   help="also settle train.size=auto for this machine, as train would (measures it for a second)")
    c.set_defaults(func=cmd_config)

    _add_translate_evaluate(sub)
    _add_demo(sub)
    _add_completion(sub)
    for module in (commands_views, commands_analysis, commands_fill, commands_align, commands_attribution,
                   commands_scaling, web_commands, export_commands):  # each adds its subcommands
        module.register(sub)
    for parser in (p, *dict.fromkeys(sub.choices.values())):  # --lang on every command (aliases: once)
        add_lang_argument(parser, top_level=parser is p)
    return p


def _add_translate_evaluate(sub) -> None:
    """`translate` and `evaluate`: both read a run, decode with a beam, and report on stderr."""
    for name, func, helptext in (("translate", cmd_translate, "translate sentences with a trained run"),
                                 ("evaluate", cmd_evaluate, "BLEU/chrF (sacreBLEU, all references) on a split")):
        q = sub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        q.add_argument("run", metavar="RUN", help="run folder (the --out of `attnlab train`)")
        q.add_argument("--checkpoint", default="best", help="best, last or step-N")
        q.add_argument("--beam", type=int, help="beam size, 1 = greedy (default: the run's decode.beam_size)")
        add_device_arg(q)
        if name == "translate":
            q.add_argument("text", nargs="*", default=[], metavar="TEXT",
                           help="sentences to translate (default: lines from --file, else from stdin)")
            q.add_argument("--file", metavar="FILE",
                           help="read sentences from this file, one per line (default: none: TEXT, else stdin)")
            q.add_argument("--output", metavar="FILE", help="write translations to this file (default: stdout)")
            q.add_argument("--nbest", type=int,
                           help="print the n best translations, separated by ' ||| ' (default: 1)")
            q.add_argument("--engine", choices=ENGINES, default="attnlab",
                           help="ctranslate2: decode with CTranslate2 (RUN: a folder from `attnlab export "
                                "--format ctranslate2`) (default: attnlab)")
        else:
            q.add_argument("--split", default="test", help="which split of the run's corpus: train, valid or test")
            q.add_argument("--max-sentences", type=int, default=0, dest="max_sentences",
                           help="score at most this many sentences of the split (0 = all)")
            add_run_data_arg(q)
        add_verbosity_args(q)
        q.set_defaults(func=func)


def _add_demo(sub) -> None:
    m = sub.add_parser("demo", help="train Bahdanau and a Transformer briefly, translate, draw attention maps",
                       description="The README's main job: train a GRU + Bahdanau model and a Transformer for "
                                   "a few minutes each (sized for this machine), translate the notes' sentences, "
                                   "say which are right and draw every attention map.")
    m.add_argument("--runs-dir", default="runs/demo", dest="runs_dir", metavar="DIR",
                   help="folder for the demo's two run folders (replaced on each demo run)")
    add_deprecated_alias(m, "--out", "--runs-dir", dest="runs_dir")
    m.add_argument("--max-minutes", type=float, default=1.5, dest="max_minutes", metavar="M",
                   help="training minutes per model, more than 0 (default 1.5: the whole demo, setup included, fits in "
                        "6 minutes); the models are sized for this machine and this budget")
    add_deprecated_alias(m, "--minutes", "--max-minutes", dest="max_minutes", type=float)
    m.add_argument("--data", metavar="PATH",
                   help="fra-eng zip, fra.txt or folder (default: $ATTNLAB_DATA_DIR, then the cache; "
                        "without the corpus: the offline numbers task)")
    m.add_argument("--dataset", choices=config_mod.DATASETS, default=None,
                   help="fra-eng (Tatoeba) or the offline numbers task (default: fra-eng where it can be found, "
                        "else numbers)")
    m.add_argument("--threads", type=int, default=0, help="torch threads (0 = PyTorch's default, all cores)")
    add_verbosity_args(m)
    m.set_defaults(func=cmd_demo)


def _add_completion(sub) -> None:
    x = sub.add_parser("completion", help="print a shell completion script (bash or zsh)",
                       description="Print a completion script for attnlab's commands and options. bash: "
                                   "`attnlab completion bash > ~/.local/share/bash-completion/completions/attnlab`; "
                                   "zsh: `attnlab completion zsh > ~/.zfunc/_attnlab` (with ~/.zfunc on $fpath).")
    x.add_argument("shell", choices=("bash", "zsh"), help="the shell to complete in")
    x.set_defaults(func=cmd_completion)


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
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
    try:
        with sigterm_interrupts():  # SIGTERM stops a command as Ctrl-C does (attnlab.interrupts)
            set_language(args.lang)  # --lang, else $ATTNLAB_LANG, else English; a bad one is an error: line
            return int(args.func(args) or 0)
    except AttnlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C, or attnlab.interrupts.Interrupted: 128 + the signal's number
        print("interrupted" if not str(e) else f"interrupted by {e}", file=sys.stderr)
        return exit_code(e)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
