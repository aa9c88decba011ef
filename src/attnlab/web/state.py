"""What one app holds while it serves, shared by its routes: the runs, the limits, the model threads.

Model work never runs on the event loop: :meth:`ServerState.run_admitted` takes an admission slot,
runs the work in one of ``limits.workers`` threads and waits at most ``limits.deadline_s`` for it,
so ``/health`` answers while every model computes. The work itself stops at that deadline
(:mod:`attnlab.web.deadline`), so its slot is free again moments after the 504.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.web import deadline
from attnlab.web.guards import Admission, Limits
from attnlab.web.registry import AlignmentCache, LoadedRun, ProbeCache, ResultCache


class Busy(Exception):
    """No admission slot is free (the route answers 429 at once, never a hang)."""


@dataclass
class ServerState:
    """The app's runs (the first is the default), limits, model threads, admission and caches, and
    the language the page speaks by default (``attnlab serve --lang``)."""

    runs: dict[str, LoadedRun]
    limits: Limits
    pool: ThreadPoolExecutor
    admission: Admission
    results: ResultCache
    probes: ProbeCache
    alignments: AlignmentCache = field(default_factory=AlignmentCache)
    lang: str = "en"
    gold: Path | None = None  # `attnlab serve --gold DIR`; None: found as `attnlab align` finds it
    started: float = field(default_factory=time.time)

    @classmethod
    def create(cls, runs: dict[str, LoadedRun], limits: Limits, lang: str = "en",
               gold: Path | None = None) -> ServerState:
        for r in runs.values():
            deadline.watch(getattr(r.translator, "model", None))  # its work stops at the request's deadline
        return cls(
            runs,
            limits,
            ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix="attnlab-model"),
            Admission(limits.max_pending),
            ResultCache(),
            ProbeCache(limits.max_probe_bytes),
            lang=lang,
            gold=gold,
        )

    @property
    def default_run(self) -> str:
        return next(iter(self.runs))

    async def run_admitted(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a model thread, under admission; its result, or what it raised.

        Raises :class:`Busy` when every slot is taken, and ``TimeoutError`` past ``deadline_s``, or
        :class:`~attnlab.web.deadline.DeadlinePassed` when the work noticed it first (routes answer
        both with 504). The work runs :func:`~attnlab.web.deadline.within` the same deadline and
        stops at its next check past it; work that has not started is cancelled. The slot is freed
        when the work really ends, never while it still computes. It runs in a copy of the request's
        context, so it speaks the request's language (:func:`attnlab.i18n.speaking`).
        """
        if not self.admission.try_acquire():
            raise Busy
        ends = time.monotonic() + self.limits.deadline_s
        cfut = self.pool.submit(contextvars.copy_context().run, deadline.run_within, ends, fn, *args)
        cfut.add_done_callback(self.admission.release)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(cfut), timeout=self.limits.deadline_s)
        except TimeoutError:
            cfut.cancel()  # frees the slot at once if the work had not started
            raise
