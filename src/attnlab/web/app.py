"""The attention explorer's HTTP API and page: FastAPI over one :class:`~attnlab.translator.Translator` per run.

:func:`create_app` assembles the parts, each in a file named after it: ``guards.py`` (limits, Host
guard, body cap, cross-site check, admission), ``deadline.py`` (work that stops at its deadline),
``schemas.py`` (the request body and error bodies), ``registry.py`` (the runs and their caches),
``state.py`` (what the routes share), ``routes/`` (the endpoints), ``server.py`` (run facts, the
attention maps as JSON) and ``serving.py`` (uvicorn with read deadlines).

Endpoints (OpenAPI schema at ``/openapi.json``, a readable offline reference at ``/docs``):

- ``POST /api/translate`` ``{"text", "beam_size", "run", "max_len", "kind", "layer", "head",
  "encoding", "overview"}`` → the translation, the source and target tokens and the chosen run's
  attention maps, each kind as ``(layers, heads, queries, keys)``. By default every kind, layer and
  head, as JSON numbers (4 decimals); ``kind``/``layer``/``head`` (``"mean"`` averages the heads) pick
  one map, ``encoding`` ``"uint8"``/``"uint16"`` sends it quantised as base64, and ``overview`` adds
  a ≤48×48 max-pooled thumbnail of every layer and head (what the page draws). ``text`` may be a list
  of sentences instead: they are decoded together and answered as ``translations`` (source,
  translation and the flags, in order), without maps;
- ``POST /api/attribution`` ``{"text", "run", "method", "steps"}`` → gradient attribution (integrated
  gradients or input × gradient) of each output token beside the attention and the rollout, with
  Spearman's ρ, or the attention rollout of each self-attention stack (``routes/attribution.py``);
- ``GET /api/runs`` → what is loaded: name, model kind, parameters, layers/heads, the checkpoint, and
  test BLEU when the run folder's ``eval-test.json`` scored *that* checkpoint (``test``; otherwise
  ``test_other`` says which one it scored);
- ``GET /api/probes?run=NAME`` → the probe sentences' attention recorded during training
  (``probes.jsonl``, heads averaged), grouped by sentence and ordered by step;
- ``GET /api/alignment?run=NAME&sentences=N&links=METHOD`` → AER, precision and recall of every layer ×
  head against the WPT-2003 gold word alignments (``$ATTNLAB_GOLD_DIR``), computed as ``attnlab align``
  does on the first N gold sentences and kept per run (``routes/alignment.py``);
- ``GET /api/messages?lang=LANG`` → the page's teaching text in ``LANG`` (default: the server's
  ``--lang`` / ``$ATTNLAB_LANG``) from the CLI's one catalogue (``page_text.py``);
- ``GET /api/sections`` → what "§N" means: the notes' sections, each with D2L's numbers in the Chinese
  second edition and the English edition (``notes.SECTIONS``);
- ``GET /health`` → liveness, never behind the model;
- ``GET /`` → the explorer page (``static/``, served from the package: no CDN, nothing remote).

Limits, all checked before any model work (:class:`~attnlab.web.guards.Limits`):

- the ``Host`` header must name the server: a loopback name (``127.0.0.1``, ``localhost``, ``::1``,
  any port) or one allowed with ``--allowed-host`` (400 otherwise: a web page on another site that
  rebinds its DNS name to 127.0.0.1 cannot use the API);
- the body is at most ``max_body_bytes`` (413, also for chunked bodies without a length);
- ``text`` (each sentence of a list of at most ``max_sentences``) is 1…``max_chars`` characters, not only whitespace, with no control characters, lone
  surrogates or bidirectional overrides (422 naming the field and the position);
- at most ``max_output_tokens`` output tokens per translation (``max_len`` asks for fewer);
- at most ``max_pending`` translations, attributions, alignments and probe timelines are admitted at
  once; the next one gets 429 at once with ``Retry-After`` (never a hang); admitted work runs in a pool
  of ``workers`` threads — the model, the JSON encoding and the gzip compression all inside the
  admission slot — so the event loop, and ``/health``, stays free;
- each request that computes has ``deadline_s`` seconds (504 past it): work that has not started is
  cancelled, and started work stops itself at its next check of the clock, between output tokens or
  batches (``deadline.py``), so its admission slot is free moments after the 504;
- attribution is also bounded in size: ``steps`` ≤ 64, steps × attributed output tokens ≤ 1024
  and at most 32 of them (``routes/attribution.py``);
- a GET that computes (``/api/alignment``, ``/api/probes``) refuses a request from another site's page
  (``Sec-Fetch-Site`` other than ``same-origin``/``none``, or a foreign ``Origin``: 403), so an
  ``<img>`` on any site cannot start work here;
- a response's attention maps are at most ``max_response_bytes``: a kind that would not fit is sent
  with ``weights: null`` and an ``omitted`` note saying what to ask for instead (the translation is
  never lost);
- served by :func:`~attnlab.web.serving.serve`: at most ``max_connections`` open connections, of
  which one client address holds at most ``max_client_connections`` (503 to its next one); past the
  total an idle connection is closed to make room, and requests other than ``/health`` get 503 once
  all but a reserve are busy (``slots.py``); a request head must arrive within ``header_timeout_s``
  of its first byte (or of the connection) and its body within ``body_timeout_s`` after that (408
  and closed otherwise), a response whose bytes stay unsent for ``send_timeout_s`` is dropped with
  its connection, and an idle keep-alive connection is closed after ``keep_alive_s``; a request head
  over ``max_header_bytes`` gets 431, however it arrives. ``HEAD`` answers as ``GET`` without the body.

A request can only reach files of the loaded runs, by run *name* and fixed file names
(``eval-test.json``, ``probes.jsonl``), and the gold folder the server's environment names; no request
field is ever used as a path.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.gzip import GZipMiddleware

from attnlab._version import __version__
from attnlab.analysis.align.gold import gold_dir, read_gold
from attnlab.errors import AttnlabError
from attnlab.i18n import _, catalogue, language
from attnlab.web.guards import LOOPBACK_NAMES, BodyLimit, HostGuard, Limits, security_headers
from attnlab.web.registry import LoadedRun, load_runs
from attnlab.web.responses import GZIP_LEVEL, GZIP_MIN, HeadAsGet
from attnlab.web.routes import alignment as alignment_routes
from attnlab.web.routes import attribution as attribution_routes
from attnlab.web.routes import page
from attnlab.web.routes import runs as runs_routes
from attnlab.web.routes import translate as translate_routes
from attnlab.web.schemas import make_request_model, on_http_error, on_invalid
from attnlab.web.state import ServerState


def create_app(
    runs: Mapping[str, LoadedRun] | Sequence[str | Path],
    limits: Limits | None = None,
    which: str = "best",
    device: str = "cpu",
    allowed_hosts: Collection[str] | None = None,
    lang: str | None = None,
    gold: str | Path | None = None,
) -> FastAPI:
    """Build the app over loaded runs (or run folders, loaded here with :func:`~attnlab.web.registry.load_runs`).

    The first run is the default of ``POST /api/translate``. ``allowed_hosts``: the names the
    ``Host`` header may carry (default: the loopback names; see
    :func:`~attnlab.web.guards.allowed_host_names`). ``lang``: the language the page speaks unless it
    asks for another (default: :func:`attnlab.i18n.language`, which ``attnlab serve --lang`` sets).
    ``gold``: the WPT-2003 gold folder of the alignment view (``attnlab serve --gold``; default: found
    per request as ``attnlab align`` finds it, through ``$ATTNLAB_GOLD_DIR`` or ``$ATTNLAB_DATA_DIR``).
    Raises :class:`AttnlabError` when a run cannot be loaded, ``lang`` has no catalogue or ``gold`` is
    not a folder. The model
    thread pool is shut down with the app.
    """
    limits = limits or Limits()
    code, _catalogue = catalogue(lang or language())  # checks that the language has one
    if not isinstance(runs, Mapping):
        runs = load_runs(list(runs), which=which, device=device)
    if not runs:
        raise AttnlabError(_("no run to serve; pass at least one run folder"))
    folder = gold_dir(gold) if gold else None
    if folder is not None:
        read_gold(folder, alignment_routes.SPLIT)  # a wrong --gold stops the server before it starts
    state = ServerState.create(dict(runs), limits, lang=code, gold=folder)
    hosts = tuple(allowed_hosts) if allowed_hosts is not None else LOOPBACK_NAMES

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        state.pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(
        title="attnlab attention explorer",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        description="Translate English → French with trained attnlab runs and look at every attention map.",
    )
    app.state.runs, app.state.limits, app.state.admission = state.runs, limits, state.admission
    app.state.allowed_hosts = hosts
    _add_guards(app, limits, hosts)
    app.add_exception_handler(RequestValidationError, on_invalid)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.include_router(runs_routes.router(state))
    app.include_router(translate_routes.router(state, make_request_model(limits, list(state.runs))))
    app.include_router(attribution_routes.router(state))
    app.include_router(alignment_routes.router(state))
    app.include_router(page.router(state.lang))
    page.mount_static(app)
    return app


def _add_guards(app: FastAPI, limits: Limits, hosts: tuple[str, ...]) -> None:
    """The middleware, innermost first: each ``add_middleware`` wraps the ones before it."""
    # Small responses (pages, /api/runs) are compressed here, cheaply; the large ones (translations,
    # probes) arrive already compressed by their worker, inside the admission slot, and pass through.
    app.add_middleware(GZipMiddleware, minimum_size=GZIP_MIN, compresslevel=GZIP_LEVEL)
    app.add_middleware(HeadAsGet)  # HEAD is GET without the body, for every route
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    app.middleware("http")(security_headers)
    app.add_middleware(HostGuard, allowed=hosts)  # outermost: a foreign Host reaches nothing else
