"""The attention explorer's HTTP API and page: FastAPI over one :class:`~attnlab.translator.Translator` per run.

Endpoints (OpenAPI schema at ``/openapi.json``, a readable offline reference at ``/docs``):

- ``POST /api/translate`` ``{"text", "beam_size", "run"}`` → the translation, the source and target
  tokens and every attention map of the chosen run, each kind as ``(layers, heads, queries, keys)``;
- ``GET /api/runs`` → what is loaded: name, model kind, parameters, layers/heads, test BLEU when the
  run folder holds ``eval-test.json``;
- ``GET /api/probes?run=NAME`` → the probe sentences' attention recorded during training
  (``probes.jsonl``, heads averaged), grouped by sentence and ordered by step;
- ``GET /health`` → liveness, never behind the model;
- ``GET /`` → the explorer page (``static/``, served from the package: no CDN, nothing remote).

Limits, all checked before any model work (:class:`Limits`):

- the body is at most ``max_body_bytes`` (413, also for chunked bodies without a length);
- ``text`` is 1…``max_chars`` characters, not only whitespace, with no control characters, lone
  surrogates or bidirectional overrides (422 naming the field and the position);
- at most ``max_pending`` translations are admitted at once; the next one gets 429 at once with
  ``Retry-After`` (never a hang); admitted work runs in a pool of ``workers`` threads, so the event
  loop — and ``/health`` — stays free while a model computes;
- each translation has ``deadline_s`` seconds (504 past it; work that has not started is cancelled).

A request can only reach files of the loaded runs, by run *name* and fixed file names
(``eval-test.json``, ``probes.jsonl``); no request field is ever used as a path.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import unicodedata
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Protocol

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, create_model, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.gzip import GZipMiddleware

from attnlab.errors import AttnlabError
from attnlab.inspection.attention_maps import KIND_TITLES  # one set of titles for the figures and the page

STATIC_DIR = Path(__file__).resolve().parent / "static"

# The attention kinds each model family returns (DESIGN.md, models/): seq2seq has none (notes §1,
# a fixed context), Bahdanau only cross attention (§3), the Transformer all three (§23–25), the
# decoder-only model one causal self-attention over `source <bos> target` (§28).
KINDS_BY_MODEL: dict[str, tuple[str, ...]] = {
    "seq2seq": (),
    "bahdanau": ("cross",),
    "transformer": ("enc_self", "dec_self", "cross"),
    "decoder-only": ("self",),
}

# Characters refused in `text`: they are never part of a sentence a person typed, and bidi overrides
# would make the token labels on the page lie about their order.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_ALLOWED_CONTROLS = frozenset("\t\n\r")
RUN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


@dataclass(frozen=True)
class Limits:
    """What one server accepts; every limit answers with a 4xx/5xx *before* the model runs."""

    max_chars: int = 300  # characters of `text`
    max_body_bytes: int = 16_384  # request body (413 above)
    max_beam: int = 8
    workers: int = 2  # threads that run models
    max_pending: int = 8  # translations admitted at once (running + queued); 429 above
    deadline_s: float = 30.0  # per translation; 504 after
    max_probe_bytes: int = 64 * 2**20  # probes.jsonl read at most this far

    def __post_init__(self) -> None:
        for name in ("max_chars", "max_body_bytes", "max_beam", "workers", "max_pending"):
            if getattr(self, name) < 1:
                raise AttnlabError(f"web limit {name}={getattr(self, name)} must be >= 1")
        if self.max_pending < self.workers:
            raise AttnlabError(f"web limit max_pending={self.max_pending} must be >= workers={self.workers}")
        if not self.deadline_s > 0:
            raise AttnlabError(f"web limit deadline_s={self.deadline_s} must be > 0")


class AttentionSource(Protocol):
    """What the server needs from a translator (the real one is :class:`attnlab.translator.Translator`)."""

    def attention(self, sentence: str, beam_size: int = 1) -> Any: ...


@dataclass
class LoadedRun:
    """One run served under ``name``: its Translator, its folder (for the fixed-name files) and facts."""

    name: str
    translator: AttentionSource
    run_dir: Path | None
    info: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------ loading


def parse_run_spec(spec: str | Path) -> tuple[str | None, Path]:
    """``NAME=PATH`` → (NAME, PATH); a bare ``PATH`` → (None, PATH) (named after its folder)."""
    s = str(spec)
    if "=" in s and not Path(s).exists():
        name, path = s.split("=", 1)
        return name.strip(), Path(path)
    return None, Path(s)


def _safe_name(raw: str) -> str:
    out = "".join(c if (c.isascii() and (c.isalnum() or c in "._-")) else "-" for c in raw).strip("-.")
    return (out or "run")[:64]


def load_runs(specs: Sequence[str | Path], which: str = "best", device: str = "cpu") -> dict[str, LoadedRun]:
    """Load each run folder once (``NAME=PATH`` or ``PATH``) with :meth:`Translator.from_run`.

    Raises :class:`AttnlabError` for a bad name, a duplicate name or an unusable folder.
    """
    import re

    from attnlab.translator import Translator

    if not specs:
        raise AttnlabError(
            "no run given; pass one or more run folders, e.g. `attnlab serve runs/transformer`"
        )
    runs: dict[str, LoadedRun] = {}
    for spec in specs:
        name, path = parse_run_spec(spec)
        if name is None:
            base = _safe_name(path.resolve().name)
            name, k = base, 2
            while name in runs:
                name, k = f"{base}-{k}", k + 1
        elif not re.match(RUN_NAME_PATTERN, name):
            raise AttnlabError(
                f"run name {name!r} must be 1-64 letters, digits, '.', '_' or '-' (as in bahdanau=runs/b)"
            )
        if name in runs:
            raise AttnlabError(f"run name {name!r} is given twice; name them apart, e.g. a={path} b=…")
        tr = Translator.from_run(path, which=which, device=device)
        runs[name] = LoadedRun(name, tr, path, run_facts(tr, path))
    return runs


def run_facts(tr: Any, run_dir: Path | None) -> dict[str, Any]:
    """Static facts about a loaded run (model kind, sizes, parameters, checkpoint)."""
    cfg = tr.cfg
    kind = cfg.model.kind
    facts: dict[str, Any] = {
        "model_kind": kind,
        "kinds": list(KINDS_BY_MODEL.get(kind, ())),
        "parameters": int(sum(p.numel() for p in tr.model.parameters())),
        "num_layers": cfg.model.num_layers,
        "num_heads": cfg.model.num_heads if kind in ("transformer", "decoder-only") else 1,
        "num_hiddens": cfg.model.num_hiddens,
        "dataset": cfg.data.dataset,
        "tokenizer": cfg.data.tokenizer,
        "src_vocab": len(tr.src_tok),
        "tgt_vocab": len(tr.tgt_tok),
        "probe_sentences": list(cfg.train.probe_sentences),
    }
    if getattr(tr, "checkpoint", None) is not None:
        facts["checkpoint"] = Path(tr.checkpoint).name
    return facts


def read_test_scores(run_dir: Path | None) -> dict[str, Any] | None:
    """BLEU/chrF from the run's ``eval-test.json`` (written by `attnlab evaluate`), or None."""
    if run_dir is None:
        return None
    path = run_dir / "eval-test.json"
    try:
        if path.stat().st_size > 4 * 2**20:
            return None
        rep = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(rep, dict):
        return None
    out = {
        k: rep[k]
        for k in ("bleu", "chrf", "sentences", "beam_size", "bleu_signature")
        if isinstance(rep.get(k), int | float | str)
    }
    return out or None


def read_probes(run_dir: Path | None, max_bytes: int = 64 * 2**20) -> dict[str, Any]:
    """The probe timeline: ``{"sentences": [{"sentence", "steps": [record…]}…]}``, steps ascending.

    Each record: ``step``, ``translation``, ``src_tokens``, ``tgt_tokens`` and ``attention``
    (``kind -> (layers, T_out, keys)``, heads averaged, as `training.loop.record_probes` writes it).
    A torn last line (a crash mid-write) or a malformed line is skipped; a resumed run that
    re-recorded a step keeps the latest record of it.
    """
    by_sentence: dict[str, dict[int, dict[str, Any]]] = {}
    path = run_dir / "probes.jsonl" if run_dir is not None else None
    if path is not None and path.is_file():
        with open(path, "rb") as f:
            data = f.read(max_bytes)
        for raw in data.splitlines():
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if not (
                isinstance(rec, dict)
                and isinstance(rec.get("sentence"), str)
                and isinstance(rec.get("step"), int)
                and isinstance(rec.get("attention"), dict)
            ):
                continue
            src = rec.get("src_tokens") if isinstance(rec.get("src_tokens"), list) else []
            by_sentence.setdefault(rec["sentence"], {})[rec["step"]] = {
                "step": rec["step"],
                "translation": rec.get("translation", ""),
                "src_tokens": src,
                "tgt_tokens": rec.get("tgt_tokens", []),
                "attention": {k: _unpad_probe(k, v, len(src)) for k, v in rec["attention"].items()},
            }
    return {
        "sentences": [
            {"sentence": s, "steps": [steps[k] for k in sorted(steps)]} for s, steps in by_sentence.items()
        ]
    }


def _unpad_probe(kind: str, maps: Any, n_src: int) -> Any:
    """Drop the batch's source-padding columns from a recorded ``(layers, T_out, keys)`` map.

    Probes are decoded as one batch, so keys span the batch's padded source (zero weight past this
    sentence's ``n_src``); decoder-only ``self`` keys are ``padded source + <bos> y1 …``, the padding in
    the middle. Without it, column ``j`` lines up with ``src_tokens[j]`` (and then ``<bos> y1 …``).
    """
    try:
        t_out = len(maps[0])
        n_keys = len(maps[0][0])
    except (TypeError, IndexError):
        return maps
    if kind == "self":
        pad_end = n_keys - t_out  # the padded source length
        if not n_src <= pad_end <= n_keys:
            return maps
        return [[row[:n_src] + row[pad_end:] for row in layer] for layer in maps]
    if kind == "cross" and n_src <= n_keys:
        return [[row[:n_src] for row in layer] for layer in maps]
    return maps


# ---------------------------------------------------------------------------------------- payloads


def attention_payload(result: Any, decimals: int = 4) -> dict[str, Any]:
    """Token labels and weights of every attention kind in a :class:`~attnlab.translator.AttentionResult`.

    Returns ``{kind: {"title", "queries", "keys", "outputs", "layers", "heads", "weights"}}`` with
    ``weights`` nested lists ``(layers, heads, len(queries), len(keys))``. Row ``t`` of ``cross`` is the
    query (decoder input ``queries[t]``) that produced ``outputs[t]``; ``outputs`` is ``None`` for
    the encoder's self-attention. The decoder-only ``self`` map runs over ``source <bos> target``.
    """
    src, tgt, inputs = list(result.src_tokens), list(result.tgt_tokens), list(result.tgt_inputs)
    import torch  # rounding in torch, not Python loops: less time holding the GIL the event loop needs

    out: dict[str, Any] = {}
    for kind, w in result.attention.items():
        w = w.float()
        if w.dim() != 4:
            continue
        if kind == "enc_self":
            queries, keys, outputs = src, src, None
        elif kind == "cross":
            queries, keys, outputs = inputs, src, tgt
        elif kind == "dec_self":
            queries, keys, outputs = inputs, inputs, tgt
        elif kind == "self":
            # Full teacher-forced pass over source + every decoder input; when decoding stopped without
            # <eos> the Translator drops the last input from its labels, so cut the map to the labels.
            queries = keys = src + inputs
            outputs = [""] * len(src) + tgt
        else:
            continue
        nq, nk = min(len(queries), w.shape[2]), min(len(keys), w.shape[3])
        w = w[:, :, :nq, :nk]  # (L, H, nq, nk)
        out[kind] = {
            "title": KIND_TITLES.get(kind, kind),
            "queries": queries[:nq],
            "keys": keys[:nk],
            "outputs": outputs[:nq] if outputs is not None else None,
            "layers": int(w.shape[0]),
            "heads": int(w.shape[1]),
            "weights": torch.round(torch.nan_to_num(w.double(), nan=0.0), decimals=decimals).tolist(),
        }
    return out


# ------------------------------------------------------------------------------------- validation


def check_text(text: str, max_chars: int) -> str:
    """Refuse what is not a sentence a person typed; the message names the rule and the position."""
    if not text.strip():
        raise ValueError('text is empty or only whitespace; type an English sentence, e.g. "i\'m home ."')
    if len(text) > max_chars:
        raise ValueError(f"text has {len(text)} characters; the limit is {max_chars}: shorten it")
    for i, ch in enumerate(text):
        cat = unicodedata.category(ch)
        if cat == "Cs":
            raise ValueError(
                f"text has a lone surrogate U+{ord(ch):04X} at position {i}: not a character; "
                "send valid UTF-8/UTF-16"
            )
        if (cat == "Cc" and ch not in _ALLOWED_CONTROLS) or ch in _BIDI_CONTROLS:
            raise ValueError(f"text has the control character U+{ord(ch):04X} at position {i}; remove it")
        if ch in "\ufffe\uffff":
            raise ValueError(f"text has the noncharacter U+{ord(ch):04X} at position {i}; remove it")
    return text


def make_request_model(limits: Limits, run_names: Sequence[str]) -> type[BaseModel]:
    """The POST /api/translate body, with the server's limits written into its schema."""
    names = list(run_names)

    def _text(cls, v: str) -> str:
        return check_text(v, limits.max_chars)

    def _run(cls, v: str | None) -> str | None:
        if v is not None and v not in names:
            raise ValueError(f"unknown run; loaded runs: {', '.join(names)}")
        return v

    return create_model(
        "TranslateRequest",
        __config__=ConfigDict(extra="forbid"),
        __validators__={
            "check_text": field_validator("text")(_text),
            "check_run": field_validator("run")(_run),
        },
        text=(
            StrictStr,
            Field(
                min_length=1,
                max_length=limits.max_chars,
                description="an English sentence",
                examples=["i'm home ."],
            ),
        ),
        beam_size=(StrictInt, Field(1, ge=1, le=limits.max_beam, description="1 = greedy")),
        run=(StrictStr | None, Field(None, max_length=64, description=f"one of: {', '.join(names)}")),
    )


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    detail: list[ErrorItem] | str


def _clean_errors(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Pydantic errors without the echoed input (which may hold a lone surrogate: unencodable)."""
    out = []
    for e in errors:
        msg = str(e.get("msg", "invalid"))
        if e.get("type") == "json_invalid":
            ctx = e.get("ctx") or {}
            msg = (
                f"the body is not valid JSON ({ctx.get('error', 'decode error')}); send an object like "
                '{"text": "i\'m home ."}'
            )
        msg = msg.removeprefix("Value error, ")
        loc = [x if isinstance(x, int) else str(x) for x in e.get("loc", ())]
        out.append(
            {
                "loc": loc,
                "msg": msg.encode("utf-8", "backslashreplace").decode("utf-8"),
                "type": str(e.get("type", "value_error")),
            }
        )
    return out


# ------------------------------------------------------------------------------------- middleware


class BodyLimit:
    """ASGI middleware: refuse a body over ``max_bytes`` with 413 before the app reads it.

    Checks ``Content-Length`` first; a chunked body is buffered up to the limit and replayed.
    """

    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                try:
                    n = int(v)
                except ValueError:
                    n = -1
                if n < 0 or n > self.max_bytes:
                    await self._refuse(send, n)
                    return
        chunks, total, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body = msg.get("body", b"")
            total += len(body)
            if total > self.max_bytes:
                await self._refuse(send, total)
                return
            chunks.append(body)
            more = msg.get("more_body", False)
        replay = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        done = False

        async def replay_receive():
            nonlocal done
            if not done:
                done = True
                return replay
            return await receive()

        await self.app(scope, replay_receive, send)

    async def _refuse(self, send, n: int) -> None:
        size = f"{n} bytes" if n >= 0 else "of an invalid length"
        body = json.dumps(
            {
                "detail": [
                    {
                        "loc": ["body"],
                        "type": "body_too_large",
                        "msg": f"the request body is {size}; the limit is {self.max_bytes} bytes",
                    }
                ]
            }
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})


# ---------------------------------------------------------------------------------------- the app


class _Admission:
    """Bounded admission: at most ``limit`` translations in flight; a slot frees when its *thread*
    finishes (not when its request gives up), so timed-out work cannot pile up behind new requests."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used, self._lock = limit, 0, threading.Lock()

    def try_acquire(self) -> bool:
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True

    def release(self, _fut: Any = None) -> None:
        with self._lock:
            self.used -= 1


_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
}


def create_app(
    runs: Mapping[str, LoadedRun] | Sequence[str | Path],
    limits: Limits | None = None,
    which: str = "best",
    device: str = "cpu",
) -> FastAPI:
    """Build the app over loaded runs (or run folders, loaded here with :func:`load_runs`).

    The first run is the default of ``POST /api/translate``. Raises :class:`AttnlabError` when a
    run cannot be loaded. The model thread pool is shut down with the app.
    """
    limits = limits or Limits()
    if not isinstance(runs, Mapping):
        runs = load_runs(list(runs), which=which, device=device)
    if not runs:
        raise AttnlabError("no run to serve; pass at least one run folder")
    runs = dict(runs)
    default_run = next(iter(runs))
    Req = make_request_model(limits, list(runs))
    pool = ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix="attnlab-model")
    admission = _Admission(limits.max_pending)
    started = time.time()

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(
        title="attnlab attention explorer",
        version=_version(),
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        description="Translate English → French with trained attnlab runs and look at every attention map.",
    )
    app.state.runs, app.state.limits, app.state.admission = runs, limits, admission
    app.add_middleware(GZipMiddleware, minimum_size=2048)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)

    @app.middleware("http")
    async def security_headers(request: Request, call_next):
        response = await call_next(request)
        for k, v in _SECURITY_HEADERS.items():
            response.headers.setdefault(k, v)
        return response

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError):
        return JSONResponse(status_code=422, content={"detail": _clean_errors(exc.errors())})

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException):
        detail: Any = exc.detail
        if exc.status_code == 400:  # FastAPI could not even read the body (e.g. bytes that are not UTF-8)
            detail = [
                {
                    "loc": ["body"],
                    "type": "body_invalid",
                    "msg": f"the body cannot be read ({exc.detail}); send UTF-8 JSON like "
                    '{"text": "i\'m home ."}',
                }
            ]
        return JSONResponse(
            status_code=exc.status_code, content={"detail": detail}, headers=getattr(exc, "headers", None)
        )

    # ------------------------------------------------------------------ routes

    @app.get("/health", summary="liveness; answers while models compute")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "runs": list(runs),
            "busy": admission.used,
            "capacity": limits.max_pending,
            "uptime_s": round(time.time() - started, 1),
        }

    @app.get("/api/runs", summary="the loaded runs")
    async def list_runs() -> dict[str, Any]:
        items = []
        for r in runs.values():
            items.append({"name": r.name, **r.info, "test": read_test_scores(r.run_dir)})
        return {
            "default": default_run,
            "runs": items,
            "limits": {
                "max_chars": limits.max_chars,
                "max_beam": limits.max_beam,
                "max_body_bytes": limits.max_body_bytes,
                "deadline_s": limits.deadline_s,
            },
        }

    @app.get(
        "/api/probes",
        summary="probe sentences' attention recorded during training",
        responses={422: {"model": ErrorBody}},
    )
    async def probes(run: Annotated[str, Query(max_length=64, description="a loaded run's name")]):
        if run not in runs:
            return _error(
                422, ["query", "run"], f"unknown run; loaded runs: {', '.join(runs)}", "value_error"
            )
        r = runs[run]
        data = await asyncio.get_running_loop().run_in_executor(
            None, read_probes, r.run_dir, limits.max_probe_bytes
        )
        return {"run": run, "model_kind": r.info.get("model_kind"), **data}

    async def translate(req):
        name = req.run or default_run
        r = runs[name]
        if not admission.try_acquire():
            return JSONResponse(
                status_code=429,
                headers={"Retry-After": "1"},
                content={
                    "detail": f"the server is busy ({limits.max_pending} translations in "
                    "progress); retry in a moment"
                },
            )
        t0 = time.perf_counter()
        cfut = pool.submit(_work, r, req.text, req.beam_size, t0)
        cfut.add_done_callback(admission.release)
        try:
            body = await asyncio.wait_for(asyncio.wrap_future(cfut), timeout=limits.deadline_s)
        except TimeoutError:
            cfut.cancel()  # frees the slot at once if the work had not started
            return JSONResponse(
                status_code=504,
                content={
                    "detail": f"the translation took longer than {limits.deadline_s:g} s; try a shorter sentence "
                    "or beam_size 1"
                },
            )
        except AttnlabError as e:
            return _error(422, ["body", "text"], str(e), "value_error")
        return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})

    # The body model is built at run time (it carries the limits), so annotate after the fact:
    # with `from __future__ import annotations` a local name would not resolve.
    translate.__annotations__["req"] = Req
    app.post(
        "/api/translate",
        summary="translate and return every attention map",
        responses={
            413: {"model": ErrorBody},
            422: {"model": ErrorBody},
            429: {"model": ErrorBody},
            504: {"model": ErrorBody},
        },
    )(translate)

    # ------------------------------------------------------------------ page

    @app.get("/", include_in_schema=False)
    async def index():
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    @app.get("/docs", include_in_schema=False)
    async def docs():
        return FileResponse(STATIC_DIR / "docs.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


def _work(r: LoadedRun, text: str, beam_size: int, t0: float) -> bytes:
    """Runs in a model thread: one translation with its attention, encoded as JSON here too, so that
    serialising a large payload never holds up the event loop (and /health)."""
    res = r.translator.attention(text, beam_size=beam_size)
    payload = {
        "run": r.name,
        "model_kind": r.info.get("model_kind"),
        "beam_size": beam_size,
        "source": res.source,
        "translation": res.translation,
        "src_tokens": list(res.src_tokens),
        "tgt_tokens": list(res.tgt_tokens),
        "tgt_inputs": list(res.tgt_inputs),
        "truncated": bool(res.truncated),
        "unknown_words": unknown_words(r.translator, text, res.src_tokens),
        "attention": attention_payload(res),
    }
    payload["elapsed_ms"] = round(1000 * (time.perf_counter() - t0), 1)
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def unknown_words(tr: Any, text: str, src_tokens: Sequence[str]) -> list[str]:
    """The words of ``text`` the model saw as ``<unk>`` (word vocabularies; BPE gives the count as ``<unk>``s)."""
    from attnlab.data.text import preprocess

    shown = [t for t in src_tokens if t != "<eos>"]
    if hasattr(getattr(tr, "src_tok", None), "token_to_idx"):  # word vocabulary: one token per word
        return [w for w, t in zip(preprocess(text).split(), shown) if t == "<unk>"]
    return [t for t in shown if t == "<unk>"]


def _error(status: int, loc: list[str], msg: str, type_: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"detail": [{"loc": loc, "msg": msg, "type": type_}]})


def _version() -> str:
    from attnlab import __version__

    return __version__
