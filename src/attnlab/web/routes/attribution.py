"""``POST /api/attribution``: is attention an explanation? (notes §27.5, §28.5), computed in a model thread.

Body ``{"text", "run", "method", "steps"}``: ``method`` ``"ig"`` (integrated gradients, the default)
or ``"ixg"`` (input × gradient) attributes each output token of the greedy translation to the source
tokens and returns it beside the attention (last layer, heads averaged) and the rollout, with
Spearman's ρ per output token and per sentence (:func:`attnlab.analysis.attribution.run`, then
:meth:`~attnlab.analysis.attribution.Attribution.to_json`);
``"rollout"`` returns the attention rollout of each self-attention stack beside its last layer
(:meth:`~attnlab.analysis.attribution.RolloutReport.to_json`).

Integrated gradients cost one forward and backward pass per interpolation point *and* output token,
and each pass grows with the output, so one request is bounded three ways: ``steps`` ≤
:data:`MAX_STEPS`, steps × output tokens ≤ :data:`MAX_GRADIENT_ROWS`, and at most
:data:`MAX_GRADIENT_TOKENS` output tokens — the translation is attributed up to its first
:func:`max_output_tokens` tokens (16 at 64 steps, 32 at 32 or fewer; a ``warnings`` entry says so
when it was cut). What one request costs at those caps is measured in bench/RESULTS.md; a source of
hundreds of tokens on a larger model may still reach the deadline (504).
The work runs under the same admission and deadline as a translation and stops at the deadline
between output tokens and between batches of points (:mod:`attnlab.web.deadline`): a 504 frees
its slot at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, create_model, field_validator

from attnlab.analysis import attribution as A
from attnlab.analysis.attribution import DEFAULT_STEPS, AttributionError
from attnlab.errors import AttnlabError
from attnlab.maps import display_labels
from attnlab.web.deadline import DeadlinePassed, check
from attnlab.web.registry import LoadedRun
from attnlab.web.responses import (
    GZIP_MIN,
    accepts_gzip,
    busy,
    encoded,
    error,
    gzip_bytes,
    json_bytes,
    too_slow,
)
from attnlab.web.schemas import ErrorBody, check_run, check_text
from attnlab.web.state import Busy, ServerState

MAX_STEPS = 64  # each point is one more forward and backward pass per output token: a bound on the work
MAX_GRADIENT_ROWS = 1024  # points × output tokens of one integrated-gradients request (see the docstring)
MAX_GRADIENT_TOKENS = 32  # output tokens of one integrated-gradients request: each pass runs over all of them


def max_output_tokens(method: str, steps: int, limit: int) -> int:
    """The most output tokens one request attributes: ``limit`` (the server's per-translation cap),
    and for integrated gradients also :data:`MAX_GRADIENT_ROWS` // ``steps`` and :data:`MAX_GRADIENT_TOKENS`."""
    return min(limit, MAX_GRADIENT_ROWS // steps, MAX_GRADIENT_TOKENS) if method == "ig" else limit


def request_model(max_chars: int, run_names: list[str]) -> type[BaseModel]:
    """The body of ``POST /api/attribution`` with the server's limits and run names in its schema."""

    def _text(cls, v: str) -> str:
        return check_text(v, max_chars)

    def _run(cls, v: str | None) -> str | None:
        return check_run(v, run_names)

    return create_model(
        "AttributionRequest",
        __config__=ConfigDict(extra="forbid"),
        __validators__={"check_text": field_validator("text")(_text), "check_run": field_validator("run")(_run)},
        text=(StrictStr, Field(min_length=1, max_length=max_chars, description="an English sentence",
                               examples=["i'm home ."])),
        run=(StrictStr | None, Field(None, max_length=64, description=f"one of: {', '.join(run_names)}")),
        method=(Literal["ig", "ixg", "rollout"], Field("ig", description="ig: integrated gradients, ixg: input × "
                                                       "gradient, rollout: attention rollout")),
        steps=(StrictInt, Field(DEFAULT_STEPS, ge=1, le=MAX_STEPS, description=(
            f"integrated gradients' interpolation points; steps × output tokens is at most {MAX_GRADIENT_ROWS} "
            f"and output tokens at most {MAX_GRADIENT_TOKENS}, so the translation's first "
            f"min({MAX_GRADIENT_ROWS} // steps, {MAX_GRADIENT_TOKENS}) tokens are attributed (16 at 64 steps, "
            f"{MAX_GRADIENT_TOKENS} at 32 or fewer)"))),
    )


@dataclass(frozen=True)
class AttributionJob:
    """One admitted request, as the worker thread needs it."""

    run: LoadedRun
    text: str
    method: str
    steps: int
    max_len: int
    gzip: bool


def attribution_job(job: AttributionJob, t0: float) -> tuple[bytes, bool]:
    """Runs in a model thread, inside the admission slot: the attribution, its JSON and its gzip."""
    report = A.run(job.run.translator, job.text, job.method, steps=job.steps, max_len=job.max_len)
    check()  # past the deadline nobody reads the answer: stop before encoding it
    payload: dict[str, Any] = {"run": job.run.name, "model_kind": job.run.info.get("model_kind"), **report.to_json()}
    rows = payload.get("rows")
    cut = isinstance(rows, list) and len(rows) >= job.max_len and (not rows or rows[-1] != "<eos>")
    # the page shows every token by attnlab.maps' one display rule, as for a translation
    payload["token_labels"] = display_labels([payload.get("rows") or [], payload.get("cols") or [],
                                              *[m["labels"] for m in payload.get("maps") or []]])
    payload["warnings"] = [cut_warning(job)] if cut else []
    payload["elapsed_ms"] = round(1000 * (time.perf_counter() - t0), 1)
    body = json_bytes(payload)
    if job.gzip and len(body) >= GZIP_MIN:
        return gzip_bytes(body), True
    return body, False


def cut_warning(job: AttributionJob) -> str:
    """Why the attributed translation stops at ``job.max_len`` tokens, and how to get more of it."""
    if job.method == "ig" and job.max_len == MAX_GRADIENT_ROWS // job.steps < MAX_GRADIENT_TOKENS:
        return (f"the translation was attributed up to its first {job.max_len} output tokens: steps × output "
                f"tokens is at most {MAX_GRADIENT_ROWS} here; fewer steps attribute more tokens")
    if job.method == "ig" and job.max_len == MAX_GRADIENT_TOKENS:
        return (f"the translation was attributed up to its first {job.max_len} output tokens, the most integrated "
                "gradients attribute here; `attnlab attribute` on the command line has no such limit")
    return f"the translation stopped at the output limit of {job.max_len} tokens before <eos>"


def router(state: ServerState) -> APIRouter:
    """The attribution route over ``state``'s runs."""
    api = APIRouter()
    limits = state.limits

    async def attribution(req, request: Request):
        r = state.runs[req.run or state.default_run]
        max_len = max_output_tokens(req.method, req.steps, limits.max_output_tokens)
        job = AttributionJob(r, req.text, req.method, req.steps, max_len, accepts_gzip(request))
        try:
            body, gz = await state.run_admitted(attribution_job, job, time.perf_counter())
        except Busy:
            return busy(limits)
        except (TimeoutError, DeadlinePassed):
            return too_slow(limits, "the attribution", "fewer steps or a shorter sentence" if req.method == "ig"
                            else "a shorter sentence")
        except AttributionError as e:  # a method this model cannot do (what, why, which to use instead)
            return error(422, ["body", "method"], str(e), "value_error")
        except AttnlabError as e:
            return error(422, ["body", "text"], str(e), "value_error")
        return encoded(body, gz)

    # The body model carries the limits, so it is built here and annotated after the fact.
    attribution.__annotations__["req"] = request_model(limits.max_chars, list(state.runs))
    attribution.__annotations__["request"] = Request
    api.post(
        "/api/attribution",
        summary="gradient attribution and attention rollout beside the attention",
        responses={413: {"model": ErrorBody}, 422: {"model": ErrorBody}, 429: {"model": ErrorBody},
                   504: {"model": ErrorBody}},
    )(attribution)
    return api
