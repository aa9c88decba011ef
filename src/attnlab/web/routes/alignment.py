"""``GET /api/alignment``: does a run's attention show the word alignment? Scored against gold (notes §25).

``?run=NAME&sentences=N&links=METHOD`` → the numbers of ``attnlab align RUN --no-ibm --links METHOD``
on the first ``sentences`` gold pairs, computed by the same function: the gold folder given to
``attnlab serve --gold``, else found as :func:`~attnlab.analysis.align.gold.gold_dir` finds it without
``--gold`` (``$ATTNLAB_GOLD_DIR``, else ``$ATTNLAB_DATA_DIR/hansards-enfr``), read by
:func:`~attnlab.analysis.align.gold.read_gold`, force-decoded and scored by
:func:`~attnlab.analysis.align.against_gold.run`. The answer is the report's
:meth:`~attnlab.analysis.align.report.AlignReport.to_json` (AER, precision and recall of every layer × head,
each layer's head average and the average of all, at shift 0 and 1; ``grid``, AER per layer × head then
the head average; the best heads; the domain note), the run and the gold folder named by their names.
The IBM Model 2 baseline is left out: it would train an aligner in every request, on the Tatoeba corpus.

The work runs in a model thread under the same admission and deadline as a translation, and stops at
the deadline between batches of force-decoded sentences (:mod:`attnlab.web.deadline`; 504, and its slot
is free at once); each answer is kept by run, gold files, sentences and link method
(:class:`~attnlab.web.registry.AlignmentCache`), so asking again is instant. ``sentences`` is capped at
:data:`MAX_SENTENCES` (the WPT-2003 test set has 447). Like every GET that computes, it refuses a
request another site's page makes (:func:`~attnlab.web.guards.refuse_cross_site`).

Refusals, one line each: a model with no attention from target to source words (seq2seq, encoder-only)
→ 422 on ``run``; no gold folder, or one that cannot be read → 404 naming what to set.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse

from attnlab.analysis.align.against_gold import run as align
from attnlab.analysis.align.extract import METHODS, AlignError, Extraction
from attnlab.analysis.align.gold import GOLD_ENV, gold_dir, read_gold
from attnlab.analysis.align.report import AlignReport
from attnlab.analysis.align.score import aligned_kind
from attnlab.web.deadline import DeadlinePassed, check
from attnlab.web.guards import refuse_cross_site
from attnlab.web.registry import AlignmentCache, LoadedRun
from attnlab.web.responses import busy, encoded, error, json_bytes
from attnlab.web.schemas import ErrorBody, check_run
from attnlab.web.state import Busy, ServerState

MAX_SENTENCES = 500  # each is one teacher-forced pass and its link scoring: a bound on one request's work
DEFAULT_SENTENCES = 100
SPLIT = "test"
TOP_K = 3  # also score the 3 best heads averaged, as `attnlab align` does by default
LinkMethod = Literal[METHODS]  # type: ignore[valid-type]  # the tuple's names, as an enum in the schema
NO_GOLD = (
    "no gold alignment folder on this server: restart `attnlab serve` with --gold DIR, DIR the WPT-2003 "
    "en-fr gold folder (test.en-fr.en, test.en-fr.fr, test.en-fr.naacl), or with ATTNLAB_GOLD_DIR set to it, "
    "or with the folder at $ATTNLAB_DATA_DIR/hansards-enfr"
)


def gold_folder(given: Path | None = None) -> Path:
    """``given`` (``attnlab serve --gold``, checked when the server started), else the gold folder as
    ``attnlab align`` finds it without ``--gold``; :class:`AlignError` (one line) otherwise, saying what
    to set."""
    if given is not None:
        return given
    try:
        return gold_dir(None)
    except AlignError:
        if os.environ.get(GOLD_ENV):
            raise  # its message names the folder that is not one
        raise AlignError(NO_GOLD) from None


def alignment_payload(report: AlignReport, run: str, gold: str, total: int) -> dict[str, Any]:
    """``report``'s JSON for the page, with the run and the gold folder by their names (a response never
    shows the server's paths) and ``total``, the gold's sentences."""
    return {**report.to_json(), "run": run, "gold": gold, "sentences_total": total}


@dataclass(frozen=True)
class AlignmentJob:
    """One admitted request, as the worker thread needs it."""

    run: LoadedRun
    folder: Path
    sentences: int
    method: str


def alignment_job(job: AlignmentJob, cache: AlignmentCache, key: tuple) -> tuple[dict[str, Any], bool]:
    """Runs in a model thread, inside the admission slot: the gold read, force-decoded and scored
    (or the answer another request built meanwhile); returns it and whether it was cached."""

    def make() -> dict[str, Any]:
        gold = read_gold(job.folder, SPLIT)
        check()
        ex = Extraction(job.method)
        report = align(job.run.translator, gold.first(job.sentences), ibm=False, ex=ex, top_k=TOP_K)
        check()
        return alignment_payload(report, job.run.name, job.folder.name, len(gold))

    return cache.build(key, make)


def router(state: ServerState) -> APIRouter:
    """The alignment route over ``state``'s runs."""
    api = APIRouter()
    limits, runs = state.limits, state.runs

    @api.get(
        "/api/alignment",
        summary="AER of every attention head against gold word alignments (notes §25)",
        dependencies=[Depends(refuse_cross_site)],
        responses={
            403: {"model": ErrorBody},
            404: {"model": ErrorBody},
            422: {"model": ErrorBody},
            429: {"model": ErrorBody},
            504: {"model": ErrorBody},
        },
    )
    async def alignment(
        run: Annotated[
            str | None, Query(max_length=64, description="a loaded run's name (default: the first)")
        ] = None,
        sentences: Annotated[
            int, Query(ge=1, le=MAX_SENTENCES, description="score the first N gold sentences")
        ] = DEFAULT_SENTENCES,
        links: Annotated[LinkMethod, Query(description="how a map becomes word links")] = "argmax",
    ):
        t0 = time.perf_counter()
        try:
            name = check_run(run, list(runs)) or state.default_run
            aligned_kind(runs[name].translator.model.config)
        except (ValueError, AlignError) as e:
            return error(422, ["query", "run"], str(e), "value_error")
        try:
            folder = gold_folder(state.gold)
        except AlignError as e:
            return JSONResponse(status_code=404, content={"detail": str(e)})
        key = AlignmentCache.key(name, folder, SPLIT, sentences, links)
        payload, cached = state.alignments.get(key), True
        if payload is None:
            job = AlignmentJob(runs[name], folder, sentences, links)
            try:
                payload, cached = await state.run_admitted(alignment_job, job, state.alignments, key)
            except Busy:
                return busy(limits)
            except (TimeoutError, DeadlinePassed):
                return JSONResponse(
                    status_code=504, content={"detail": _too_slow(sentences, limits.deadline_s)}
                )
            except AlignError as e:  # the gold folder's files are missing or malformed
                return JSONResponse(status_code=404, content={"detail": str(e)})
        body = {**payload, "cached": cached, "elapsed_ms": round(1000 * (time.perf_counter() - t0), 1)}
        return encoded(json_bytes(body), False)

    return api


def _too_slow(sentences: int, deadline_s: float) -> str:
    return (
        f"aligning {sentences} gold sentences took longer than {deadline_s:g} s and was stopped; "
        "ask for fewer sentences"
    )
