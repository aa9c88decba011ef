"""`attnlab train` and `attnlab config`: a config from a preset, a file, flags and overrides; then training."""

from __future__ import annotations

import argparse
import math
import os
import sys
import tomllib
from pathlib import Path

from attnlab import config as config_mod
from attnlab.cli.common import (
    add_config_args,
    add_device_arg,
    add_verbosity_args,
    build_config,
    say,
    show_progress,
)
from attnlab.config import MODEL_KINDS
from attnlab.errors import AttnlabError
from attnlab.i18n import _
from attnlab.interrupts import exit_code


def cmd_train(args) -> int:
    from attnlab.progress import json_stderr

    if not 0 < args.log_interval < math.inf:  # NaN fails both comparisons: no line would ever be due
        raise AttnlabError(_("--log-interval {log_interval:g} must be a finite number of seconds above 0 "
                             "(default 10)").format(log_interval=args.log_interval))
    with json_stderr(args.log_format == "json"):  # every line of the log parses, warnings included
        return _train(args)


def _train(args) -> int:
    from attnlab.runs import read_run
    from attnlab.training.launch import launch_nproc, processes
    from attnlab.training.loop import train
    from attnlab.training.resume import check_resume_overrides
    from attnlab.training.run_lock import lock_run_folder

    out = Path(args.out)
    if args.resume:
        saved = read_run(out).config
        cfg = build_config(args, dataset=args.dataset, base=saved)
        if args.model and args.model != cfg.model.kind:
            raise AttnlabError(_("--model {model} differs from the run's model.kind={kind}; a resumed "
                                 "run keeps its model").format(model=args.model, kind=cfg.model.kind))
        check_resume_overrides(saved, cfg, out)  # here too: before --nproc starts torchrun's workers
    else:
        if not args.model:
            raise AttnlabError(_("--model is required for a new run; choose one of: {choices}").format(choices=', '.join(MODEL_KINDS)))
        cfg = build_config(args, kind=args.model, dataset=args.dataset)  # train.size is settled by train()
    if processes(args.nproc, cfg.train.device) > 1:
        lock = lock_run_folder(out)  # held, through torchrun, until the job's last process ends
        try:
            return launch_nproc(args.nproc, sys.argv[1:], lock_fd=lock.fd)
        finally:
            lock.release()
    if os.environ.get("RANK", "0") == "0":
        say(args, f"config of {out}:\n{config_mod.dumps_toml(cfg)}")
    res = train(cfg, out, resume=args.resume, progress=show_progress(args), argv=sys.argv,
                explicit=_explicit_keys(args), log_format=args.log_format, log_interval_s=args.log_interval)
    stop_code = exit_code(res.signal) if res.stopped_by == "signal" else 0  # 130 Ctrl-C, 143 SIGTERM
    if os.environ.get("RANK", "0") != "0":  # under torchrun only rank 0 reports
        return stop_code
    if res.threads:
        say(args, res.threads)  # how the thread count followed the load (attnlab/threads.py)
    v = res.last_valid
    line = _("stopped by {why} at step {step} (epoch {epoch}); {speed:,.0f} target tokens/s").format(
        why=res.stopped_by, step=res.step, epoch=res.epoch, speed=res.tokens_per_s)
    if "valid_bleu" in v:
        line += _("; valid loss {loss:.3f}, BLEU {bleu:.2f} (best {best:.2f})").format(
            loss=v["valid_loss"], bleu=v["valid_bleu"], best=res.best_bleu)
    elif "valid_fill_acc" in v:  # a fill model (encoder-only): masked-token accuracy, its best checkpoint's figure
        line += _("; valid loss {loss:.3f}, fill accuracy {acc:.1f}% (best {best:.1f}%)").format(
            loss=v["valid_loss"], acc=v["valid_fill_acc"], best=res.best_bleu)
    print(line)
    print(_("run folder: {path}").format(path=out))
    if res.stopped_by == "signal":
        print(_("interrupted: saved the last checkpoint; continue with `attnlab train --resume --out {path}`").format(
            path=out))
        return stop_code
    return 0


def _add_train_config_args(p: argparse.ArgumentParser, model_required: bool) -> None:
    """The options that shape a training config, shared by `train` and `config` (same line, same config)."""
    p.add_argument("--model", choices=MODEL_KINDS, required=model_required,
                   help=_("model kind; its preset is the starting config, and a --config file's model.kind must be "
                          "the same") + (
                       "" if model_required else _(" (default: none: required for a new run; --resume keeps "
                                                   "the run's own)")))
    p.add_argument("--dataset", choices=(*config_mod.DATASETS, config_mod.OWN_CORPUS), default=None,
                   help=_("fra-eng or cmn-eng (Tatoeba English-French, English-Mandarin: data.direction=en-zh "
                          "or zh-en), the offline numbers task (English to data.tgt_lang: {choices}), or file: a "
                          "corpus of your own read from --data (implied by a --data that is not a zip, a folder or a "
                          "named corpus's file) (default: the corpus --data names, else the preset's, "
                          "fra-eng)").format(choices=', '.join(config_mod.NUMBERS_LANGS)))
    p.add_argument("--max-minutes", type=float, dest="max_minutes", metavar="M",
                   help=_("time budget in minutes; the schedule and (train.size=auto) the model are "
                          "planned on it (default: the config's train.max_minutes; 0 = no time limit)"))
    p.add_argument("--max-steps", type=int, dest="max_steps", metavar="N",
                   help=_("stop after N updates (default: the config's train.max_steps; 0 = no step "
                          "limit)"))
    p.add_argument("--size", choices=config_mod.SIZES,
                   help=_("model/vocabulary/batch size: auto fits a minute budget to this machine's "
                          "measured speed; base = the preset as it is; or a tier by name; notes = the "
                          "notes' own sizes, 32-wide embeddings and states and an untied W_o (notes "
                          "§5–8) (default: the config's, auto)"))
    p.add_argument("--seed", type=int, help=_("random seed (default: the config's train.seed, 42)"))
    p.add_argument("--threads", type=int,
                   help=_("torch threads (default: the config's train.threads; 0 = adaptive: the count "
                          "measured fastest now, up to one per core this process may use)"))
    add_device_arg(p, config_key=True)
    add_config_args(p)


def _explicit_keys(args) -> frozenset[str]:
    """The dotted keys the user set: in --config, as flags or as overrides (train.size=auto leaves them)."""
    keys = {item.split("=", 1)[0].strip() for item in (getattr(args, "overrides", None) or []) if "=" in item}
    if getattr(args, "config", None):
        with open(args.config, "rb") as f:
            keys |= {f"{sec}.{k}" for sec, vals in tomllib.load(f).items() if isinstance(vals, dict) for k in vals}
    return frozenset(keys)


def cmd_config(args) -> int:
    cfg = build_config(args, kind=args.model, dataset=args.dataset)
    size = cfg.train.size
    if size == "base":
        note = ""
    elif args.resolve:
        from attnlab.training.session import settle_size

        cfg = settle_size(cfg, explicit=_explicit_keys(args))  # what train() does with these options
        note = _("# train.size = \"{size}\" resolved as `attnlab train` would (the reason, if any, is on stderr)\n"
                 ).format(size=size)
    else:
        how = (_("with a minute budget on fra-eng, a 1-second matmul probe sizes the model, vocabulary and batches "
                 "for this machine") if size == "auto" else _("the tier's model, vocabulary and batch settings"))
        note = _("# train.size = \"{size}\" is NOT applied yet: `attnlab train` applies it when it starts\n"
                 "# ({how}); add --resolve to apply it now\n").format(size=size, how=how)
    print(_("# what `attnlab train` would run with these options: the {kind} preset, then --config, the flags, the "
            "overrides").format(kind=cfg.model.kind) + "\n" + note)
    print(config_mod.dumps_toml(cfg), end="")
    return 0


def register(sub) -> None:
    """`train` and `config`: the same options make the same config."""
    t = sub.add_parser("train", help=_("train a model into a run folder"),
                       description=_("Train a model into a run folder. The config is the model's preset, then "
                                     "--config, then the flags below, then section.key=value overrides "
                                     "(`attnlab config` prints it). Ctrl-C saves; --resume continues exactly. "
                                     "Your own corpus, any pair of languages: --data my.tsv data.src_lang=en "
                                     "data.tgt_lang=de (or --data train.en,train.de, or --data train with "
                                     "data.src_lang and data.tgt_lang); its text is cut into words and marks "
                                     "that join back losslessly (metaspace), or into characters for Chinese and "
                                     "Japanese (data.preprocess=auto|d2l|moses|chars|metaspace). The run records the corpus by name, "
                                     "sha256 and languages, never by path."))
    t.add_argument("--out", required=True, metavar="RUN",
                   help=_("the run folder to create (or, with --resume, to continue)"))
    t.add_argument("--resume", action="store_true", help=_("continue the run in --out exactly where it "
                                                           "stopped"))
    _add_train_config_args(t, model_required=False)
    t.add_argument("--nproc", type=int, default=0,
                   help=_("data-parallel processes on this machine, through torchrun, at most one per "
                          "CPU core (one per GPU on CUDA); 0 or 1 = this process alone"))
    add_verbosity_args(t)
    from attnlab.progress import FORMATS, INTERVAL_S  # standard library only: the parser stays light

    t.add_argument("--log-format", choices=FORMATS, default="auto", dest="log_format",
                   help=_("progress on stderr: auto = a bar on a terminal, else plain; plain = a line "
                          "every --log-interval seconds (step, loss, lr, tokens/s, ETA); json = the "
                          "same events as JSON lines (default: auto)"))
    t.add_argument("--log-interval", type=float, default=INTERVAL_S, dest="log_interval", metavar="S",
                   help=_("seconds between plain or JSON progress lines"))
    t.set_defaults(func=cmd_train)

    c = sub.add_parser("config", help=_("print the config `attnlab train` would run, as TOML"),
                       description=_("Print, as TOML, the config `attnlab train` would start from with the same "
                                     "options: the preset, --config, the flags and the overrides. train.size=auto "
                                     "is resolved only when training starts (a 1-second matmul probe sizes the "
                                     "model for the machine); --resolve runs that probe now. The output is a "
                                     "valid --config file."))
    _add_train_config_args(c, model_required=True)
    c.add_argument("--resolve", action="store_true",
                   help=_("also settle train.size=auto for this machine, as train would (measures it "
                          "for a second)"))
    c.set_defaults(func=cmd_config)
