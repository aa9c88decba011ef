"""The attention explorer's HTTP API and page: FastAPI over one :class:`~attnlab.translator.Translator` per run.

:func:`create_app` assembles the parts, each in a file named after it: ``guards.py`` (limits, Host
guard, body cap, cross-site check, admission), ``deadline.py`` (work that stops at its deadline),
``schemas.py`` (the request body and error bodies), ``registry.py`` (the runs and their caches),
``state.py`` (what the routes share), ``routes/`` (the endpoints), ``server.py`` (run facts, the
attention maps as JSON) and ``serving.py`` (uvicorn with read deadlines).

Endpoints (OpenAPI schema at ``/openapi.json``, a readable offline reference at ``/docs``): ``POST
/api/translate``, ``POST /api/attribution``, ``GET /api/runs``, ``/api/probes``, ``/api/alignment``,
``/api/messages``, ``/api/sections``, ``/health`` and ``/`` (the page, served from the package).

Limits, all checked before any model work (:class:`~attnlab.web.guards.Limits`): the Host guard (400),
the body cap (413), the text rules (422), admission (429, never a hang), the deadline (504), the
response's size, cross-site GETs (403) and the connection slots and read deadlines of
:func:`~attnlab.web.serving.serve`. What each endpoint takes and returns, and every limit's rule:
docs/explanations/web-api.md.

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

from attnlab import config as config_mod
from attnlab._version import __version__
from attnlab.analysis.align.gold import gold_dir, read_gold
from attnlab.errors import AttnlabError
from attnlab.i18n import _, catalogue, language
from attnlab.web.guards import LOOPBACK_NAMES, BodyLimit, HostGuard, Limits, security_headers
from attnlab.web.language import RequestLanguage
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
    decode: Sequence[str] = (),
) -> FastAPI:
    """Build the app over loaded runs (or run folders, loaded here with :func:`~attnlab.web.registry.load_runs`).

    The first run is the default of ``POST /api/translate``. ``allowed_hosts``: the names the
    ``Host`` header may carry (default: the loopback names; see
    :func:`~attnlab.web.guards.allowed_host_names`). ``lang``: the language the page speaks unless it
    asks for another (default: :func:`attnlab.i18n.language`, which ``attnlab serve --lang`` sets).
    ``gold``: the WPT-2003 gold folder of the alignment view (``attnlab serve --gold``; default: found
    per request as ``attnlab align`` finds it, through ``$ATTNLAB_GOLD_DIR`` or ``$ATTNLAB_DATA_DIR``).
    ``decode``: ``decode.key=value`` settings over each run's own, the defaults of every request
    (``attnlab serve --beam 4``; :func:`attnlab.config.apply_decode_overrides`).
    Raises :class:`AttnlabError` when a run cannot be loaded, ``lang`` has no catalogue, ``gold`` is
    not a folder, or a decode setting is refused or past the limits. The model thread pool is shut
    down with the app.
    """
    limits = limits or Limits()
    code, _catalogue = catalogue(lang or language())  # checks that the language has one
    if not isinstance(runs, Mapping):
        runs = load_runs(list(runs), which=which, device=device)
    if not runs:
        raise AttnlabError(_("no run to serve; pass at least one run folder"))
    for run in runs.values():
        _server_decode(run, list(decode), limits)
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
    app.add_middleware(RequestLanguage, default=state.lang)  # innermost: each request speaks its own language
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


def _server_decode(run: LoadedRun, decode: list[str], limits: Limits) -> None:
    """Decode ``run`` with ``decode`` (``attnlab serve``'s options) over its own settings, refusing
    defaults that no request could ask for: a beam or an n-best list over ``--max-beam``."""
    tr = run.translator
    if decode:
        tr.set_decode(config_mod.apply_decode_overrides(tr.cfg, decode).decode)
    dcfg = tr.cfg.decode
    for key, option in (("beam_size", "--beam"), ("nbest", "--nbest")):
        if getattr(dcfg, key) > limits.max_beam:
            raise AttnlabError(_("run {name}: decode.{key}={value} is more than --max-beam {most} allows; give "
                                 "{option} {most} or less, or raise --max-beam").format(
                name=run.name, key=key, value=getattr(dcfg, key), most=limits.max_beam, option=option))


def _add_guards(app: FastAPI, limits: Limits, hosts: tuple[str, ...]) -> None:
    """The middleware, innermost first: each ``add_middleware`` wraps the ones before it."""
    # Small responses (pages, /api/runs) are compressed here, cheaply; the large ones (translations,
    # probes) arrive already compressed by their worker, inside the admission slot, and pass through.
    app.add_middleware(GZipMiddleware, minimum_size=GZIP_MIN, compresslevel=GZIP_LEVEL)
    app.add_middleware(HeadAsGet)  # HEAD is GET without the body, for every route
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    app.middleware("http")(security_headers)
    app.add_middleware(HostGuard, allowed=hosts)  # outermost: a foreign Host reaches nothing else
