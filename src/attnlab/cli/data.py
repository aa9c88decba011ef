"""``attnlab data``: corpus statistics and the notes' §4 tokens → ids walk-through
(the library is :mod:`attnlab.data.walkthrough`). Thin: parse, call the library, print.

``--run RUN`` follows the sentence through that run's own tokenizer (word vocabulary or BPE), so the
ids are the rows of its embedding table, padded to its ``data.num_steps``; without it a fresh
tokenizer is built from the corpus, as ``attnlab train`` would build one.

The handler imports the library in its body, so building the ``attnlab`` parser never imports torch.
"""

from __future__ import annotations

from attnlab import config as config_mod
from attnlab.cli.common import add_config_args, build_config
from attnlab.errors import AttnlabError
from attnlab.i18n import _
from attnlab.notes import cite


def _run_files(run: str):
    """A run folder's (or an `attnlab export` folder's) config, tokenizers and meta."""
    from attnlab import runs

    return runs.read_export(run) if runs.is_export(run) else runs.read_run(run)


def _run_stats(args, files, tokenizers) -> str:
    """The statistics the run recorded when it was trained (meta.json), else computed with its tokenizers."""
    from attnlab.data import corpus

    stats = files.meta.get("data_stats")
    if stats:
        try:
            text = corpus.format_stats(corpus.Prepared(*tokenizers, splits={}, stats=stats))
            return text + "\n" + _("(statistics recorded in {run}/meta.json when the run was trained)").format(
                run=args.run)
        except (KeyError, TypeError):
            pass  # an older meta.json without every field: recompute below
    from attnlab import runs

    prepared = corpus.prepare(corpus.for_run(files.config.data, args.data), tokenizers=tokenizers)
    corpus.check_same_corpus(prepared, runs.recorded_corpus(files.meta), args.run)
    return corpus.format_stats(prepared)


def cmd_data(args) -> int:
    from attnlab.data import corpus, numbers
    from attnlab.data.pairs import pair_of
    from attnlab.data.vocab import load_tokenizer
    from attnlab.data.walkthrough import format_walkthrough, walk_through

    if args.write_tsv is not None:
        if args.run is not None:
            raise AttnlabError(_("--write-tsv writes a corpus, --run reads a run's: drop one of them"))
        cfg = build_config(args, dataset=args.dataset)
        n = corpus.write_tsv(cfg.data, args.write_tsv)
        src, tgt = pair_of(cfg.data).langs
        print(_("wrote {n:,} {src}-{tgt} pairs of {dataset} to {path}; train on them with --data {path} "
                "data.src_lang={src} data.tgt_lang={tgt}").format(n=n, src=src, tgt=tgt, dataset=cfg.data.dataset,
                                                                  path=args.write_tsv))
        return 0
    if args.run is not None:
        if args.dataset or args.config or args.overrides:
            raise AttnlabError(_("--dataset, --config and section.key=value overrides do not apply with --run: "
                                 "a run keeps the data config it was trained with; drop them or drop --run"))
        files = _run_files(args.run)
        tokenizers = (load_tokenizer(files.tokenizers["src"]), load_tokenizer(files.tokenizers["tgt"]))
        data_cfg = files.config.data
        num_steps = data_cfg.num_steps
        print(_run_stats(args, files, tokenizers))
    else:
        cfg = build_config(args, dataset=args.dataset)
        prepared = corpus.prepare(cfg.data)
        data_cfg = cfg.data
        tokenizers, num_steps = (prepared.src_tok, prepared.tgt_tok), cfg.data.num_steps
        print(corpus.format_stats(prepared))
    if args.sentence is not None:
        print()
        sentence = numbers.source_text(data_cfg, args.sentence, tokenizers[0])  # spelled as the model read it
        print(format_walkthrough(walk_through(tokenizers[0], sentence, num_steps), run=args.run))
    return 0


def register(sub) -> None:
    """Add ``data`` to the ``attnlab`` parser's subparsers ``sub``."""
    d = sub.add_parser("data", help=_("corpus statistics and the tokens → ids walk-through of notes {cite}").format(
                           cite=cite(4)),
                       description=_("Corpus statistics, and one sentence followed through preprocessing, "
                                     "the vocabulary and padding (notes {cite}). With --run, the run's own "
                                     "tokenizer and num_steps: the ids are the rows of its embedding table.").format(
                           cite=cite(4)))
    d.add_argument("--dataset", choices=(*config_mod.DATASETS, config_mod.OWN_CORPUS), default=None,
                   help=_("which corpus: fra-eng, cmn-eng (data.direction=en-zh or zh-en), "
                          "numbers, or file (your own, from --data; implied by a --data that is not a zip, a "
                          "folder or a named corpus's file) (default: the corpus --data names, else fra-eng; with "
                          "--run, the run's)"))
    d.add_argument("--sentence", help=_("a source sentence to follow through preprocessing and the "
                                        "vocabulary (default: none, the statistics alone)"))
    d.add_argument("--run", metavar="RUN",
                   help=_("a trained run folder: use its tokenizer, num_steps and recorded statistics "
                          "(default: none, a tokenizer built afresh from the corpus)"))
    d.add_argument("--write-tsv", metavar="FILE", dest="write_tsv",
                   help=_("write the corpus's pairs as a source<TAB>target TSV and stop, e.g. the "
                          "numbers task into Japanese: --dataset numbers data.tgt_lang=ja "
                          "data.numbers_size=2000 --write-tsv ja.tsv (default: none)"))
    add_config_args(d)
    d.set_defaults(func=cmd_data)
