"""What a request may hold and what a refusal looks like: the translate body, its checks, error bodies.

- :func:`make_request_model`: the ``POST /api/translate`` body as a pydantic model built per app,
  so that the server's limits (characters, beam, output tokens) and run names are in its schema;
- :func:`check_text`: the rules for ``text`` beyond its length (422 naming the rule and position);
  ``text`` may also be a list of sentences (:func:`check_texts`), each held to the same rules;
- :class:`ErrorBody`: the ``{"detail": …}`` every 4xx/5xx carries, and the two exception handlers
  that give FastAPI's own errors that shape with one-line messages.
"""

from __future__ import annotations

import json
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
    StrictInt,
    StrictStr,
    create_model,
    field_validator,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnlab.web.guards import Limits
from attnlab.web.server import OVERVIEW_SIZE

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

    return create_model(
        "TranslateRequest",
        __config__=ConfigDict(extra="forbid"),
        __validators__={
            "check_text": field_validator("text", mode="before")(_text),
            "check_run": field_validator("run")(_run),
            "check_head": field_validator("head", mode="before")(_head),
        },
        **_request_fields(limits, names),
    )


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


def clean_errors(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
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


async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    """Exception handler: a body or query that fails validation → 422 with :func:`clean_errors`."""
    return JSONResponse(status_code=422, content={"detail": clean_errors(exc.errors())})


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
