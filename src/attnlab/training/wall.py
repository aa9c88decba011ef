"""Where one training invocation's wall clock went, by named part, for ``meta.json``'s ``wall_s``.

A budgeted run spends its minutes on updates and on everything around them: setting the run up,
building batches, agreeing with the other ranks, logging, validation (loss, BLEU, the probe
sentences' attention, the curves) and checkpoints. A slow machine pays each of these in full, so a
run records them, and ``bench/wallclock.py`` prints them beside each other for several runs.

Parts (seconds of this invocation; a resumed run records its own invocation):

- ``setup``: opening the run before its clock starts (data, tokenizers, model, optimizer); outside the
  budget;
- ``batch``: collating each batch and moving it to the device, and planning each epoch's batches;
- ``agree``: the all-reduce before each update (stop votes, token counts; one process pays little);
- ``update``: the forward and backward passes, clipping and the optimizer step;
- ``log``: the ``train`` records and the progress report;
- ``valid_loss``, ``valid_bleu``, ``probes``, ``curves``: validation's parts (``probes`` includes the
  attention recorded before the first update);
- ``checkpoint``: saving weights and state.

``other`` is what went to no part since :meth:`WallClock.start` (the loop itself). The parts are timed
with ``time.perf_counter``, never with the training loop's clock, so that a test's simulated clock
(one that advances per call) is not moved by them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

PARTS = ("setup", "batch", "agree", "update", "log", "valid_loss", "valid_bleu", "probes", "curves", "checkpoint")


class WallClock:
    """Seconds spent per named part, timed with ``clock``."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.spent: dict[str, float] = {}
        self.t_start: float | None = None

    def start(self) -> None:
        """The budget's clock starts now: :meth:`report`'s ``other`` counts from here."""
        self.t_start = self.clock()

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Add the time the ``with`` block takes to ``name`` (also when it raises)."""
        t0 = self.clock()
        try:
            yield
        finally:
            self.add(name, self.clock() - t0)

    def add(self, name: str, seconds: float) -> None:
        self.spent[name] = self.spent.get(name, 0.0) + seconds

    def report(self) -> dict[str, float]:
        """The parts in :data:`PARTS` order, rounded to milliseconds, with ``other``: the seconds since
        :meth:`start` less every part but ``setup``, never below 0."""
        out = {name: round(self.spent[name], 3) for name in PARTS if name in self.spent}
        since = 0.0 if self.t_start is None else self.clock() - self.t_start
        counted = sum(s for name, s in self.spent.items() if name != "setup")
        out["other"] = round(max(since - counted, 0.0), 3)
        return out
