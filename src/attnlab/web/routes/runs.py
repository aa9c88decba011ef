"""``GET /health``, ``GET /api/runs`` and ``GET /api/probes``: what is loaded, and what training recorded."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from attnlab.web.deadline import DeadlinePassed
from attnlab.web.guards import refuse_cross_site
from attnlab.web.registry import read_test_scores
from attnlab.web.responses import accepts_gzip, busy, encoded, error
from attnlab.web.schemas import ErrorBody
from attnlab.web.state import Busy, ServerState


def router(state: ServerState) -> APIRouter:
    """The routes over ``state``'s runs; ``/health`` never waits for a model."""
    api = APIRouter()
    limits, runs = state.limits, state.runs

    @api.get("/health", summary="liveness; answers while models compute")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "runs": list(runs),
            "busy": state.admission.used,
            "capacity": limits.max_pending,
            "uptime_s": round(time.time() - state.started, 1),
        }

    @api.get("/api/runs", summary="the loaded runs")
    async def list_runs() -> dict[str, Any]:
        items = []
        for r in runs.values():
            items.append({"name": r.name, **r.info, **read_test_scores(r.run_dir, r.info, r.which)})
        return {
            "default": state.default_run,
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

    @api.get(
        "/api/probes",
        summary="probe sentences' attention recorded during training",
        dependencies=[Depends(refuse_cross_site)],  # it parses and compresses up to max_probe_bytes
        responses={403: {"model": ErrorBody}, 422: {"model": ErrorBody}, 429: {"model": ErrorBody},
                   504: {"model": ErrorBody}},
    )
    async def probes(
        request: Request, run: Annotated[str, Query(max_length=64, description="a loaded run's name")]
    ):
        if run not in runs:
            return error(422, ["query", "run"], f"unknown run; loaded runs: {', '.join(runs)}", "value_error")
        try:
            # Parsed, encoded and compressed in a model thread, under admission; cached per file version.
            body, gz = await state.run_admitted(state.probes.get, runs[run], accepts_gzip(request))
        except Busy:
            return busy(limits)
        except (TimeoutError, DeadlinePassed):
            return JSONResponse(
                status_code=504,
                content={"detail": f"reading the probes took longer than {limits.deadline_s:g} s"},
            )
        return encoded(body, gz)

    return api
