"""Subcommands that let a person *see* the notes' ideas on a model: ``attention``, ``explain``,
``params``, ``positional`` and ``selfcheck`` (thin: parse, call the library, print).

Every command that draws takes ``--out DIR`` (default: ``RUN/figures``) and prints each path it wrote.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnlab.cli_common import build_config
from attnlab.errors import AttnlabError


def _translator(args):
    from attnlab.translator import Translator

    return Translator.from_run(args.run, which=args.checkpoint, device=args.device or "cpu")


def _out_dir(args, default: Path) -> Path:
    return Path(args.out) if args.out else default


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run folder (from `attnlab train --out`)")
    p.add_argument("--checkpoint", default="best", help="best, last or step-N")
    p.add_argument("--device", help="cpu (default), cuda, auto")


def _formats(args) -> tuple[str, ...]:
    return tuple(f.strip() for f in args.formats.split(",") if f.strip())


# -------------------------------------------------------------------------------------------- attention


def cmd_attention(args) -> int:
    from attnlab.inspection import attention_maps as am

    out = _out_dir(args, Path(args.run) / "figures")
    if args.beam is not None and args.beam < 1:
        raise AttnlabError(f"--beam {args.beam} must be >= 1")
    if args.timeline:  # reads probes.jsonl: no model needed
        for path in am.draw_timeline(args.run, args.sentence, out):
            print(path)
        return 0
    tr = _translator(args)
    beam = args.beam or 1
    result = am.attention_maps(tr, args.sentence, beam_size=beam, extra_pad=args.pad)
    print(f"{args.sentence} → {result.translation}")
    for path in am.draw_maps(result, out, am.run_name(tr), _formats(args)):
        print(path)
    if args.json:
        from attnlab.inspection.attention_json import attention_json
        from attnlab.io import atomic_write_json

        path = out / f"{am.slug(args.sentence)}_attention.json"
        atomic_write_json(path, attention_json(result))  # the web page's schema
        print(path)
    return 0


# ---------------------------------------------------------------------------------------------- explain


def cmd_explain(args) -> int:
    from attnlab.inspection.explain import explain

    if args.top < 1:
        raise AttnlabError(f"--top {args.top} must be >= 1")
    print(explain(_translator(args), args.sentence, reference=args.reference, top_k=args.top))
    return 0


# ----------------------------------------------------------------------------------------------- params


def cmd_params(args) -> int:
    from attnlab.inspection.params import draw_params, format_params, parameter_report
    from attnlab.models import build_model

    if args.run is not None and "=" in args.run and not Path(args.run).is_dir():
        # argparse gives the first `section.key=value` to the optional RUN positional
        args.overrides, args.run = [args.run, *args.overrides], None
    if (args.run is None) == (args.model is None):
        raise AttnlabError(
            "give either a run folder (attnlab params RUN) or --model KIND, not both or neither"
        )
    if args.run is not None:
        if args.overrides:
            raise AttnlabError("section.key=value overrides only apply with --model; a run keeps its config")
        from attnlab.inspection.attention_maps import run_name

        tr = _translator(args)
        model, title = tr.model, run_name(tr)
        vocab = (len(tr.src_tok), len(tr.tgt_tok))
        out = _out_dir(args, Path(args.run) / "figures")
    else:
        cfg = build_config(args, kind=args.model)
        vocab = _vocab_sizes(args, cfg)
        model = build_model(cfg.model, *vocab)
        title = f"{args.model} (preset + overrides)"
        out = _out_dir(args, Path("figures"))
    report = parameter_report(model)
    print(
        format_params(
            report,
            f"{title}: source vocabulary {vocab[0]:,}, target vocabulary {vocab[1]:,}",
            verbose=args.verbose,
        )
    )
    stem = "params" if args.run is not None else f"params_{args.model}"
    for path in draw_params(report, out, title, stem=stem, formats=_formats(args)):
        print(path)
    return 0


def _vocab_sizes(args, cfg) -> tuple[int, int]:
    """--src-vocab/--tgt-vocab, else the vocabularies the data config would build."""
    if args.src_vocab is not None and args.tgt_vocab is not None:
        if min(args.src_vocab, args.tgt_vocab) < 5:
            raise AttnlabError(
                "--src-vocab and --tgt-vocab must be >= 5 (4 special tokens + at least one word)"
            )
        return args.src_vocab, args.tgt_vocab
    if args.src_vocab is not None or args.tgt_vocab is not None:
        raise AttnlabError("give both --src-vocab and --tgt-vocab, or neither (then the data config decides)")
    from attnlab.data import corpus

    prepared = corpus.prepare(cfg.data)
    return len(prepared.src_tok), len(prepared.tgt_tok)


# ------------------------------------------------------------------------------------------- positional


def cmd_positional(args) -> int:
    from attnlab.inspection.positional import positional_report

    columns = None
    if args.columns:
        try:
            columns = [int(c) for c in args.columns.split(",") if c.strip()]
        except ValueError:
            raise AttnlabError(
                f"--columns {args.columns!r} must be integers separated by commas, e.g. 0,1,6,7"
            ) from None
    report = positional_report(
        args.dim,
        args.positions,
        _out_dir(args, Path("figures")),
        max_shift=args.max_shift,
        columns=columns,
        formats=_formats(args),
    )
    for path in report.paths:
        print(path)
    print(report.line())
    return 0


# -------------------------------------------------------------------------------------------- selfcheck


def cmd_selfcheck(args) -> int:
    from attnlab.inspection.selfcheck import format_selfcheck, run_selfcheck, selfcheck_sentences

    if args.sentences < 1:
        raise AttnlabError(f"--sentences {args.sentences} must be >= 1")
    tr = _translator(args)
    if args.text:
        sentences, where = list(args.text), "the command line"
    else:
        sentences, where = selfcheck_sentences(tr, args.sentences)
    results = run_selfcheck(tr, sentences)
    header = (
        f"selfcheck of {args.run} ({tr.cfg.model.kind}, checkpoint {args.checkpoint}, {tr.device}) "
        f"on {len(sentences)} sentences from {where}"
    )
    print(format_selfcheck(results, header))
    return 0 if all(r.passed for r in results) else 1


# --------------------------------------------------------------------------------------------- register


def register(sub) -> None:
    """Add the subcommands to the ``attnlab`` parser's subparsers ``sub``."""
    a = sub.add_parser(
        "attention", help="attention maps of a sentence: layers × heads, token-labelled (§23–25)"
    )
    _add_run_args(a)
    a.add_argument("sentence", help='English sentence, e.g. "i\'m home ."')
    a.add_argument("--out", help="folder for the figures (default: RUN/figures)")
    a.add_argument("--beam", type=int, help="beam size of the translation whose maps are drawn (default 1)")
    a.add_argument(
        "--pad", type=int, default=3, help="extra <pad> positions on the source, as in a batch (§23)"
    )
    a.add_argument(
        "--timeline",
        action="store_true",
        help="draw how the sentence's cross-attention formed during training (needs it as a probe)",
    )
    a.add_argument("--json", action="store_true", help="also write the maps as JSON (the web page's format)")
    a.add_argument("--formats", default="png,svg", help="comma-separated figure formats (default png,svg)")
    a.set_defaults(func=cmd_attention)

    e = sub.add_parser(
        "explain",
        help="one sentence through the model: ids, embeddings, gates, attention, "
        "logits, loss; parameters vs computed values (§4–9)",
    )
    _add_run_args(e)
    e.add_argument("sentence")
    e.add_argument("--reference", help="a French reference: also show the teacher-forced loss and BLEU")
    e.add_argument("--top", type=int, default=5, help="how many of the most probable tokens to show per step")
    e.set_defaults(func=cmd_explain)

    p = sub.add_parser("params", help="trainable parameters by module, count and share (§9, §21, §28.4)")
    p.add_argument("run", nargs="?", help="run folder (or use --model)")
    p.add_argument(
        "--model",
        choices=("seq2seq", "bahdanau", "transformer", "decoder-only"),
        help="count an untrained model built from the preset and overrides",
    )
    p.add_argument("--checkpoint", default="best")
    p.add_argument("--device", help=argparse.SUPPRESS)
    p.add_argument("--src-vocab", type=int, dest="src_vocab", help="source vocabulary size (with --model)")
    p.add_argument("--tgt-vocab", type=int, dest="tgt_vocab", help="target vocabulary size (with --model)")
    p.add_argument("--out", help="folder for the bar chart (default: RUN/figures, or ./figures)")
    p.add_argument("--verbose", action="store_true", help="list every tensor with its shape")
    p.add_argument("--formats", default="png,svg")
    p.add_argument("--config", help="TOML config file (with --model)")
    p.add_argument("--data", metavar="PATH", help="corpus location, to size the vocabularies (with --model)")
    p.add_argument("overrides", nargs="*", metavar="section.key=value", help="typed overrides (with --model)")
    p.set_defaults(func=cmd_params)

    q = sub.add_parser(
        "positional", help="the sinusoidal positional encoding and its rotation property (§13–16)"
    )
    q.add_argument("--dim", type=int, default=32)
    q.add_argument("--positions", type=int, default=60)
    q.add_argument("--max-shift", type=int, default=10, dest="max_shift", help="largest offset δ checked")
    q.add_argument("--columns", help="columns to draw as curves, e.g. 0,1,6,7")
    q.add_argument("--out", help="folder for the figures (default ./figures)")
    q.add_argument("--formats", default="png,svg")
    q.set_defaults(func=cmd_positional)

    s = sub.add_parser(
        "selfcheck",
        help="padding, causal mask, KV cache, beam 1 == greedy, batched == single: "
        "pass/fail on your trained model",
    )
    _add_run_args(s)
    s.add_argument("text", nargs="*", help="sentences to check with (default: the run's valid split)")
    s.add_argument("--sentences", type=int, default=8, help="how many valid-split sentences to use")
    s.set_defaults(func=cmd_selfcheck)
