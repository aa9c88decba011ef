"""What the ``attnlab`` command modules share: the parser class and help layout, the config
arguments and how they become a Config, ``--device``, ``--quiet``/``--verbose`` and deprecated spellings.

:mod:`attnlab.cli` and the modules that add subcommands (``cli.views``, ``cli.analysis``, ``cli.serve`` and the
others listed in ``cli.COMMANDS``) import this module; it imports none of them, so the dependency points one
way: ``cli`` → command modules → ``cli.common`` → ``config``.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys

from attnlab import config as config_mod
from attnlab.config import DECODE_OPTIONS, Config
from attnlab.i18n import N_, _, width

__all__ = ["DEVICE_HELP", "HelpFormatter", "Parser", "add_config_args", "add_deprecated_alias", "add_device_arg",
           "load_translator",
           "add_verbosity_args", "build_config", "progress_log", "say", "show_progress"]

DEVICE_HELP = N_("auto (CUDA when there is one, else the CPU), cpu, cuda or cuda:N")  # translated where shown


class TranslatedHeadings(argparse.HelpFormatter):
    """argparse's own words (its headings, "usage:") come from its own gettext domain, which has no
    Chinese catalogue: they are attnlab's messages here, so a Chinese --help is Chinese throughout."""

    def start_section(self, heading):
        headings = {"positional arguments": N_("positional arguments"), "options": N_("options")}
        super().start_section(_(headings[heading]) if heading in headings else heading)

    def add_usage(self, usage, actions, groups, prefix=None):
        super().add_usage(usage, actions, groups, _("usage: ") if prefix is None else prefix)

    def _format_action(self, action):
        """argparse pads an option's name to the help column by len(); a Chinese name (a translated metavar)
        is two cells a character, so the padding gives back the extra cells (attnlab.i18n.width)."""
        text = super()._format_action(action)
        name = self._format_action_invocation(action)
        extra = width(name) - len(name)
        head = " " * self._current_indent + name
        if extra > 0 and text.startswith(head + " " * (extra + 2)):
            text = head + text[len(head) + extra:]
        return text

    def _get_help_string(self, action):  # argparse.ArgumentDefaultsHelpFormatter's English "(default: …)"
        text = super()._get_help_string(action)
        tail = " (default: %(default)s)"
        return text[: -len(tail)] + _(tail) if text and text.endswith(tail) else text


class HelpFormatter(TranslatedHeadings):
    """Every option's help ends with its default: ``(default: X)`` from the value, unless the help
    already says what happens without the option (it contains "(default"); flags (off unless given)
    and options whose default is None show none. A description or epilog with line breaks is kept
    as written (examples stay one per line); one without is wrapped."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or "（默认" in text or text is argparse.SUPPRESS or action.nargs == 0:
            return text
        if action.default is None or action.default is argparse.SUPPRESS or action.default == []:
            return text
        if action.option_strings or action.nargs in ("?", "*"):
            return text + _(" (default: %(default)s)")
        return text


class Parser(argparse.ArgumentParser):
    """``attnlab``'s parser and every subcommand's: :class:`HelpFormatter`, and usage errors that
    print this (sub)command's usage and one ``error:`` line pointing at its own ``--help``, exit 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        if not issubclass(kwargs["formatter_class"], TranslatedHeadings):  # a command's own layout, translated too
            kwargs["formatter_class"] = type(kwargs["formatter_class"].__name__,
                                             (TranslatedHeadings, kwargs["formatter_class"]), {})
        super().__init__(*args, **kwargs)
        for action in self._actions:  # -h's help, in the learner's language (argparse's own is English)
            if action.help == "show this help message and exit":
                action.help = _("show this help message and exit")

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, "error: " + _("{prog}: {message} (see `{prog} --help`)").format(
            prog=self.prog, message=_argparse_message(message)) + "\n")

    def unknown_options(self, unknown: list[str]):
        """The usage error for options this (sub)command does not have, with the nearest spelling it does."""
        known = [s for a in self._actions if a.help is not argparse.SUPPRESS for s in a.option_strings]
        hints = []
        for opt in (u for u in unknown if u.startswith("-")):
            close = difflib.get_close_matches(opt.split("=", 1)[0], known, n=1, cutoff=0.6)
            if close:
                hints.append(_("did you mean {close} for {opt}?").format(close=close[0], opt=opt) if len(unknown) > 1
                             else _("did you mean {close}?").format(close=close[0]))
        self.error(_("unrecognized arguments: {args}").format(args=" ".join(unknown))
                   + (f"; {'; '.join(hints)}" if hints else ""))


#: argparse's own usage errors (its gettext domain has no Chinese catalogue), as attnlab's messages: the
#: ones a learner meets first (a wrong --model or --size, a missing RUN, a value of the wrong type).
_ARGPARSE = [(re.compile(p), t) for p, t in (
    (r"^argument (?P<arg>\S+): invalid choice: (?P<value>.*) \(choose from (?P<choices>.*)\)$",
     N_("argument {arg}: invalid choice: {value} (choose from {choices})")),
    (r"^argument (?P<arg>\S+): invalid (?P<type>\w+) value: (?P<value>.*)$",
     N_("argument {arg}: invalid {type} value: {value}")),
    (r"^argument (?P<arg>\S+): expected one argument$", N_("argument {arg}: expected one argument")),
    (r"^argument (?P<arg>\S+): not allowed with argument (?P<other>\S+)$",
     N_("argument {arg}: not allowed with argument {other}")),
    (r"^the following arguments are required: (?P<args>.*)$", N_("the following arguments are required: {args}")),
    # last: a type function's own message (ArgumentTypeError), already in the current language
    (r"^argument (?P<arg>\S+): (?P<message>.*)$", N_("argument {arg}: {message}")),
)]


def _argparse_message(message: str) -> str:
    """``message`` from argparse in the current language (as it is when no pattern fits)."""
    for pattern, template in _ARGPARSE:
        m = pattern.match(message)
        if m:
            return _(template).format(**m.groupdict())
    return message


def load_translator(args, run: str | None = None, which: str | None = None):
    """The one way a command builds a Translator from its arguments: ``run`` (default ``args.run``) at
    ``--checkpoint`` (default best) on ``--device`` (default auto: the GPU when there is one), decoded by
    ``--engine`` where the command has one (an export's CTranslate2 model). Says what it loaded under
    ``--verbose``. Raises :class:`~attnlab.errors.AttnlabError` (one line) for a run it cannot load."""
    from attnlab.export.engine import load_translator as load_with_engine

    run = run if run is not None else args.run
    which = which or getattr(args, "checkpoint", None) or "best"
    device = getattr(args, "device", None) or "auto"
    from attnlab.device import cpu_threads, set_threads

    set_threads(0)  # PyTorch's threads, but no more than a CPU quota lets this process use
    tr = load_with_engine(run, which=which, device=device, engine=getattr(args, "engine", None) or "attnlab")
    say(args, f"loaded {run} ({tr.cfg.model.kind}, checkpoint {which}) on {tr.device}")
    if hasattr(tr, "adapt_threads") and getattr(tr, "engine", "attnlab") == "attnlab":
        tr.adapt_threads(cpu_threads(), say=lambda line: say(args, line))  # the count the load allows
    return tr


def add_device_arg(p: argparse.ArgumentParser, default: str | None = "auto", config_key: bool = False) -> None:
    """``--device``, ``auto`` unless given. ``config_key``: the option sets ``train.device``, so its
    default stays None (the config's own ``train.device``, itself ``auto`` unless set, must win)."""
    if config_key:
        p.add_argument("--device", default=None, metavar="DEVICE",
                       help=_("{device}; sets train.device (default: the config's, auto)").format(device=_(DEVICE_HELP)))
    else:
        p.add_argument("--device", default=default, metavar="DEVICE", help=_(DEVICE_HELP))


def add_verbosity_args(p: argparse.ArgumentParser) -> None:
    """``-q/--quiet`` and ``-v/--verbose`` for a command that reports progress on stderr. Results
    (translations, tables, the paths written) go to stdout either way; see :func:`show_progress`,
    :func:`progress_log` and :func:`say`."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true",
                   help=_("no progress bars or progress messages on stderr (results still print)"))
    g.add_argument("-v", "--verbose", action="store_true",
                   help=_("also say on stderr what was loaded and chosen (config, checkpoint, device)"))


def show_progress(args) -> bool:
    """Progress bars and progress lines on stderr: on unless ``--quiet``."""
    return not getattr(args, "quiet", False)


def progress_log(args):
    """A ``log(message)`` callable printing to stderr, or None under ``--quiet`` (the library's convention)."""
    return None if getattr(args, "quiet", False) else (lambda m: print(m, file=sys.stderr))


def say(args, message: str) -> None:
    """Print ``message`` on stderr under ``--verbose`` only."""
    if getattr(args, "verbose", False):
        print(message, file=sys.stderr)


class _DeprecatedAlias(argparse.Action):
    """An old spelling of an option: same value and dest, hidden from --help, one warning line when used."""

    def __init__(self, option_strings, dest, new: str = "", **kwargs):
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"warning: {option_string} is deprecated; use {self.new} (same meaning)", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_deprecated_alias(p: argparse.ArgumentParser, old: str, new: str, dest: str, **kwargs) -> None:
    """Keep ``old`` working as ``new`` (``dest``, ``type`` …) without showing it; the new option keeps the default."""
    p.add_argument(old, action=_DeprecatedAlias, new=new, dest=dest, default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS, **kwargs)


def add_run_data_arg(p: argparse.ArgumentParser) -> None:
    """``--data`` for a command that reads a trained run's corpus again: a run records its corpus by name
    and checksum, not where it was (data/corpus.py ``for_run``), so the location is given now."""
    p.add_argument("--data", metavar="PATH",
                   help=_("the zip (fra-eng.zip, cmn-eng.zip), text file or folder holding the run's corpus (default: "
                          "$ATTNLAB_DATA_DIR, then the cache); for a run on a corpus of your own, its "
                          "TSV, files A,B or prefix"))


DATA_HELP = N_("the corpus: Tatoeba's fra-eng.zip or cmn-eng.zip, its fra.txt or cmn.txt, or a folder holding one "
             "(default: $ATTNLAB_DATA_DIR, then "
             "the cache); or a parallel corpus of your own, with data.src_lang=.. data.tgt_lang=.. (ISO 639-1 "
             "codes): a TSV (source<TAB>target[<TAB>attribution]), two aligned files A,B (one sentence a line; "
             "train.en,train.de needs no languages), or a prefix P of P.<src_lang> and P.<tgt_lang>")


def add_config_args(p: argparse.ArgumentParser) -> None:
    """``--config``, ``--data`` and the trailing ``section.key=value`` overrides."""
    p.add_argument("--config", metavar="FILE",
                   help=_("TOML config file with sections data/model/train/decode (default: none, the "
                          "preset alone)"))
    p.add_argument("--data", metavar="PATH", help=_(DATA_HELP))
    p.add_argument("overrides", nargs="*", default=[], metavar="section.key=value",
                   help=_("typed overrides, applied last, e.g. train.lr=3e-4 model.num_layers=3"))


def build_config(args, kind: str | None = None, dataset: str | None = None, base: Config | None = None) -> Config:
    """Preset for the model kind, then --config, then shortcut flags, then dotted overrides. A --config
    file whose ``model.kind`` is not ``kind`` (--model) is an error, not overridden."""
    cfg = base or Config()
    if kind is not None and base is None:
        cfg = config_mod.preset(kind)
    if getattr(args, "config", None):
        cfg = config_mod.load_toml(args.config, cfg)
        if kind is not None and cfg.model.kind != kind:  # the file names another kind: neither silently wins
            raise config_mod.ConfigError(
                _("--model {kind} contradicts model.kind = \"{kind2}\" in {config}; give --model "
                  "{kind2}, or drop model.kind from the file").format(kind=kind, kind2=cfg.model.kind, config=args.config))
    extra = []
    if kind is not None:
        extra.append(f"model.kind={kind}")
    if dataset is not None:
        extra.append(f"data.dataset={dataset}")
    if getattr(args, "data", None):
        extra.append(f"data.data_path={args.data}")
    for flag, key in (("max_minutes", "train.max_minutes"), ("max_steps", "train.max_steps"),
                      ("seed", "train.seed"), ("threads", "train.threads"), ("device", "train.device"),
                      ("size", "train.size")):
        if getattr(args, flag, None) is not None:
            extra.append(f"{key}={getattr(args, flag)}")
    overrides = list(getattr(args, "overrides", []) or [])
    if getattr(args, "data", None) and dataset is None and base is None and not _names_dataset(args, overrides):
        extra += _own_corpus(args.data, overrides)
    return config_mod.apply_overrides(cfg, extra + overrides)


def _names_dataset(args, overrides: list[str]) -> bool:
    """Whether the user chose ``data.dataset`` (an override or the --config file)."""
    if any(item.split("=", 1)[0].strip() == "data.dataset" for item in overrides):
        return True
    if getattr(args, "config", None):
        import tomllib

        with open(args.config, "rb") as f:  # load_toml has read and checked it already
            return "dataset" in (tomllib.load(f).get("data") or {})
    return False


def _own_corpus(data: str, overrides: list[str]) -> list[str]:
    """The overrides ``--data`` implies when the dataset is not named: the named corpus a file's name says
    (``cmn-eng.zip``, or ``cmn.txt`` given no languages: ``data.dataset=cmn-eng``); none for another zip or a
    folder (Tatoeba's fra-eng, the default; given languages, only a folder holding fra-eng); else
    ``data.dataset=file``, and the languages of two files
    ``A.xx,B.yy`` from their suffixes when they are not given."""
    from pathlib import Path

    from attnlab.data.pairs import corpus_named_by  # here: building the parser never imports the data package

    given = {item.split("=", 1)[0].strip() for item in overrides}
    langs = {"data.src_lang", "data.tgt_lang"} & given
    path = Path(data).expanduser()
    named = corpus_named_by(path.name)
    if named and (path.suffix.lower() == ".zip" or not langs):
        return [f"data.dataset={named}"]
    if path.is_dir() and langs:  # languages given: fra-eng only when the folder holds it (else "is a folder")
        from attnlab.data.download import find_in

        if find_in(path) is None:
            return [f"data.dataset={config_mod.OWN_CORPUS}"]
    if path.is_dir() or path.suffix.lower() == ".zip":
        return []
    out = [f"data.dataset={config_mod.OWN_CORPUS}"]
    parts = [Path(part.strip()).suffix.lstrip(".") for part in data.split(",")] if "," in data else []
    if not langs and len(parts) == 2 and all(code in config_mod.LANGUAGES for code in parts):
        out += [f"data.src_lang={parts[0]}", f"data.tgt_lang={parts[1]}"]
    return out


# ------------------------------------------------------------------------------------------ decoding options

def _dest(option: str) -> str:
    """argparse's own name for an option's value: ``--max-len-a`` → ``max_len_a``."""
    return option.lstrip("-").replace("-", "_")


def add_decode_args(p: argparse.ArgumentParser, nbest: bool = True, notes: dict[str, str] | None = None) -> None:
    """The :data:`DECODE_OPTIONS` (``nbest``: with ``--nbest``), each None unless given, so the run's own
    ``decode.*`` setting holds (see :func:`decode_overrides`); ``--max-len-a`` is ``args.max_len_a``.
    ``notes``: a key's extra help on this command (``serve``: what a request may change, and its cap)."""
    for option, key, kind, helptext in DECODE_OPTIONS:
        if key == "nbest" and not nbest:
            continue
        tail = _(" (default: the run's decode.{key})").format(key=key)
        if notes and key in notes:
            tail = "; " + notes[key] + tail
        if kind is bool:
            p.add_argument(option, action="store_const", const=True, default=None, help=_(helptext) + tail)
        else:
            p.add_argument(option, type=kind, default=None, metavar="N" if kind is int else "X",
                           help=_(helptext) + tail)


def decode_overrides(args) -> list[str]:
    """The ``decode.KEY=VALUE`` overrides the given :data:`DECODE_OPTIONS` stand for."""
    out = []
    for option, key, _kind, _help in DECODE_OPTIONS:
        value = getattr(args, _dest(option), None)
        if value is not None:
            out.append(f"decode.{key}={str(value).lower() if isinstance(value, bool) else value}")
    return out


_SETTING = re.compile(r"^\s*(?P<section>[A-Za-z_]+)\.(?P<key>[A-Za-z_][A-Za-z0-9_.]*)\s*=")


def split_settings(items: list[str]) -> tuple[list[str], list[str]]:
    """``items`` (a command's trailing words) as (the ``section.key=value`` settings that name a config
    section, the rest): ``decode.length_penalty=0.6`` is a setting, never a sentence to translate."""
    settings, rest = [], []
    for item in items:
        m = _SETTING.match(item)
        (settings if m and m["section"] in config_mod.SECTIONS else rest).append(item)
    return settings, rest


def apply_decode_settings(tr, args, settings: list[str]) -> config_mod.DecodeConfig:
    """Decode ``tr`` (a Translator) with its run's ``decode`` section, then the :data:`DECODE_OPTIONS`
    given, then the trailing ``decode.key=value`` settings; returns the decode config now in force.
    A setting of another section (the model, its data, its training are fixed by the trained weights) or
    an unknown key is a one-line :class:`~attnlab.config.ConfigError`."""
    given = decode_overrides(args) + settings
    if given:
        tr.set_decode(config_mod.apply_decode_overrides(tr.cfg, given).decode)
        say(args, "decoding with " + " ".join(given))
    return tr.cfg.decode
