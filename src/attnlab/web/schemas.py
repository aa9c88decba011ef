"""What a request may hold and what a refusal looks like: the translate body, its checks, error bodies.

- :func:`make_request_model`: the ``POST /api/translate`` body as a pydantic model built per app,
  so that the server's limits (characters, beam, output tokens) and run names are in its schema;
- :func:`check_text`: the rules for ``text`` beyond its length (422 naming the rule and position);
  ``text`` may also be a list of sentences (:func:`check_texts`), each held to the same rules;
- the decode settings a request may give (:data:`REQUEST_DECODE_KEYS`: the ``decode.*`` keys of
  ``config.DECODE_OPTIONS``, by key), over the server's own (``attnlab serve --beam …``), checked by
  :class:`~attnlab.config.DecodeConfig` as on the command line (:func:`request_decode`); ``lang``;
- :class:`ErrorBody`: the ``{"detail": …}`` every 4xx/5xx carries, and the two exception handlers
  that give FastAPI's own errors that shape with one-line messages.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    create_model,
    field_validator,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnlab.config import DECODE_OPTIONS, ConfigError, DecodeConfig
from attnlab.i18n import LanguageError, catalogue
from attnlab.web.guards import Limits
from attnlab.web.payloads import OVERVIEW_SIZE

# Characters refused in `text`: they are never part of a sentence a person typed, and bidi overrides
# would make the token labels on the page lie about their order.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_ALLOWED_CONTROLS = frozenset("\t\n\r")


def check_run(name: str | None, run_names: Sequence[str]) -> str | None:
    """A request's ``run``: None (the default run) or one of the loaded runs' names."""
    if name is not None and name not in run_names:
        raise ValueError(f"unknown run; loaded runs: {', '.join(run_names)}")
    return name


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


def _json_type(v: Any) -> str:
    return {dict: "an object", list: "a list", bool: "true/false", int: "a number", float: "a number",
            type(None): "null"}.get(type(v), type(v).__name__)


def check_sentence(v: Any, max_chars: int, name: str = "text") -> str:
    """One sentence of a request: a string of 1 to ``max_chars`` characters that :func:`check_text` accepts."""
    if not isinstance(v, str):
        raise ValueError(f"{name} should be a string (a sentence) or a list of strings, not {_json_type(v)}")
    if not v:
        raise ValueError(f'{name} should have at least 1 character; type a sentence, e.g. "i\'m home ."')
    if len(v) > max_chars:
        raise ValueError(f"{name} should have at most {max_chars} characters, not {len(v)}: shorten it")
    return check_text(v, max_chars)


def check_texts(v: Any, limits: Limits) -> str | list[str]:
    """``text``: one sentence, or a list of 1 to ``max_sentences`` of them, each held to the same rules
    (a message names the sentence by its index)."""
    if not isinstance(v, list):
        return check_sentence(v, limits.max_chars)
    if not v:
        raise ValueError('text is an empty list; send a sentence or a list of them, e.g. ["go .", "i\'m home ."]')
    if len(v) > limits.max_sentences:
        raise ValueError(f"text holds {len(v)} sentences; the limit is {limits.max_sentences}: "
                         "send them in several requests")
    for i, text in enumerate(v):
        try:
            check_sentence(text, limits.max_chars, f"text[{i}]")
        except ValueError as e:
            msg = str(e)
            raise ValueError(msg if msg.startswith(f"text[{i}]") else f"text[{i}]: {msg}") from None
    return v


#: ``decode.*`` keys the server alone sets (``attnlab serve --batch-size``, ``--max-tokens``): how sentences are
#: batched changes no translation, only how much memory one request takes
SERVER_DECODE_KEYS = {"batch_size": "--batch-size", "max_tokens": "--max-tokens"}
#: the ``decode.*`` keys a request may set, named as in the config (``beam_size``, ``length_penalty``, …)
REQUEST_DECODE_KEYS = tuple(key for _option, key, _kind, _help in DECODE_OPTIONS if key not in SERVER_DECODE_KEYS)


class DecodeRefused(ValueError):
    """A request's decode settings that :class:`~attnlab.config.DecodeConfig` refuses; ``key``: the one named."""

    def __init__(self, key: str | None, message: str) -> None:
        super().__init__(message)
        self.key = key


def request_decode(base: DecodeConfig, req: BaseModel) -> DecodeConfig:
    """``base`` (the run's ``decode`` section with ``attnlab serve``'s options) with the decode settings
    ``req`` gives, checked as ``decode.key=value`` is on the command line. Raises :class:`DecodeRefused`
    with :class:`~attnlab.config.DecodeConfig`'s one-line message and the key it names."""
    given = {k: getattr(req, k) for k in REQUEST_DECODE_KEYS if getattr(req, k, None) is not None}
    if not given:
        return base
    try:
        return dataclasses.replace(base, **given)
    except ConfigError as e:
        named = next((k for k in given if re.search(rf"decode\.{k}\b", str(e))), None)
        raise DecodeRefused(named, str(e)) from None


def check_lang(v: Any) -> Any:
    """A request's ``lang``: a language with a catalogue (``zh``, ``zh-CN``, ``en``), or None."""
    if v is not None:
        try:
            catalogue(v, source="lang")
        except LanguageError as e:
            raise ValueError(str(e)) from None
    return v


def unknown_field(key: Any, fields: Sequence[str]) -> str:
    """The message for a body key that is no field: the nearest field, or that a server-only decode key
    (``batch_size``) is the server's."""
    shown = json.dumps(key)[:40]
    if key in SERVER_DECODE_KEYS:
        return (f"{shown} is the server's setting (`attnlab serve {SERVER_DECODE_KEYS[key]}`): how sentences are "
                "batched changes no translation; leave it out")
    close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
    hint = f"; did you mean {json.dumps(close[0])}?" if close else ""
    listed = f" (the fields: {', '.join(fields)})" if fields else ""
    return f"{shown}: extra inputs are not permitted{hint}{listed}"


#: the options that shape one sentence's attention maps; a list of sentences gets translations alone
MAP_OPTIONS = {"kind": None, "layer": None, "head": None, "encoding": "json", "overview": False, "pad": 0}


def make_request_model(limits: Limits, run_names: Sequence[str]) -> type[BaseModel]:
    """The POST /api/translate body, with the server's limits written into its schema."""
    names = list(run_names)

    def _text(cls, v: Any) -> str | list[str]:
        return check_texts(v, limits)

    def _head(cls, v: Any) -> Any:
        if v is None or v == "mean" or (isinstance(v, int) and not isinstance(v, bool)):
            return v
        raise ValueError(f'head must be a head number (0, 1, …) or "mean", not {json.dumps(v)[:40]}')

    def _run(cls, v: str | None) -> str | None:
        return check_run(v, names)

    fields = _request_fields(limits, names)

    def _lang(cls, v: Any) -> Any:
        return check_lang(v)

    return create_model(
        "TranslateRequest",
        __config__=ConfigDict(extra="forbid"),
        __validators__={
            "check_text": field_validator("text", mode="before")(_text),
            "check_run": field_validator("run")(_run),
            "check_head": field_validator("head", mode="before")(_head),
            "check_lang": field_validator("lang")(_lang),
        },
        **fields,
    )


def _decode_fields(limits: Limits) -> dict[str, Any]:
    """One field per :data:`REQUEST_DECODE_KEYS` key, from ``config.DECODE_OPTIONS`` (its help; None: the
    server's setting); the beam and the n-best list are capped by ``--max-beam``, the output by
    ``--max-output-tokens`` (``max_len``), so that one request cannot take the server."""
    kinds = {int: StrictInt, float: StrictFloat, bool: StrictBool}
    out: dict[str, Any] = {}
    for option, key, kind, helptext in DECODE_OPTIONS:
        if key in SERVER_DECODE_KEYS:
            continue
        capped = key in ("beam_size", "nbest")
        cap = f"; at most {limits.max_beam}, the server's --max-beam" if capped else ""
        out[key] = (kinds[kind], Field(None, **({"ge": 1, "le": limits.max_beam} if capped else {}),
                                       description=f"{helptext} (decode.{key}, `{option}`; default: the "
                                       f"server's{cap})"))
    return out


def _request_fields(limits: Limits, names: list[str]) -> dict[str, Any]:
    """The body's fields as ``name=(type, Field(default, bounds, description))`` for ``create_model``."""
    return dict(
        text=(
            StrictStr | list[StrictStr],
            Field(
                description=f"a sentence (at most {limits.max_chars} characters), answered with its attention "
                f"maps; or a list of up to {limits.max_sentences} sentences, answered with their translations "
                "alone (`translations`)",
                examples=["i'm home .", ["go .", "i'm home ."]],
                # JSON Schema applies the length keywords to a string and the item keywords to a list
                json_schema_extra={"minLength": 1, "maxLength": limits.max_chars, "minItems": 1,
                                   "maxItems": limits.max_sentences},
            ),
        ),
        **_decode_fields(limits),
        run=(StrictStr | None, Field(None, max_length=64, description=f"one of: {', '.join(names)}")),
        lang=(
            StrictStr | None,
            Field(None, max_length=16, description="the language of the answer's text (the alignment verdict's "
                  "summary, warnings): en, zh, … (default: the lang query parameter, else Accept-Language, "
                  "else the server's --lang)"),
        ),
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
        pad=(
            StrictInt,
            Field(
                0,
                ge=0,
                le=8,
                description="<pad> positions added after the source's <eos>, as in a batch beside a longer "
                "sentence (notes §23): their key columns get exactly 0 weight",
            ),
        ),
    )


# ---------------------------------------------------------------------------------- error bodies


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    detail: list[ErrorItem] | str


_RANGES = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def clean_errors(errors: Sequence[Mapping[str, Any]], fields: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Pydantic errors without the echoed input (which may hold a lone surrogate: unencodable); a range
    error names its field, an unknown key the nearest of ``fields`` (the body's)."""
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
        if e.get("type") in _RANGES and loc and isinstance(loc[-1], str):  # the field and its allowed range
            msg = f"{loc[-1]}: {msg}"
        if e.get("type") == "extra_forbidden" and loc:
            msg = unknown_field(loc[-1], fields)
        out.append(
            {
                "loc": loc,
                "msg": msg.encode("utf-8", "backslashreplace").decode("utf-8"),
                "type": str(e.get("type", "value_error")),
            }
        )
    return out


async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    """Exception handler: a body or query that fails validation → 422 with :func:`clean_errors`."""
    return JSONResponse(status_code=422, content={"detail": clean_errors(exc.errors(), _body_fields(request))})


def _body_fields(request: Request) -> list[str]:
    """The field names of the body model of the route ``request`` reached (none for a query or no body)."""
    body = getattr(request.scope.get("route"), "body_field", None)
    model = getattr(getattr(body, "field_info", None), "annotation", None)
    return list(getattr(model, "model_fields", None) or ())


async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Exception handler: FastAPI's own HTTP errors (404, 405, …) as ``{"detail": …}``, keeping
    their headers; a body FastAPI could not read (400) says what to send instead."""
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
