"""`attnlab serve`: the attention explorer (page + HTTP API) over one or more trained runs."""

from __future__ import annotations

import argparse
import ipaddress
import math
import sys

from attnlab.cli.common import add_decode_args, add_device_arg, decode_overrides, split_settings
from attnlab.errors import AttnlabError
from attnlab.i18n import N_, _


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_serve(args) -> int:
    # Imported here, not at the top: `attnlab` imports every command module to build its parser,
    # and the web extra (fastapi, uvicorn) is optional; without it only `serve` fails, saying why.
    try:
        from attnlab.web.app import create_app
        from attnlab.web.guards import Limits, allowed_host_names
        from attnlab.web.serving import listen_socket, model_threads, serve
    except ModuleNotFoundError as e:
        raise AttnlabError(
            _("`attnlab serve` needs the web extra ({name} is missing); "
              "install it with `pip install -e '.[web]'` in the attnlab checkout (or `scripts/setup.sh dev`)").format(
                name=e.name)
        ) from None
    settings, args.runs = split_settings(args.runs)  # serve RUN decode.beam_size=4: a setting, not a run
    if not args.runs:
        raise AttnlabError(_("no run to serve; pass at least one run folder"))
    per_worker = model_threads(args.workers, args.threads)
    limits = Limits(
        max_chars=args.max_chars,
        max_sentences=args.max_sentences,
        workers=args.workers,
        max_pending=max(args.max_pending, args.workers),
        deadline_s=args.deadline,
        max_beam=args.max_beam,
        max_output_tokens=args.max_output_tokens,
        max_connections=args.max_connections,
        max_client_connections=args.max_client_connections,
        header_timeout_s=args.read_timeout,
        body_timeout_s=args.read_timeout,
        send_timeout_s=args.send_timeout,
    )
    hosts = allowed_host_names(args.host, args.allowed_hosts or ())
    # The port first: a busy or invalid one is one error line, before any model loads or banner prints.
    sock = listen_socket(args.host, args.port)
    try:
        app = create_app(args.runs, limits, which=args.checkpoint, device=args.device, allowed_hosts=hosts,
                         gold=args.gold, decode=decode_overrides(args) + settings)
    except BaseException:
        sock.close()
        raise
    if args.threads is None:  # each model thread times its batches and keeps the count the load allows
        for run in app.state.runs.values():
            if getattr(run.translator, "engine", "attnlab") == "attnlab":
                run.translator.adapt_threads(per_worker)
    port = sock.getsockname()[1]  # --port 0: the one the system chose
    if not _is_loopback(args.host):
        print(
            f"warning: serving on {args.host}: anyone who can reach this machine can use the models",
            file=sys.stderr,
        )
    if "*" in hosts:
        print(
            "warning: --allowed-host '*': any Host header is accepted (no DNS-rebinding guard)",
            file=sys.stderr,
        )
    elif args.host.strip() in ("0.0.0.0", "::", "[::]") and not args.allowed_hosts:
        print(
            f"note: requests must name this server {' or '.join(hosts)}; to reach it by another name or "
            "address add --allowed-host NAME",
            file=sys.stderr,
        )
    shown = f"[{args.host}]" if ":" in args.host else args.host
    names = ", ".join(f"{n} ({r.info['model_kind']})" for n, r in app.state.runs.items())
    print(
        _("attention explorer: http://{host}:{port}/  (runs: {names}; API reference at /docs)").format(
            host=shown, port=port, names=names),
        file=sys.stderr,
    )
    serve(app, args.host, port, limits, log_level=args.log_level, sock=sock)
    return 0


def register(sub) -> None:
    """Add `serve` to the `attnlab` subcommands (called by `attnlab.cli`)."""
    s = sub.add_parser(
        "serve",
        help=_("the attention explorer: a web page and HTTP API over trained runs"),
        description=_("Serve a page that translates and shows every attention map, plus its JSON API. "
          "Runs are named after their folder, or NAME=PATH. The page's notes speak --lang (or $ATTNLAB_LANG; "
          "a page may ask for another with ?lang=zh); its alignment view scores the heads against the gold "
          "folder of --gold, else the one `attnlab align` finds without it ($ATTNLAB_GOLD_DIR, else "
          "$ATTNLAB_DATA_DIR/hansards-enfr). The decoding options are every request's defaults; a request "
          "may give its own (POST /api/translate: beam_size, nbest, length_penalty, max_len_a, max_len_b, "
          "no_repeat_ngram_size, sampling, sampling_topk, temperature, seed), within --max-beam and "
          "--max-output-tokens."),
    )
    s.add_argument("runs", nargs="+", metavar="RUN", help=_("run folder, or NAME=PATH (e.g. "
                                                            "bahdanau=runs/b); a decode.key=value among them is a "
                                                            "setting for every run, e.g. decode.beam_size=4"))
    s.add_argument("--host", default="127.0.0.1", help=_("address to bind (default: 127.0.0.1, "
                                                         "loopback only)"))
    s.add_argument("--port", type=int, default=8000, help=_("TCP port to listen on (1-65535; 0: any "
                                                            "free one)"))
    s.add_argument(
        "--allowed-host",
        action="append",
        dest="allowed_hosts",
        metavar="NAME",
        help=_("also answer requests whose Host header is NAME (repeatable; the loopback names and a "
               "non-wildcard --host are always accepted; '*' accepts any name and turns the "
               "DNS-rebinding guard off) (default: none)"),
    )
    s.add_argument("--checkpoint", default="best", help=_("best, last or step-N (for every run)"))
    s.add_argument("--gold", metavar="DIR", help=_("the WPT-2003 en-fr gold folder of the alignment "
                                                   "view, as `attnlab align --gold` (default: "
                                                   "$ATTNLAB_GOLD_DIR, else "
                                                   "$ATTNLAB_DATA_DIR/hansards-enfr)"))
    add_device_arg(s)
    add_decode_args(s, notes={key: _(note) for key, note in SERVE_NOTES.items()})
    _limit_arguments(s)
    s.add_argument(
        "--log-level",
        default="info",
        dest="log_level",
        choices=("critical", "error", "warning", "info", "debug"),
        help=_("the server's log level (uvicorn's)"),
    )
    s.set_defaults(func=cmd_serve)


#: what ``serve`` adds to a decoding option's help: a request may change it, within the server's caps
SERVE_NOTES = {
    "beam_size": N_("a request's beam_size replaces it, up to --max-beam"),
    "nbest": N_("a request's nbest replaces it, up to --max-beam"),
    "max_len_b": N_("every output also stops at --max-output-tokens"),
    "batch_size": N_("the server's alone: a request cannot set it"),
    "max_tokens": N_("the server's alone: a request cannot set it"),
}


def _limit_arguments(s) -> None:
    """The options of `web.guards.Limits`: what one server accepts, and how much of the machine it takes."""
    s.add_argument("--workers", type=_positive, default=2, help=_("threads running models"))
    s.add_argument(
        "--threads", type=_positive, default=None, help=_("PyTorch intra-op threads (default: cores / "
                                                          "workers)")
    )
    s.add_argument(
        "--max-pending",
        type=_positive,
        default=8,
        dest="max_pending",
        help=_("translations admitted at once; more get 429"),
    )
    s.add_argument(
        "--max-chars", type=_positive, default=300, dest="max_chars", help=_("longest input accepted")
    )
    s.add_argument(
        "--max-sentences", type=_positive, default=32, dest="max_sentences",
        help=_("most sentences in one /api/translate list; a longer list gets 422 naming the limit (default: 32)"),
    )
    s.add_argument(
        "--max-beam", type=_positive, default=8, dest="max_beam",
        help=_("largest beam size, and longest n-best list, a request may ask for (and --beam, --nbest may set)")
    )
    s.add_argument("--deadline", type=_seconds, default=30.0, help=_("seconds per request that computes "
                                                                  "(translation, attribution, "
                                                                  "alignment, probes) before 504; its "
                                                                  "work stops then"))
    s.add_argument(
        "--max-output-tokens",
        type=_positive,
        default=160,
        dest="max_output_tokens",
        help=_("most output tokens per translation (a request's max_len may ask for fewer)"),
    )
    s.add_argument(
        "--max-connections",
        type=_positive,
        default=64,
        dest="max_connections",
        help=_("open connections at once; past it an idle one is closed to make room, else 503 (an eighth, "
               "at least one, stays free for /health) (default: 64)"),
    )
    s.add_argument(
        "--max-client-connections",
        type=_positive,
        default=16,
        dest="max_client_connections",
        help=_("open connections one client address may hold; its next one gets 503 (default: 16)"),
    )
    s.add_argument(
        "--read-timeout",
        type=_seconds,
        default=10.0,
        dest="read_timeout",
        help=_("seconds a client has to send a request head, and then its body (408 and closed after)"),
    )
    s.add_argument(
        "--send-timeout",
        type=_seconds,
        default=10.0,
        dest="send_timeout",
        help=_("seconds a response may wait for a client that does not read before its connection is "
               "dropped (default: 10)"),
    )


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(_("{text!r} is not a whole number").format(text=text)) from None
    if v < 1:
        raise argparse.ArgumentTypeError(_("{v} must be >= 1").format(v=v))
    return v


def _seconds(text: str) -> float:
    """A deadline in seconds: finite and > 0 (``inf`` would turn it off, ``nan`` never expires)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(_("{text!r} is not a number of seconds").format(text=text)) from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(
            _("{text} seconds: a deadline must be a finite number > 0 (it cannot be turned off); e.g. 30").format(
                text=text))
    return v
