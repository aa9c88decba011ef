"""The attention explorer's HTTP API and page: FastAPI over one :class:`~attnlab.translator.Translator` per run.

Endpoints (OpenAPI schema at ``/openapi.json``, a readable offline reference at ``/docs``):

- ``POST /api/translate`` ``{"text", "beam_size", "run", "max_len", "kind", "layer", "head",
  "encoding", "overview"}`` → the translation, the source and target tokens and the chosen run's
  attention maps, each kind as ``(layers, heads, queries, keys)``. By default every kind, layer and
  head, as JSON numbers (4 decimals); ``kind``/``layer``/``head`` (``"mean"`` averages the heads) pick
  one map, ``encoding`` ``"uint8"``/``"uint16"`` sends it quantised as base64, and ``overview`` adds
  a ≤48×48 max-pooled thumbnail of every layer and head (what the page draws);
- ``GET /api/runs`` → what is loaded: name, model kind, parameters, layers/heads, the checkpoint, and
  test BLEU when the run folder's ``eval-test.json`` scored *that* checkpoint (``test``; otherwise
  ``test_other`` says which one it scored);
- ``GET /api/probes?run=NAME`` → the probe sentences' attention recorded during training
  (``probes.jsonl``, heads averaged), grouped by sentence and ordered by step;
- ``GET /health`` → liveness, never behind the model;
- ``GET /`` → the explorer page (``static/``, served from the package: no CDN, nothing remote).

Limits, all checked before any model work (:class:`Limits`):

- the ``Host`` header must name the server: a loopback name (``127.0.0.1``, ``localhost``, ``::1``,
  any port) or one allowed with ``--allowed-host`` (400 otherwise: a web page on another site that
  rebinds its DNS name to 127.0.0.1 cannot use the API);
- the body is at most ``max_body_bytes`` (413, also for chunked bodies without a length);
- ``text`` is 1…``max_chars`` characters, not only whitespace, with no control characters, lone
  surrogates or bidirectional overrides (422 naming the field and the position);
- at most ``max_output_tokens`` output tokens per translation (``max_len`` asks for fewer);
- at most ``max_pending`` translations and probe timelines are admitted at once; the next one gets
  429 at once with ``Retry-After`` (never a hang); admitted work runs in a pool of ``workers``
  threads — the model, the JSON encoding and the gzip compression all inside the admission slot —
  so the event loop, and ``/health``, stays free;
- each translation has ``deadline_s`` seconds (504 past it; work that has not started is cancelled);
- a response's attention maps are at most ``max_response_bytes``: a kind that would not fit is sent
  with ``weights: null`` and an ``omitted`` note saying what to ask for instead (the translation is
  never lost);
- served by :func:`serve`: at most ``max_connections`` connections and requests at once (503
  above), a request head must arrive within ``header_timeout_s`` of its first byte (or of the
  connection) and its body within ``body_timeout_s`` after that (408 and closed otherwise), and an
  idle keep-alive connection is closed after ``keep_alive_s``.

A request can only reach files of the loaded runs, by run *name* and fixed file names
(``eval-test.json``, ``probes.jsonl``); no request field is ever used as a path.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import os
import threading
import time
import unicodedata
import zlib
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    create_model,
    field_validator,
)
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
    max_probe_bytes: int = 64 * 2**20  # the newest this many bytes of probes.jsonl are read
    max_output_tokens: int = 160  # output tokens per translation (final <eos> included); `max_len` <= this
    max_response_bytes: int = 1_000_000  # attention maps per response (estimated before encoding)
    max_connections: int = 64  # uvicorn's limit_concurrency: connections + requests at once, 503 above
    header_timeout_s: float = 10.0  # a request head must arrive within this (408 and closed)
    body_timeout_s: float = 10.0  # ... and its body within this after the head
    keep_alive_s: float = 5.0  # an idle keep-alive connection is closed after this
    max_header_bytes: int = 16_384  # request line + headers (h11's incomplete-event limit; 400 above)

    def __post_init__(self) -> None:
        for name in (
            "max_chars",
            "max_body_bytes",
            "max_beam",
            "workers",
            "max_pending",
            "max_probe_bytes",
            "max_output_tokens",
            "max_response_bytes",
            "max_connections",
            "max_header_bytes",
        ):
            if getattr(self, name) < 1:
                raise AttnlabError(f"web limit {name}={getattr(self, name)} must be >= 1")
        if self.max_pending < self.workers:
            raise AttnlabError(f"web limit max_pending={self.max_pending} must be >= workers={self.workers}")
        for name in ("deadline_s", "header_timeout_s", "body_timeout_s", "keep_alive_s"):
            if not getattr(self, name) > 0:
                raise AttnlabError(f"web limit {name}={getattr(self, name)} must be > 0")


class AttentionSource(Protocol):
    """What the server needs from a translator (the real one is :class:`attnlab.translator.Translator`)."""

    def attention(self, sentence: str, beam_size: int = 1, max_len: int | None = None) -> Any: ...


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
    """Static facts about a loaded run (model kind, sizes, parameters, the checkpoint and its weights)."""
    cfg = tr.cfg
    kind = cfg.model.kind
    facts: dict[str, Any] = {
        "model_kind": kind,
        "kinds": list(KINDS_BY_MODEL.get(kind, ())),
        "parameters": int(sum(p.numel() for p in tr.model.parameters())),
        "num_layers": cfg.model.num_layers,
        "num_heads": cfg.model.num_heads if kind in ("transformer", "decoder-only") else 1,
        # Layers of the attention maps (Bahdanau's recurrent layers share one attention: 1 map).
        "attention_layers": cfg.model.num_layers
        if kind in ("transformer", "decoder-only")
        else int(kind != "seq2seq"),
        "num_hiddens": cfg.model.num_hiddens,
        "dataset": cfg.data.dataset,
        "tokenizer": cfg.data.tokenizer,
        "src_vocab": len(tr.src_tok),
        "tgt_vocab": len(tr.tgt_tok),
        "probe_sentences": list(cfg.train.probe_sentences),
    }
    if getattr(tr, "checkpoint", None) is not None:
        from attnlab.evaluation.evaluate import checkpoint_identity

        ident = checkpoint_identity(tr.checkpoint) or {}
        facts["checkpoint"] = Path(tr.checkpoint).name
        if "step" in ident:
            facts["checkpoint_step"] = ident["step"]
        if "weights_sha256" in ident:
            facts["weights_sha256"] = ident["weights_sha256"]
    return facts


def read_test_scores(run_dir: Path | None, loaded: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """BLEU/chrF from the run's ``eval-test.json`` (written by `attnlab evaluate`), for ``/api/runs``.

    Returns ``{"test": scores}`` only when the report records the checkpoint it scored and its
    weights' sha256 is the loaded one's (``loaded``: :func:`run_facts`); otherwise ``{"test": None}``,
    plus ``"test_other": {"checkpoint", "reason"}`` when a report exists that scored something else
    (or does not say what), so that a figure is never shown beside weights it did not measure.
    """
    none: dict[str, Any] = {"test": None}
    if run_dir is None:
        return none
    path = run_dir / "eval-test.json"
    try:
        if path.stat().st_size > 4 * 2**20:
            return none
        rep = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return none
    if not isinstance(rep, dict):
        return none
    out = {
        k: rep[k]
        for k in ("bleu", "chrf", "sentences", "beam_size", "bleu_signature")
        if isinstance(rep.get(k), int | float | str)
    }
    if not out:
        return none
    scored = rep.get("checkpoint") if isinstance(rep.get("checkpoint"), dict) else {}
    scored_name = scored.get("name") if isinstance(scored.get("name"), str) else None
    scored_sha = scored.get("weights_sha256")
    loaded_sha = (loaded or {}).get("weights_sha256")
    loaded_name = (loaded or {}).get("checkpoint", "the loaded checkpoint")
    if isinstance(scored_sha, str) and scored_sha == loaded_sha:
        return {"test": {**out, "checkpoint": scored_name}}
    if not isinstance(scored_sha, str):
        reason = (
            "eval-test.json does not record which checkpoint it scored; "
            "re-run `attnlab evaluate RUN --split test` to score the loaded one"
        )
    else:
        reason = (
            f"eval-test.json scored {scored_name or 'another checkpoint'}, not the loaded {loaded_name}; "
            "re-run `attnlab evaluate RUN --split test` to score it"
        )
    return {
        "test": None,
        "test_other": {"checkpoint": scored_name, "bleu": out.get("bleu"), "reason": reason},
    }


def read_probes(run_dir: Path | None, max_bytes: int = 64 * 2**20) -> dict[str, Any]:
    """The probe timeline: ``{"sentences": [{"sentence", "steps": [record…]}…], "truncated"}``, steps ascending.

    Each record: ``step``, ``translation``, ``src_tokens``, ``tgt_tokens`` and ``attention``
    (``kind -> (layers, T_out, keys)``, heads averaged, as `training.loop.record_probes` writes it).
    A file over ``max_bytes`` is read from its end: the *newest* records are kept, the line cut by
    the window is dropped and ``truncated`` is true. A torn last line (a crash mid-write) or a
    malformed line is skipped; a resumed run that re-recorded a step keeps the latest record of it.
    """
    by_sentence: dict[str, dict[int, dict[str, Any]]] = {}
    truncated = False
    path = run_dir / "probes.jsonl" if run_dir is not None else None
    if path is not None and path.is_file():
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                truncated = True
                f.seek(size - max_bytes - 1)
                data = f.read(max_bytes + 1)
                # Drop the partial line at the window's start (none when the byte before it is "\n").
                data = data[data.index(b"\n") + 1 :] if b"\n" in data else b""
            else:
                data = f.read()
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
        ],
        "truncated": truncated,
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

ENCODINGS = ("json", "uint8", "uint16")
_SCALE = {"uint8": 255, "uint16": 65535}
_NUMPY_DTYPE = {"uint8": "u1", "uint16": "<u2"}
OVERVIEW_SIZE = 48  # thumbnails are max-pooled to at most this many rows and columns
# Budget order: the maps people look at first keep their weights when a response must shed some.
_PRIORITY = ("cross", "self", "dec_self", "enc_self")


class SelectionError(ValueError):
    """A ``layer``/``head`` outside the maps of this translation (422 naming the field)."""

    def __init__(self, field_name: str, msg: str) -> None:
        super().__init__(msg)
        self.field_name = field_name


def _bytes_per_weight(encoding: str, decimals: int) -> float:
    """An upper bound of the encoded bytes per weight: ``0.1234,`` as JSON, base64 of 1 or 2 bytes."""
    return {"uint8": 4 / 3, "uint16": 8 / 3}.get(encoding, decimals + 3.0)


def encode_weights(w: Any, encoding: str = "json", decimals: int = 4) -> Any:
    """``w`` (any shape, values in [0, 1]) as nested lists rounded to ``decimals``, or quantised.

    ``uint8``/``uint16``: ``round(w * scale)`` (scale 255 or 65535), row-major, little-endian, base64;
    a client divides by the scale again (the page does: ``atob`` and a ``DataView``).
    """
    import torch

    w = torch.nan_to_num(w.detach().double(), nan=0.0)
    if encoding == "json":
        return torch.round(w, decimals=decimals).tolist()
    q = (
        torch.round(w.clamp(0.0, 1.0) * _SCALE[encoding])
        .to(torch.int32)
        .numpy()
        .astype(_NUMPY_DTYPE[encoding])
    )
    return base64.b64encode(q.tobytes()).decode("ascii")


def _pick(w: Any, layer: int | None, head: int | str | None, kind: str) -> Any:
    """``(L, H, Q, K)`` → the selected layer(s) and head(s), still 4-D; raises :class:`SelectionError`."""
    n_layers, n_heads = int(w.shape[0]), int(w.shape[1])
    if layer is not None:
        if not -n_layers <= layer < n_layers:
            raise SelectionError(
                "layer",
                f"layer {layer} is out of range: the {kind} maps have {n_layers} layer(s), "
                f"0…{n_layers - 1} (-1 is the last)",
            )
        w = w[layer % n_layers : layer % n_layers + 1]  # (1, H, Q, K)
    if head == "mean":
        w = w.mean(dim=1, keepdim=True)  # (L', 1, Q, K)
    elif head is not None:
        if not -n_heads <= head < n_heads:
            raise SelectionError(
                "head",
                f'head {head} is out of range: the {kind} maps have {n_heads} head(s), 0…{n_heads - 1}, or "mean"',
            )
        w = w[:, head % n_heads : head % n_heads + 1]  # (L', 1, Q, K)
    return w


def _overview(w: Any) -> dict[str, Any]:
    """Every layer × head of ``(L, H, Q, K)`` max-pooled to at most OVERVIEW_SIZE², uint8 base64."""
    import torch.nn.functional as F

    n_layers, n_heads, nq, nk = (int(x) for x in w.shape)
    tq, tk = min(nq, OVERVIEW_SIZE), min(nk, OVERVIEW_SIZE)
    flat = w.reshape(n_layers * n_heads, 1, nq, nk)  # (L*H, 1, Q, K)
    pooled = F.adaptive_max_pool2d(flat, (tq, tk)) if (tq, tk) != (nq, nk) else flat
    return {
        "shape": [n_layers, n_heads, tq, tk],
        "encoding": "uint8",
        "scale": 255,
        "pooling": "max" if (tq, tk) != (nq, nk) else None,
        "data": encode_weights(pooled.reshape(n_layers, n_heads, tq, tk), "uint8"),
    }


def attention_payload(
    result: Any,
    decimals: int = 4,
    *,
    kind: str | None = None,
    layer: int | None = None,
    head: int | str | None = None,
    encoding: str = "json",
    overview: bool = False,
    max_bytes: int | None = None,
) -> dict[str, Any]:
    """Token labels and weights of the attention kinds in a :class:`~attnlab.translator.AttentionResult`.

    Returns ``{kind: {"title", "queries", "keys", "outputs", "layers", "heads", "layer", "head",
    "shape", "encoding", "weights"}}``. ``layers``/``heads`` count the model's maps; ``weights`` holds
    the selection, ``shape`` ``(layers', heads', len(queries), len(keys))``: every layer and head by
    default, one ``layer`` (negative counts from the end) and/or one ``head`` (``"mean"`` averages
    them). ``json``: nested lists rounded to ``decimals``; ``uint8``/``uint16``: base64 with a
    ``scale``. ``overview`` adds pooled thumbnails of every layer × head. When ``max_bytes`` is
    given, a kind whose weights would push the response past it gets ``weights: None`` and an
    ``omitted`` note (cross/self keep theirs first). Row ``t`` of ``cross`` is the query (decoder
    input ``queries[t]``) that produced ``outputs[t]``; ``outputs`` is ``None`` for the encoder's
    self-attention. The decoder-only ``self`` map runs over ``source <bos> target``.
    Raises :class:`SelectionError` for a layer or head out of range.
    """
    src, tgt, inputs = list(result.src_tokens), list(result.tgt_tokens), list(result.tgt_inputs)

    out: dict[str, Any] = {}
    picked: dict[str, Any] = {}
    for k, w in result.attention.items():
        if kind is not None and k != kind:
            continue
        w = w.float()
        if w.dim() != 4:
            continue
        if k == "enc_self":
            queries, keys, outputs = src, src, None
        elif k == "cross":
            queries, keys, outputs = inputs, src, tgt
        elif k == "dec_self":
            queries, keys, outputs = inputs, inputs, tgt
        elif k == "self":
            # Full teacher-forced pass over source + every decoder input; when decoding stopped without
            # <eos> the Translator drops the last input from its labels, so cut the map to the labels.
            queries = keys = src + inputs
            outputs = [""] * len(src) + tgt
        else:
            continue
        nq, nk = min(len(queries), w.shape[2]), min(len(keys), w.shape[3])
        w = w[:, :, :nq, :nk]  # (L, H, nq, nk)
        sel = _pick(w, layer, head, k)  # (L', H', nq, nk)
        picked[k] = (w, sel)
        out[k] = {
            "title": KIND_TITLES.get(k, k),
            "queries": queries[:nq],
            "keys": keys[:nk],
            "outputs": outputs[:nq] if outputs is not None else None,
            "layers": int(w.shape[0]),
            "heads": int(w.shape[1]),
            "layer": None if layer is None else layer % int(w.shape[0]),
            "head": head if head in (None, "mean") else int(head) % int(w.shape[1]),
            "shape": [int(x) for x in sel.shape],
            "encoding": encoding,
        }
        if encoding in _SCALE:
            out[k]["scale"] = _SCALE[encoding]
    used = 0.0
    per = _bytes_per_weight(encoding, decimals)
    for k in sorted(picked, key=lambda x: _PRIORITY.index(x) if x in _PRIORITY else len(_PRIORITY)):
        w, sel = picked[k]
        n_labels = len(out[k]["queries"]) + 2 * len(out[k]["keys"])
        cost = sel.numel() * per + 24 * n_labels
        thumb = (
            w.shape[0] * w.shape[1] * min(w.shape[2], OVERVIEW_SIZE) * min(w.shape[3], OVERVIEW_SIZE) * 4 / 3
        )
        cost += thumb if overview else 0.0
        if max_bytes is not None and used + cost > max_bytes:
            out[k]["weights"] = None
            out[k]["omitted"] = (
                f"the {k} maps selected hold {sel.numel():,} weights (about {sel.numel() * per / 1e6:.1f} MB "
                f"as {encoding}), more than this response's limit of {max_bytes / 1e6:.1f} MB leaves: ask for "
                'one "kind", one "layer" and "head" (e.g. "mean"), or "encoding": "uint8"'
            )
            continue
        used += cost
        out[k]["weights"] = encode_weights(sel, encoding, decimals)
        if overview:
            out[k]["overview"] = _overview(w)
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

    def _head(cls, v: Any) -> Any:
        if v is None or v == "mean" or (isinstance(v, int) and not isinstance(v, bool)):
            return v
        raise ValueError(f'head must be a head number (0, 1, …) or "mean", not {json.dumps(v)[:40]}')

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
            "check_head": field_validator("head", mode="before")(_head),
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
        max_len=(
            StrictInt | None,
            Field(
                None,
                ge=1,
                le=limits.max_output_tokens,
                description=f"most output tokens, the final <eos> included (default and limit: "
                f"{limits.max_output_tokens})",
            ),
        ),
        kind=(
            Literal["enc_self", "dec_self", "cross", "self"] | None,
            Field(None, description="send only this attention kind (default: every kind of the model)"),
        ),
        layer=(
            StrictInt | None,
            Field(
                None, ge=-64, le=63, description="send only this layer, from 0 (-1 = the last; default: all)"
            ),
        ),
        head=(
            int | Literal["mean"] | None,
            Field(None, description='send only this head, from 0, or "mean" of the heads (default: all)'),
        ),
        encoding=(
            Literal["json", "uint8", "uint16"],
            Field(
                "json",
                description="weights as JSON numbers (4 decimals), or round(w × 255 | 65535) as "
                "little-endian base64",
            ),
        ),
        overview=(
            StrictBool,
            Field(
                False,
                description=f"add a ≤{OVERVIEW_SIZE}×{OVERVIEW_SIZE} max-pooled uint8 thumbnail of every layer × head",
            ),
        ),
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


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without the port, lower-case: ``[::1]:8000`` → ``::1``."""
    h = header.strip().lower()
    if h.startswith("["):
        end = h.find("]")
        rest = h[end + 1 :] if end >= 0 else "?"
        if end < 0 or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return h  # malformed: matches no allowed name
        return h[1:end]
    if h.count(":") == 1:
        name, port = h.split(":")
        if port.isdigit() or not port:
            h = name
    return h.removesuffix(".")  # `localhost.` is `localhost`


def allowed_host_names(bind_host: str | None = None, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The names ``Host`` may carry: the loopback names, a non-loopback, non-wildcard ``bind_host``
    (``--host 192.168.1.5``) and each ``extra`` (``--allowed-host``; ``*`` allows any name)."""

    def bare(x: str) -> str:  # a bare IPv6 address (`fe80::1`) has no port to strip
        x = x.strip()
        return x.lower() if x.count(":") > 1 and not x.startswith("[") else host_name(x)

    names = list(LOOPBACK_NAMES)
    if bind_host and bind_host.strip() not in ("0.0.0.0", "::", "[::]", ""):
        names.append(bare(bind_host))
    names += ["*" if x.strip() == "*" else bare(x) for x in extra]
    return tuple(dict.fromkeys(n for n in names if n))


class HostGuard:
    """ASGI middleware: answer only requests whose ``Host`` names this server (400 otherwise).

    A page on any web site can make a browser send requests to 127.0.0.1 by rebinding its own DNS
    name to it (DNS rebinding); such requests carry that site's name as ``Host``. Loopback IP
    literals (127.0.0.0/8, ::1) are always accepted, any port. ``*`` in ``allowed`` accepts any name.
    """

    def __init__(self, app, allowed: Collection[str]) -> None:
        self.app = app
        self.any = "*" in allowed
        self.allowed = frozenset(host_name(a) for a in allowed if a != "*")

    def accepts(self, header: str | None) -> bool:
        if self.any:
            return True
        if not header:
            return False
        name = host_name(header)
        if name in self.allowed:
            return True
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        raw = next((v for k, v in scope.get("headers", ()) if k == b"host"), None)
        header = raw.decode("latin-1") if raw is not None else None
        if self.accepts(header):
            await self.app(scope, receive, send)
            return
        shown = repr(header[:100]) if header is not None else "(none)"
        names = ", ".join(sorted(self.allowed))
        fix = f"--allowed-host {host_name(header)}" if header else "--allowed-host NAME"
        body = json.dumps(
            {
                "detail": [
                    {
                        "loc": ["header", "host"],
                        "type": "host_not_allowed",
                        "msg": f"the Host header {shown} does not name this server (a guard against DNS "
                        f"rebinding); it answers to {names}; to reach it by another name start "
                        f"`attnlab serve` with {fix}",
                    }
                ]
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 400,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"x-content-type-options", b"nosniff"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


# ------------------------------------------------------------------------------------ the server


def deadline_protocol(header_timeout_s: float, body_timeout_s: float) -> type:
    """uvicorn's h11 protocol with read deadlines (uvicorn has none for a request in progress).

    A request head must be complete within ``header_timeout_s`` of the connection's start or of
    the request's first byte, and its body within ``body_timeout_s`` after the head; otherwise the
    client gets ``408`` (when no response has begun) and the connection is closed. Idle keep-alive
    connections are closed by uvicorn's ``timeout_keep_alive``; a request being answered has no
    deadline here (the app's ``deadline_s`` bounds the model).
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class DeadlineH11Protocol(H11Protocol):
        header_timeout = header_timeout_s
        body_timeout = body_timeout_s

        def connection_made(self, transport) -> None:  # type: ignore[override]
            self._deadline: asyncio.TimerHandle | None = None
            self._phase: str | None = None
            super().connection_made(transport)
            self._arm("head")  # a connection that sends nothing is closed too

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._track(bool(data))

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._track(False)

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel()
            super().connection_lost(exc)

        def _track(self, fresh: bool) -> None:
            if self.transport is None or self.transport.is_closing():
                self._cancel()
                return
            state = self.conn.their_state
            if state is h11.IDLE:
                if fresh or self.conn.trailing_data[0]:  # part of a request head has arrived
                    if self._phase != "head":
                        self._arm("head")
                elif self._phase is not None:
                    self._cancel()  # idle between requests: the keep-alive timeout's business
            elif state is h11.SEND_BODY:
                if self._phase != "body":
                    self._arm("body")
            else:  # the request is complete (or the connection is done)
                self._cancel()

        def _arm(self, phase: str) -> None:
            self._cancel()
            self._phase = phase
            seconds = self.header_timeout if phase == "head" else self.body_timeout
            self._deadline = self.loop.call_later(seconds, self._expire, phase, seconds)

        def _cancel(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline, self._phase = None, None

        def _expire(self, phase: str, seconds: float) -> None:
            self._deadline, self._phase = None, None
            if self.transport is None or self.transport.is_closing():
                return
            cycle = self.cycle
            answering = cycle is not None and not cycle.response_complete and cycle.response_started
            if not answering:
                msg = f"the request {phase} did not arrive within {seconds:g} s; connection closed\n".encode()
                self.transport.write(
                    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                    b"connection: close\r\ncontent-length: " + str(len(msg)).encode() + b"\r\n\r\n" + msg
                )
            self.logger.info(
                "closed a connection whose request %s did not arrive within %g s", phase, seconds
            )
            self.transport.close()

    return DeadlineH11Protocol


def uvicorn_config(app: FastAPI, host: str, port: int, limits: Limits, log_level: str = "info") -> Any:
    """The uvicorn settings ``attnlab serve`` uses: read deadlines, a connection limit, small heads."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=deadline_protocol(limits.header_timeout_s, limits.body_timeout_s),
        ws="none",
        limit_concurrency=limits.max_connections,
        timeout_keep_alive=limits.keep_alive_s,
        h11_max_incomplete_event_size=limits.max_header_bytes,
        timeout_graceful_shutdown=5,
    )


def serve(app: FastAPI, host: str, port: int, limits: Limits, log_level: str = "info") -> None:
    """Run ``app`` with :func:`uvicorn_config` until interrupted."""
    import uvicorn

    uvicorn.Server(uvicorn_config(app, host, port, limits, log_level)).run()


# ---------------------------------------------------------------------------------------- caches

_GZIP_LEVEL = 4  # cheap: about as fast as the JSON encoding, most of the size win of level 9
_GZIP_MIN = 2048


def accepts_gzip(request: Request) -> bool:
    enc = request.headers.get("accept-encoding", "")
    return any(part.split(";")[0].strip() == "gzip" for part in enc.lower().split(","))


def gzip_bytes(data: bytes, level: int = _GZIP_LEVEL) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


class _ResultCache:
    """The last translations' attention results (LRU, at most ``max_bytes`` of maps), so that a page
    looking at another layer, head or kind of the same sentence does not run the model again."""

    def __init__(self, max_bytes: int = 64 * 2**20) -> None:
        self.max_bytes, self.used = max_bytes, 0
        self._items: OrderedDict[tuple, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def size(res: Any) -> int:
        maps = getattr(res, "attention", None) or {}
        return sum(int(w.numel()) * w.element_size() for w in maps.values() if hasattr(w, "numel")) + 1024

    def get(self, key: tuple) -> Any:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: tuple, res: Any) -> None:
        n = self.size(res)
        if n > self.max_bytes // 4:
            return
        with self._lock:
            if key in self._items:
                return
            self._items[key] = (res, n)
            self.used += n
            while self.used > self.max_bytes and self._items:
                _, (_, m) = self._items.popitem(last=False)
                self.used -= m


class _ProbeCache:
    """Each run's ``/api/probes`` answer as bytes (and gzipped), rebuilt only when ``probes.jsonl``
    changes (its mtime, size or inode)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: dict[str, list[Any]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, r: LoadedRun, gzip_ok: bool) -> tuple[bytes, bool]:
        """The body for run ``r`` and whether it is gzipped; runs in a worker thread."""
        with self._guard:
            lock = self._locks.setdefault(r.name, threading.Lock())
        with lock:  # two requests for one run: the second waits for the first's build, then shares it
            key = _file_key(r.run_dir / "probes.jsonl" if r.run_dir is not None else None)
            item = self._items.get(r.name)
            if item is None or item[0] != key:
                data = read_probes(r.run_dir, self.max_bytes)
                payload = {"run": r.name, "model_kind": r.info.get("model_kind"), **data}
                plain = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
                item = [key, plain, None]
                self._items[r.name] = item
            if gzip_ok and len(item[1]) >= _GZIP_MIN:
                if item[2] is None:
                    item[2] = gzip_bytes(item[1])
                return item[2], True
            return item[1], False


def _file_key(path: Path | None) -> tuple[int, int, int] | None:
    try:
        st = path.stat() if path is not None else None
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino) if st is not None else None


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
    allowed_hosts: Collection[str] | None = None,
) -> FastAPI:
    """Build the app over loaded runs (or run folders, loaded here with :func:`load_runs`).

    The first run is the default of ``POST /api/translate``. ``allowed_hosts``: the names the
    ``Host`` header may carry (default: the loopback names; see :func:`allowed_host_names`).
    Raises :class:`AttnlabError` when a run cannot be loaded. The model thread pool is shut down
    with the app.
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
    results = _ResultCache()
    probe_cache = _ProbeCache(limits.max_probe_bytes)
    hosts = tuple(allowed_hosts) if allowed_hosts is not None else LOOPBACK_NAMES
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
    app.state.allowed_hosts = hosts
    # Small responses (pages, /api/runs) are compressed here, cheaply; the large ones (translations,
    # probes) arrive already compressed by their worker, inside the admission slot, and pass through.
    app.add_middleware(GZipMiddleware, minimum_size=_GZIP_MIN, compresslevel=_GZIP_LEVEL)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)

    @app.middleware("http")
    async def security_headers(request: Request, call_next):
        response = await call_next(request)
        for k, v in _SECURITY_HEADERS.items():
            response.headers.setdefault(k, v)
        return response

    app.add_middleware(HostGuard, allowed=hosts)  # outermost: a foreign Host reaches nothing else

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
            items.append({"name": r.name, **r.info, **read_test_scores(r.run_dir, r.info)})
        return {
            "default": default_run,
            "runs": items,
            "limits": {
                "max_chars": limits.max_chars,
                "max_beam": limits.max_beam,
                "max_body_bytes": limits.max_body_bytes,
                "deadline_s": limits.deadline_s,
                "max_output_tokens": limits.max_output_tokens,
                "max_response_bytes": limits.max_response_bytes,
            },
        }

    def busy() -> JSONResponse:
        return JSONResponse(
            status_code=429,
            headers={"Retry-After": "1"},
            content={
                "detail": f"the server is busy ({limits.max_pending} requests in progress); retry in a moment"
            },
        )

    def too_slow() -> JSONResponse:
        return JSONResponse(
            status_code=504,
            content={
                "detail": f"the translation took longer than {limits.deadline_s:g} s; try a shorter sentence "
                "or beam_size 1"
            },
        )

    def encoded(body: bytes, gz: bool) -> Response:
        headers = {"Cache-Control": "no-store", "Vary": "Accept-Encoding"}
        if gz:
            headers["Content-Encoding"] = "gzip"
        return Response(body, media_type="application/json", headers=headers)

    @app.get(
        "/api/probes",
        summary="probe sentences' attention recorded during training",
        responses={422: {"model": ErrorBody}, 429: {"model": ErrorBody}, 504: {"model": ErrorBody}},
    )
    async def probes(
        request: Request, run: Annotated[str, Query(max_length=64, description="a loaded run's name")]
    ):
        if run not in runs:
            return _error(
                422, ["query", "run"], f"unknown run; loaded runs: {', '.join(runs)}", "value_error"
            )
        if not admission.try_acquire():
            return busy()
        # Parsed, encoded and compressed in a model thread, under admission; cached per file version.
        cfut = pool.submit(probe_cache.get, runs[run], accepts_gzip(request))
        cfut.add_done_callback(admission.release)
        try:
            body, gz = await asyncio.wait_for(asyncio.wrap_future(cfut), timeout=limits.deadline_s)
        except TimeoutError:
            cfut.cancel()
            return JSONResponse(
                status_code=504,
                content={"detail": f"reading the probes took longer than {limits.deadline_s:g} s"},
            )
        return encoded(body, gz)

    async def translate(req, request: Request):
        name = req.run or default_run
        r = runs[name]
        kinds = r.info.get("kinds")
        if req.kind is not None and isinstance(kinds, list) and req.kind not in kinds:
            have = ", ".join(kinds) if kinds else "none (a fixed context)"
            return _error(
                422,
                ["body", "kind"],
                f"run {name!r} has no {req.kind} attention; its kinds: {have}",
                "value_error",
            )
        if not admission.try_acquire():
            return busy()
        job = _Job(
            r,
            req.text,
            req.beam_size,
            req.max_len or limits.max_output_tokens,
            req.kind,
            req.layer,
            req.head,
            req.encoding,
            req.overview,
            limits.max_response_bytes,
            accepts_gzip(request),
        )
        cfut = pool.submit(_work, job, results, time.perf_counter())
        cfut.add_done_callback(admission.release)
        try:
            body, gz = await asyncio.wait_for(asyncio.wrap_future(cfut), timeout=limits.deadline_s)
        except TimeoutError:
            cfut.cancel()  # frees the slot at once if the work had not started
            return too_slow()
        except SelectionError as e:
            return _error(422, ["body", e.field_name], str(e), "value_error")
        except AttnlabError as e:
            return _error(422, ["body", "text"], str(e), "value_error")
        return encoded(body, gz)

    # The body model is built at run time (it carries the limits), so annotate after the fact:
    # with `from __future__ import annotations` a local name would not resolve.
    translate.__annotations__["req"] = Req
    translate.__annotations__["request"] = Request
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


@dataclass(frozen=True)
class _Job:
    """One admitted translation request, as the worker thread needs it."""

    run: LoadedRun
    text: str
    beam_size: int
    max_len: int
    kind: str | None
    layer: int | None
    head: int | str | None
    encoding: str
    overview: bool
    max_bytes: int
    gzip: bool


def _work(job: _Job, cache: _ResultCache, t0: float) -> tuple[bytes, bool]:
    """Runs in a model thread, inside the admission slot: the translation with its attention (or
    the cached one of the same request), the JSON encoding and the gzip compression, so that
    neither a large payload nor its compression ever holds up the event loop (and /health)."""
    r = job.run
    key = (r.name, job.text, job.beam_size, job.max_len)
    res = cache.get(key)
    if res is None:
        res = r.translator.attention(job.text, beam_size=job.beam_size, max_len=job.max_len)
        cache.put(key, res)
    attention = attention_payload(
        res,
        kind=job.kind,
        layer=job.layer,
        head=job.head,
        encoding=job.encoding,
        overview=job.overview,
        max_bytes=job.max_bytes,
    )
    tgt = list(res.tgt_tokens)
    warnings = [f"{k}: {a['omitted']}" for k, a in attention.items() if a.get("omitted")]
    finished = bool(tgt) and tgt[-1] == "<eos>"
    if not finished and len(tgt) >= job.max_len:
        warnings.append(f"the translation stopped at the output limit of {job.max_len} tokens before <eos>")
    payload = {
        "run": r.name,
        "model_kind": r.info.get("model_kind"),
        "beam_size": job.beam_size,
        "max_len": job.max_len,
        "source": res.source,
        "translation": res.translation,
        "src_tokens": list(res.src_tokens),
        "tgt_tokens": tgt,
        "tgt_inputs": list(res.tgt_inputs),
        "finished": finished,
        "truncated": bool(res.truncated),
        "unknown_words": unknown_words(r.translator, job.text, res.src_tokens),
        "kinds": list(res.attention),
        "attention": attention,
        "warnings": warnings,
    }
    payload["elapsed_ms"] = round(1000 * (time.perf_counter() - t0), 1)
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if job.gzip and len(body) >= _GZIP_MIN:
        return gzip_bytes(body), True
    return body, False


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
