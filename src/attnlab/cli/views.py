"""Subcommands that let a person *see* the notes' ideas on a model: ``attention``, ``explain``,
``params``, ``positional`` and ``selfcheck`` (thin: parse, call the library, print).

Every command that draws takes ``--save-dir DIR`` (default: ``RUN/figures``) and prints each path it wrote.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnlab.cli.common import (
    add_deprecated_alias,
    add_device_arg,
    add_run_data_arg,
    build_config,
    load_translator,
)
from attnlab.cli.present import present, stem
from attnlab.config import MODEL_KINDS
from attnlab.errors import AttnlabError
from attnlab.i18n import N_, _
from attnlab.notes import cite


def _out_dir(args, default: Path) -> Path:
    """``--save-dir``, else ``default``: created and checked writable (one line if it cannot be)."""
    from attnlab.files import writable_folder

    return writable_folder(Path(args.save_dir) if args.save_dir else default, "--save-dir")


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help=_("run folder (from `attnlab train --out`)"))
    p.add_argument("--checkpoint", default="best", help=_("best, last or step-N"))
    add_device_arg(p)


def _add_save_dir(p: argparse.ArgumentParser, what: str, default: str) -> None:
    """``--save-dir DIR`` (the old ``--out`` still works, with a warning): where the figures go."""
    p.add_argument("--save-dir", dest="save_dir", metavar="DIR", help=_("folder for {what} (default: "
                                                                        "{default})").format(what=what, default=default))
    add_deprecated_alias(p, "--out", "--save-dir", dest="save_dir")


def _formats(args) -> tuple[str, ...]:
    return tuple(f.strip() for f in args.formats.split(",") if f.strip())


DEFAULT_PAD = 3  # `attention --pad`: the <pad> columns a figure shows after the source (notes §23)


# -------------------------------------------------------------------------------------------- attention


def cmd_attention(args) -> int:
    from attnlab import maps
    from attnlab.data.pairs import pair_of
    from attnlab.evaluation.alignment import check_result
    from attnlab.models import traits

    if args.beam is not None and args.beam < 1:
        raise AttnlabError(_("--beam {beam} must be >= 1").format(beam=args.beam))
    if args.pad < 0:
        raise AttnlabError(_("--pad {pad} must be >= 0 (the <pad> positions added after the source; 0 = none)")
                           .format(pad=args.pad))
    if args.timeline:  # reads probes.jsonl: no model needed
        from attnlab.runs import read_run

        read_run(args.run)  # a missing RUN is one line, before its figures folder is made
        for path in maps.draw_timeline(args.run, args.sentence, _out_dir(args, Path(args.run) / "figures")):
            print(path)
        return 0
    tr = load_translator(args)
    out = _out_dir(args, Path(args.run) / "figures")
    beam = args.beam or 1
    if not traits(tr.cfg.model).attention:
        raise maps.no_attention(tr.cfg.model.kind)
    if not tr.encode_source(args.sentence)[0]:
        raise AttnlabError(_("{sentence!r} has no token after preprocessing; give a sentence in the "
                             "run's source language").format(sentence=args.sentence))
    result = tr.attention(args.sentence, beam_size=beam, extra_pad=args.pad)
    print(f"{args.sentence} → {result.translation}")
    # the one alignment verdict (§1, §25): on the notes' example, what explain, doctor, the demo and the web say
    check = check_result(result, pair_of(tr.cfg.data))
    if check is not None and check.table:  # formed, not formed, or can't judge (a row of the table missing)
        print(check.summary())
    name = stem("", sentence=args.sentence, beam=None if beam == 1 else beam,
                pad=None if args.pad == DEFAULT_PAD else args.pad, checkpoint=args.checkpoint)
    for path in result.save(out, tr.name, _formats(args), stem=name):
        print(path)
    if args.json:
        from attnlab.files import atomic_write_json

        path = out / f"{name}_attention.json"
        atomic_write_json(path, result.to_json())  # the web page's schema
        print(path)
    return 0


# ---------------------------------------------------------------------------------------------- explain


def cmd_explain(args) -> int:
    from attnlab.analysis.explain import sentence

    if args.top < 1:
        raise AttnlabError(_("--top {top} must be >= 1").format(top=args.top))
    tr = load_translator(args)
    # a GRU model's gates only (the others draw nothing: RUN/figures is then not made); one figure per sentence
    present(lambda: sentence.run(tr, args.sentence, reference=args.reference, top_k=args.top),
            stem("", sentence=args.sentence, checkpoint=args.checkpoint) + "_gates", save_dir=args.save_dir,
            default_dir=Path(args.run) / "figures", files=(), formats=("png",), said=GATES_WROTE)
    return 0


GATES_WROTE = N_("  heatmaps of every unit × step (z, r, h̃, h_t; encoder and decoder): {path}")


# ----------------------------------------------------------------------------------------------- params


def cmd_params(args) -> int:
    from attnlab.analysis.explain import params
    from attnlab.models import build_model

    if args.run is not None and "=" in args.run and not Path(args.run).is_dir():
        # argparse gives the first `section.key=value` to the optional RUN positional
        args.overrides, args.run = [args.run, *args.overrides], None
    if (args.run is None) == (args.model is None):
        raise AttnlabError(
            _("give either a run folder (attnlab params RUN) or --model KIND, not both or neither")
        )
    if args.run is not None:
        if args.overrides:
            raise AttnlabError(_("section.key=value overrides only apply with --model; a run keeps its "
                                 "config"))
        tr = load_translator(args)
        model, title = tr.model, tr.name
        vocab = (len(tr.src_tok), len(tr.tgt_tok))
        name, default = "params", Path(args.run) / "figures"
    else:
        cfg = build_config(args, kind=args.model)
        title = f"{args.model} (preset + overrides)"
        if cfg.train.size not in ("auto", "base"):
            # a named size is the model `attnlab train` would build (the notes' 32 wide, a tier's); "auto" depends
            # on the machine and the budget, so the preset is shown
            from attnlab.cli.train import _explicit_keys
            from attnlab.training import sizing

            cfg = sizing.resolve(cfg, _explicit_keys(args))[0]
            title = f"{args.model} (preset, train.size={cfg.train.size}, + overrides)"
        vocab = _vocab_sizes(args, cfg)
        model = build_model(cfg.model, *vocab)
        # the settings that change the model: another override, config file or vocabulary, another file
        name = stem(f"params_{args.model}", text=args.overrides, src=args.src_vocab, tgt=args.tgt_vocab,
                    config=Path(args.config).name if args.config else None)
        default = Path("figures")
    present(lambda: params.run(model, title, vocab=vocab, verbose=args.verbose), name, save_dir=args.save_dir,
            default_dir=default, files=(), formats=_formats(args))
    return 0


def _vocab_sizes(args, cfg) -> tuple[int, int]:
    """--src-vocab/--tgt-vocab, else the vocabularies the data config would build."""
    if args.src_vocab is not None and args.tgt_vocab is not None:
        if min(args.src_vocab, args.tgt_vocab) < 5:
            raise AttnlabError(
                _("--src-vocab and --tgt-vocab must be >= 5 (4 special tokens + at least one word)")
            )
        return args.src_vocab, args.tgt_vocab
    if args.src_vocab is not None or args.tgt_vocab is not None:
        raise AttnlabError(_("give both --src-vocab and --tgt-vocab, or neither (then the data config "
                             "decides)"))
    from attnlab.data import corpus

    prepared = corpus.prepare(cfg.data)
    return len(prepared.src_tok), len(prepared.tgt_tok)


# ------------------------------------------------------------------------------------------- positional


def cmd_positional(args) -> int:
    from attnlab.analysis.explain import positional

    columns = None
    if args.columns:
        try:
            columns = [int(c) for c in args.columns.split(",") if c.strip()]
        except ValueError:
            raise AttnlabError(
                _("--columns {columns!r} must be integers separated by commas, e.g. 0,1,6,7").format(columns=args.columns)
            ) from None
    # with RUN: the run's own d, its own position table, and §13–14 on its model
    tr = load_translator(args) if args.run is not None else None
    sentence = args.sentence or (_first_example(tr.cfg.data) if tr is not None else None) or "i'm home ."
    shown = "_c" + "-".join(map(str, columns)) if columns else ""  # the curves drawn: another choice, another file

    def analyse():
        return positional.run(args.dim, args.positions, args.max_shift, columns, translator=tr, sentence=sentence)

    present(analyse, lambda r: f"positional_encoding_d{r.dim}_p{r.positions}{shown}",  # the d the report settled
            save_dir=args.save_dir, default_dir=Path(args.run) / "figures" if args.run else Path("figures"),
            files=(), formats=_formats(args))
    return 0


def _first_example(data) -> str | None:
    """The first example sentence of a run's pair (:func:`attnlab.data.pairs.pair_of`): one it can read."""
    from attnlab.data.pairs import pair_of

    pair = pair_of(data)
    return next(iter([s for s, _ in pair.examples] or pair.probes), None)


# -------------------------------------------------------------------------------------------- selfcheck


def cmd_selfcheck(args) -> int:
    from attnlab.analysis.diagnose import selfcheck

    if args.sentences < 1:
        raise AttnlabError(_("--sentences {sentences} must be >= 1").format(sentences=args.sentences))
    tr = load_translator(args)
    report = present(lambda: selfcheck.run(tr, list(args.text) or None, args.sentences, args.data), "selfcheck",
                     save_dir=None, default_dir=None)
    return 0 if report.passed else 1


# --------------------------------------------------------------------------------------------- register


def register(sub) -> None:
    """Add the subcommands to the ``attnlab`` parser's subparsers ``sub``."""
    a = sub.add_parser(
        "attention", help=_("attention maps of a sentence: layers × heads, token-labelled: notes {cite}").format(
            cite=cite("23–25"))
    )
    _add_run_args(a)
    a.add_argument("sentence", metavar=_("sentence"), help=_("a sentence in the run's source language"))
    _add_save_dir(a, "the figures", "RUN/figures")
    a.add_argument("--beam", type=int, help=_("beam size of the translation whose maps are drawn "
                                              "(default: 1, greedy)"))
    a.add_argument(
        "--pad", type=int, default=DEFAULT_PAD, help=_("extra <pad> positions on the source, as in a batch: notes {section}").format(section=cite(23))
    )
    a.add_argument(
        "--timeline",
        action="store_true",
        help=_("draw how the sentence's cross-attention formed during training (needs it as a probe)"),
    )
    a.add_argument("--json", action="store_true", help=_("also write the maps as JSON (the web page's "
                                                         "format)"))
    a.add_argument("--formats", default="png,svg", help=_("comma-separated figure formats"))
    a.set_defaults(func=cmd_attention)

    e = sub.add_parser(
        "explain",
        help=_("one sentence through the model: ids, embeddings, gates, attention, "
          "logits, loss; parameters vs computed values: notes {cite}").format(cite=cite("4–9")),
    )
    _add_run_args(e)
    e.add_argument("sentence", metavar=_("sentence"), help=_("a sentence in the run's source language"))
    e.add_argument("--reference", help=_("a reference translation in the run's target language: also show "
                                         "the teacher-forced loss and "
                                         "BLEU (default: none)"))
    e.add_argument("--top", type=int, default=5, help=_("how many of the most probable tokens to show "
                                                        "per step"))
    _add_save_dir(e, "<sentence>_gates.png (GRU models)", "RUN/figures")
    e.set_defaults(func=cmd_explain)

    _add_params(sub)

    q = sub.add_parser(
        "positional", help=_("the sinusoidal positional encoding and its rotation property; with RUN, "
          "order-blindness and adding vs concatenating on its model: notes {cite}").format(cite=cite("13–16"))
    )
    q.add_argument("run", nargs="?", metavar="RUN",
                   help=_("a trained run: draw its d, and show notes §13–14 on its model (default: "
                          "none, the formula alone)"))
    q.add_argument("--checkpoint", default="best", help=_("best, last or step-N (with RUN)"))
    add_device_arg(q)
    q.add_argument("--sentence", help=_("the sentence reordered for notes §13 (with RUN) (default: the "
                                        "first example of the run's language pair)"))
    q.add_argument("--dim", type=int, help=_("encoding dimension d (default: the run's num_hiddens "
                                             "with RUN, else 32)"))
    q.add_argument("--positions", type=int, default=60, help=_("positions 0 … N-1 to encode and draw"))
    q.add_argument("--max-shift", type=int, default=10, dest="max_shift", help=_("largest offset δ "
                                                                                 "checked"))
    q.add_argument(
        "--columns",
        help=_("columns to draw as curves, e.g. 0,1,6,7 (default: 6-9 as D2L draws, the first ones for "
               "a small --dim)"),
    )
    _add_save_dir(q, "the figures", "./figures")
    q.add_argument("--formats", default="png,svg", help=_("comma-separated figure formats"))
    q.set_defaults(func=cmd_positional)

    s = sub.add_parser(
        "selfcheck",
        help=_("padding, causal mask, KV cache, beam 1 == greedy, batched == single: "
          "pass/fail on your trained model"),
    )
    _add_run_args(s)
    s.add_argument(
        "text", nargs="*", default=[], metavar="TEXT", help=_("sentences to check with (default: the "
                                                              "run's valid split)")
    )
    s.add_argument("--sentences", type=int, default=8, help=_("how many valid-split sentences to use"))
    add_run_data_arg(s)
    s.set_defaults(func=cmd_selfcheck)


def _add_params(sub) -> None:
    p = sub.add_parser("params", help=_("trainable parameters by module, count and share: notes {cite}").format(
        cite=cite("9, 21, 28.4")))
    p.add_argument("run", nargs="?", metavar="RUN", help=_("run folder (or use --model)"))
    p.add_argument(
        "--model",
        choices=MODEL_KINDS,
        help=_("count an untrained model built from the preset and overrides (default: none: give RUN)"),
    )
    p.add_argument("--checkpoint", default="best", help=_("best, last or step-N (with RUN)"))
    p.add_argument("--device", help=argparse.SUPPRESS)
    p.add_argument("--src-vocab", type=int, dest="src_vocab", help=_("source vocabulary size (with "
                                                                     "--model) (default: from the data "
                                                                     "config)"))
    p.add_argument("--tgt-vocab", type=int, dest="tgt_vocab", help=_("target vocabulary size (with "
                                                                     "--model) (default: from the data "
                                                                     "config)"))
    _add_save_dir(p, "the bar chart", "RUN/figures, or ./figures with --model")
    p.add_argument("-v", "--verbose", action="store_true", help=_("also list every tensor with its "
                                                                  "shape"))
    p.add_argument("--formats", default="png,svg", help=_("comma-separated figure formats"))
    p.add_argument("--config", metavar="FILE", help=_("TOML config file (with --model) (default: none, "
                                                      "the preset alone)"))
    p.add_argument(
        "--data",
        metavar="PATH",
        help=_("corpus location, to size the vocabularies (with --model) (default: $ATTNLAB_DATA_DIR, "
               "then the cache)"),
    )
    p.add_argument(
        "overrides", nargs="*", default=[], metavar="section.key=value", help=_("typed overrides (with "
                                                                                "--model)")
    )
    p.set_defaults(func=cmd_params)
