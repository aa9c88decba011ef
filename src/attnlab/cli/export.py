"""`attnlab export`: a run's checkpoint as a self-contained folder, optionally for CTranslate2."""

from __future__ import annotations

import sys

from attnlab.cli.common import add_decode_args
from attnlab.export import FORMATS, QUANTIZATIONS
from attnlab.i18n import _


def cmd_export(args) -> int:
    import json
    import shlex
    from pathlib import Path

    from attnlab.cli.common import decode_overrides, split_settings
    from attnlab.errors import AttnlabError
    from attnlab.export.folder import export_run

    settings, rest = split_settings(args.overrides)
    if rest:
        raise AttnlabError(_("{word!r} is not a setting; after RUN OUT, export takes decode.key=value settings "
                             "(e.g. decode.beam_size=4)").format(word=rest[0]))

    try:
        here = Path.cwd().resolve()  # asked before: a replaced current folder no longer has a path
    except OSError:
        here = None
    out = export_run(args.run, args.out, which=args.checkpoint, fmt=args.format,
                     quantization=args.quantization, force=args.force, decode=decode_overrides(args) + settings)
    spec = json.loads((out / "config.json").read_text(encoding="utf-8"))
    engines = spec.get("engines") or {}
    extra = "".join(f"; {name}/ ({e['quantization']})" for name, e in engines.items())
    print(_("exported {run} ({kind}, {checkpoint}) to {out}: {files}").format(
        run=args.run, kind=spec["model_kind"], checkpoint=spec["source"]["checkpoint"], out=out,
        files=f"config.json, model.safetensors, {spec['tokenizers']['src']['file']}, "
              f"{spec['tokenizers']['tgt']['file']}{extra}"))
    if out == here:  # the shell still sits in the folder that was swapped out and removed
        print(_("note: the current folder was replaced; `cd {out}` to see the new files").format(out=out),
              file=sys.stderr)
    if engines:  # a sentence of the run's own source language (the pair's record), not the notes' English
        example = (spec.get("pair") or {}).get("example") or "…"
        print(_("translate with it: {command}").format(
            command=f"attnlab translate {out} --engine ctranslate2 {shlex.quote(example)}"))
    return 0


def register(sub) -> None:
    e = sub.add_parser(
        "export", help=_("write a run's checkpoint as a self-contained folder (safetensors, HF tokenizers, CTranslate2)"),
        description=_("Write one checkpoint as a folder that needs no run folder: config.json, model.safetensors "
                      "(config and fingerprint in its metadata) and one Hugging Face tokenizers file per language. "
                      "Every command that takes a RUN accepts it. --format ctranslate2 adds OUT/ctranslate2/, the "
                      "model for the CTranslate2 engine (`attnlab translate OUT --engine ctranslate2`). The "
                      "decoding options and decode.key=value settings become the export's decode defaults."))
    e.add_argument("run", metavar="RUN", help=_("run folder (the --out of `attnlab train`) or an "
                                                "exported folder"))
    e.add_argument("out", metavar="OUT", help=_("the folder to write"))
    e.add_argument("overrides", nargs="*", default=[], metavar="decode.key=value",
                   help=_("decode settings, applied after the options, e.g. decode.beam_size=4"))
    e.add_argument("--checkpoint", default="best", help=_("best, last, step-N or averaged (`attnlab average`)"))
    add_decode_args(e)
    e.add_argument("--format", choices=FORMATS, default="safetensors",
                   help=_("ctranslate2 also converts the Transformer or decoder-only model for "
                          "CTranslate2"))
    e.add_argument("--quantization", choices=QUANTIZATIONS, default="float32",
                   help=_("weights of the CTranslate2 model (int8: 8-bit weights, int8 matmuls on the "
                          "CPU)"))
    e.add_argument("--force", action="store_true",
                   help=_("replace OUT when it is an earlier export (never a folder holding other "
                          "files or RUN)"))
    e.set_defaults(func=cmd_export)
