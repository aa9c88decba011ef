"""The `attnlab` command: thin — parse, call the library, print.

A user mistake (bad path, config typo, corrupt checkpoint) prints one line, ``error: …``, and
exits with code 2; an interrupted command exits 130. Anything else is a bug and keeps its traceback.

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

from attnlab import __version__
from attnlab import config as config_mod
from attnlab.cli_common import add_config_args, build_config
from attnlab.config import MODEL_KINDS, Config
from attnlab.errors import AttnlabError
from attnlab.inspection import commands_analysis, commands_views
from attnlab.web import commands as web_commands


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints usage + message otherwise)
        self.exit(2, f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")


# ---------------------------------------------------------------------------------------------- data

def cmd_data(args) -> int:
    from attnlab.data import corpus
    from attnlab.data.vocab import EOS, PAD

    cfg = build_config(args, dataset=args.dataset)
    prepared = corpus.prepare(cfg.data)
    print(corpus.format_stats(prepared))
    if args.sentence is not None:
        src_tok = prepared.src_tok
        ids = src_tok.encode(args.sentence)[: cfg.data.num_steps - 1]
        seq = ids + [EOS]
        width = max(len(seq) + 3, 10)  # D2L's example pads to num_steps = 10
        padded = seq + [PAD] * (width - len(seq))
        shown = [src_tok.id_to_token(i) for i in padded]
        print(f"\nthe notes' §4 walk-through for {args.sentence!r} (padded to num_steps={width}):")
        print(f"  preprocessed : {' '.join(src_tok.tokens(args.sentence))}")
        print(f"  tokens       : {' '.join(shown)}")
        print(f"  ids          : {padded}")
        print(f"  valid_len    : {len(seq)}  (tokens before padding, <eos> included)")
        print("  vocabulary   : " + ", ".join(f"{t} = {i}" for t, i in dict(zip(shown, padded)).items()))
        print(f"  (ids are row numbers of a {len(src_tok)}-entry vocabulary, not magnitudes: see the notes' §4)")
    return 0


# --------------------------------------------------------------------------------------------- train

def cmd_train(args) -> int:
    from attnlab.runs import read_run
    from attnlab.training.launch import launch_nproc
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
    if args.nproc and args.nproc > 1:
        return launch_nproc(args.nproc, sys.argv[1:])
    res = train(cfg, out, resume=args.resume, progress=not args.quiet, argv=sys.argv)
    if os.environ.get("RANK", "0") != "0":  # under torchrun only rank 0 reports
        return 130 if res.stopped_by == "signal" else 0
    v = res.last_valid
    line = (f"stopped by {res.stopped_by} at step {res.step} (epoch {res.epoch}); "
            f"{res.tokens_per_s:,.0f} target tokens/s")
    if "valid_bleu" in v:
        line += f"; valid loss {v['valid_loss']:.3f}, BLEU {v['valid_bleu']:.2f} (best {res.best_bleu:.2f})"
    print(line)
    print(f"run folder: {out}")
    if res.stopped_by == "signal":
        print(f"interrupted: saved the last checkpoint; continue with `attnlab train --resume --out {out}`")
        return 130
    return 0


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

    return Translator.from_run(args.run, which=args.checkpoint, device=args.device or "cpu")


def cmd_translate(args) -> int:
    tr = _load_translator(args)
    beam = args.beam or tr.cfg.decode.beam_size
    nbest = args.nbest or 1
    if nbest > beam:
        raise AttnlabError(f"--nbest {nbest} is larger than --beam {beam}; raise --beam or lower --nbest")
    out = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
    emitted = [0]  # lines handled so far, for warnings that name the input line

    def emit(lines: list[str]) -> None:
        results = tr.translate(lines, beam_size=beam, nbest=nbest)
        for n, res in enumerate(results):
            if res and getattr(res[0], "truncated", False):
                print(f"warning: input line {emitted[0] + n + 1} is longer than {tr.max_src_tokens} tokens; "
                      "only its beginning was translated", file=sys.stderr)
        emitted[0] += len(lines)
        for res in results:
            if nbest == 1:
                out.write(res[0].text + "\n")
            else:
                out.write(" ||| ".join(t.text for t in res) + "\n")
        out.flush()

    try:
        if args.text:
            emit(list(args.text))
        else:
            # Only "\n" ends a line (a stray "\r" inside a line must not split it); "\r\n" is stripped below.
            if args.file:
                stream = open(args.file, encoding="utf-8", errors="replace", newline="\n")  # noqa: SIM115
            else:
                stream = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline="\n")
            chunk: list[str] = []
            for line in stream:
                chunk.append(line.rstrip("\n").rstrip("\r"))
                if len(chunk) >= 2000:  # bounded memory, sorted-by-length batches inside each chunk
                    emit(chunk)
                    chunk = []
            if chunk:
                emit(chunk)
    finally:
        if args.output:
            out.close()
    return 0


# ------------------------------------------------------------------------------------------ evaluate

def cmd_evaluate(args) -> int:
    from attnlab.data import corpus
    from attnlab.evaluation.evaluate import evaluate_split, format_report, notes_examples, write_report

    tr = _load_translator(args)
    dcfg = tr.cfg.data
    if args.data:
        dcfg = config_mod.apply_overrides(Config(data=dcfg), [f"data.data_path={args.data}"]).data
    prepared = corpus.prepare(dcfg, tokenizers=(tr.src_tok, tr.tgt_tok))
    if args.split not in prepared.splits:
        raise AttnlabError(f"--split {args.split} is unknown; choose one of: {', '.join(prepared.splits)}")
    beam = args.beam or tr.cfg.decode.beam_size
    result = evaluate_split(tr, prepared.splits[args.split], beam_size=beam, max_sentences=args.max_sentences)
    examples = notes_examples(tr, beam_size=beam)
    path = write_report(Path(args.run), args.split, result, examples)
    print(format_report(result, examples))
    print(f"wrote {path}")
    return 0


# ---------------------------------------------------------------------------------------------- demo

def cmd_demo(args) -> int:
    from attnlab.demo import run_demo

    return run_demo(out=Path(args.out), minutes=args.minutes, data=args.data, threads=args.threads)


# ---------------------------------------------------------------------------------------------- main

def make_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="attnlab", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    d = sub.add_parser("data", help="corpus statistics and the notes' §4 tokens → ids walk-through")
    d.add_argument("--dataset", choices=config_mod.DATASETS, default="fra-eng")
    d.add_argument("--sentence", help="an English sentence to follow through preprocessing and the vocabulary")
    add_config_args(d)
    d.set_defaults(func=cmd_data)

    t = sub.add_parser("train", help="train a model into a run folder")
    t.add_argument("--model", choices=MODEL_KINDS)
    t.add_argument("--dataset", choices=config_mod.DATASETS, default=None)
    t.add_argument("--out", required=True, help="run folder")
    t.add_argument("--resume", action="store_true", help="continue the run in --out exactly where it stopped")
    t.add_argument("--max-minutes", type=float, dest="max_minutes")
    t.add_argument("--max-steps", type=int, dest="max_steps")
    t.add_argument("--size", choices=config_mod.SIZES,
                   help="model/vocabulary/batch size: auto (default) fits a minute budget to this machine's "
                        "measured speed; base = the preset as it is")
    t.add_argument("--seed", type=int)
    t.add_argument("--threads", type=int)
    t.add_argument("--device")
    t.add_argument("--nproc", type=int, default=0, help="data-parallel processes on this machine (torchrun)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    add_config_args(t)
    t.set_defaults(func=cmd_train)

    for name, func, helptext in (("translate", cmd_translate, "translate sentences with a trained run"),
                                 ("evaluate", cmd_evaluate, "BLEU/chrF (sacreBLEU, all references) on a split")):
        q = sub.add_parser(name, help=helptext)
        q.add_argument("run", help="run folder")
        q.add_argument("--checkpoint", default="best", help="best, last or step-N")
        q.add_argument("--beam", type=int, help="beam size (1 = greedy)")
        q.add_argument("--device", help="cpu, cuda, auto")
        if name == "translate":
            q.add_argument("text", nargs="*", help="sentences (stdin when none)")
            q.add_argument("--file", help="read sentences from this file, one per line")
            q.add_argument("--output", help="write translations to this file")
            q.add_argument("--nbest", type=int, help="print the n best translations, separated by ' ||| '")
        else:
            q.add_argument("--split", default="test")
            q.add_argument("--max-sentences", type=int, default=0, dest="max_sentences")
            q.add_argument("--data", metavar="PATH", help="where the corpus is, if not where the run found it")
        q.set_defaults(func=func)

    m = sub.add_parser("demo", help="train Bahdanau and a Transformer briefly, translate, draw attention maps")
    m.add_argument("--out", default="runs/demo")
    m.add_argument("--minutes", type=float, default=1.5,
                   help="training minutes per model (default 1.5: the whole demo, setup included, fits in 6 minutes); "
                        "the models are sized for this machine and this budget")
    m.add_argument("--data", metavar="PATH")
    m.add_argument("--threads", type=int, default=0)
    m.set_defaults(func=cmd_demo)

    for module in (commands_views, commands_analysis, web_commands):  # each adds its subcommands
        module.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    # argparse stops filling a trailing `nargs="*"` positional once an option follows it
    # (`translate RUN --beam 4 "text"`); leftovers go back to that positional list.
    args, rest = parser.parse_known_args(argv)
    if rest:
        slot = next((n for n in ("text", "overrides") if isinstance(getattr(args, n, None), list)), None)
        bad = [r for r in rest if r.startswith("-") and r != "-"]
        if slot is None or bad:
            parser.error(f"unrecognized arguments: {' '.join(bad or rest)}")
        getattr(args, slot).extend(rest)
    try:
        return int(args.func(args) or 0)
    except AttnlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
