"""Intra-op threads chosen by measurement, not by core count: :class:`ThreadTuner`.

Two OpenMP threads on two cores meet at the end of every parallel region; when another program takes a
core, each region waits for the descheduled thread, and a step can take several times one thread's time
(docs/explanations/threads.md). The step time sees that; the core count cannot. The loop that owns the
work times each unit (a training update, a batch of sentences) per unit of its size and compares counts:

- with ``sense`` (:func:`attnlab.device.idle_sampler`) the first units run on ``min_threads`` and sample
  the load; the count then starts no higher than the cores others leave free (an extra thread on a busy
  core can cost a step several times over, a missing one at most its share), and more threads are tried
  only when the last load sample (over a window, or more until it answers) finds a core free for them;
- a window's cost is its median unit; a neighbour count (``n ± 1``) that is more than ``margin`` faster
  is checked against the old count once more, in the window right after it (A-B-A: the mean of the two
  old windows is what the old count cost while the try ran, whatever burst or drift moved one of them),
  kept if it still wins, and the walk goes on while it wins; a try three times as slow in its first unit
  (which pays for the switch), twice as slow in the next two, or four margins slower over half a window,
  is given up, as is the check of a win as soon as the old count is that much slower;
- then it holds, and searches again every ``recheck_every`` units, when two windows running cost
  ``jump`` more or less (a neighbour came or went: only fewer threads can win when the cost rose), or
  when the load sample finds more free cores than threads in use.

OpenMP's passive wait policy avoids the spinning but slows a quiet machine, so the count adapts instead
(as CTranslate2's ``intra_threads``). The count is per OS thread: each decoding thread of a server tunes
its own (:class:`PerThread`). Clock and setter are injected, so tests run the decisions with no timing.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from attnlab.i18n import _


@dataclass(frozen=True)
class Change:
    """One settled change of thread count: after ``at`` units, ``old`` → ``new``, because the new count's
    cost per unit of work was ``old_cost / new_cost`` times lower (``speedup``); ``why`` is what started the
    search: ``start``, ``recheck``, ``jump`` or ``free`` (the load sample found a core free)."""

    at: int
    old: int
    new: int
    speedup: float
    why: str

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "speedup": round(self.speedup, 3)}


class ThreadTuner:
    """Adapts the intra-op thread count between ``min_threads`` and ``max_threads`` to the fastest now.

    Call ``t0 = tuner.begin()`` before a unit of work and ``tuner.end(t0, work)`` after it (``work`` > 0:
    its size, so that units of different sizes compare). ``start``: the count to begin with (default
    ``max_threads``); ``warmup``: units left unmeasured at the start (allocation, kernel choice) and after
    each change (the thread pool grows); ``window``: units per measurement. ``clock`` (seconds) and
    ``apply`` (sets the count; default ``torch.set_num_threads``) are injected for tests; ``say`` is
    called with one line per settled change. :attr:`changes` lists them; :attr:`tries` counts the
    neighbours tried. ``sense`` starts a load sample (``idle_sampler``): it returns a function that
    answers the free cores once it knows (None before), or None where the load cannot be read; see the
    module docstring. :attr:`sensed` keeps the first answer. Raises ``ValueError`` for bounds that are
    not ``1 <= min <= max``.
    """

    def __init__(self, max_threads: int, min_threads: int = 1, *, start: int | None = None, window: int = 12,
                 warmup: int = 3, margin: float = 0.05, recheck_every: int = 400, jump: float = 0.3,
                 clock: Callable[[], float] = time.perf_counter, apply: Callable[[int], None] | None = None,
                 say: Callable[[str], None] | None = None, unit: str = "step",
                 sense: Callable[[], Callable[[], int | None] | None] | None = None) -> None:
        if not 1 <= min_threads <= max_threads:
            raise ValueError(f"thread bounds must satisfy 1 <= min ({min_threads}) <= max ({max_threads})")
        self.min, self.max = min_threads, max_threads
        self.n = max(min_threads, min(max_threads, start or max_threads))  # the settled count
        self.window, self.warmup, self.margin = max(1, window), max(0, warmup), margin
        self.recheck_every, self.jump = max(1, recheck_every), jump
        self.clock, self._apply, self.say, self.unit = clock, apply or torch.set_num_threads, say, unit
        self.changes: list[Change] = []
        self.tries = 0
        self._sampler, self.sensed = sense, None
        self._sense = sense() if sense is not None else None  # the start's sample, until it answers
        self._window_sample = None  # in hold: the sample running now (over one window or more)
        self._free: int | None = None  # the last answer of a load sample
        self._capped = False  # the start was lowered by the sample: no core was free for more threads
        self._up_lost = False  # more threads lost their last try: a free core alone does not try again
        self.count = 0  # units seen
        self._lock = threading.Lock()
        self._skip = self.warmup
        self._costs: list[float] = []  # seconds per unit of work of each unit in the current window
        self._jumps = 0  # consecutive held windows whose cost moved by more than ``jump``
        self._phase = "base"  # "base": measure n; "try": measure self._cand; "check": n again after a
        # try that won (its cost in self._won); "hold": watch for a jump
        self._why, self._prefer = "start", "down"
        self._allow: set[str] = {"up", "down"}
        self._moved = False
        self._base = self._ref = self._won = 0.0
        self._applied: int | None = None
        self._cand = self.n
        self._since = 0
        self._every = self.recheck_every
        self._goal = self.n  # with ``sense``: the start it waits to confirm, on ``min_threads`` meanwhile
        if self._sense is not None:
            self.n = self._cand = self.min
        self._set(self.n)

    # ------------------------------------------------------------------ the two calls per unit of work

    def begin(self) -> float:
        """The clock before a unit of work, to hand to :meth:`end`."""
        if self._sense is not None:
            with self._lock:
                self._sensing()
        return self.clock()

    def end(self, t0: float, work: float) -> None:
        """Count one unit of ``work`` that began at ``t0``; may change the thread count for the next."""
        dt = self.clock() - t0
        with self._lock:
            self.count += 1
            if self._sense is not None:
                self._sensing()
                if self._sense is not None:
                    return  # the count may change once the sample answers: this unit measures nothing
            if work <= 0:
                return
            if self._skip > 0 and self._phase in ("try", "check"):
                ref = self._base if self._phase == "try" else self._won
                if ref > 0 and dt / work > 3 * ref:  # the first unit (switch and all) three times slower
                    self._skip = 0
                    (self._judge if self._phase == "try" else self._keep)(dt / work)
                    return
            if self._skip > 0:
                self._skip -= 1
                return
            self._costs.append(dt / work)
            if self._phase == "try" and self._clearly_slower(self._base):
                self._judge(statistics.median(self._costs))  # not a whole window on it
            elif self._phase == "check" and self._clearly_slower(self._won):
                self._keep(statistics.median(self._costs))  # the old count is clearly the slower
            elif len(self._costs) >= self.window:
                cost = statistics.median(self._costs)  # a burst of another program's work moves it little
                self._costs.clear()
                if self._phase == "base":
                    self._search(self._why, self._prefer, cost,
                                 frozenset({"down"}) if self._capped else frozenset({"up", "down"}))
                elif self._phase == "try":
                    self._judge(cost)
                elif self._phase == "check":
                    self._check(cost)
                else:
                    self._hold(cost)

    @property
    def current(self) -> int:
        """The count in use now (the settled one, or the neighbour being tried)."""
        return self._cand if self._phase == "try" else self.n

    def to_json(self) -> dict[str, Any]:
        """What a run records: the bounds, the count it ended on, each settled change and the tries."""
        return {"mode": "auto", "min": self.min, "max": self.max, "final": self.n, "tries": self.tries,
                "free_at_start": self.sensed, "changes": [c.to_json() for c in self.changes]}

    def describe(self) -> str:
        """One line: the bounds, the count it ended on and each change (what ``-v`` prints)."""
        moves = "; ".join(self._move(c) for c in self.changes) or _("no other count was faster")
        return _("threads: adaptive within {lo}-{hi}, on {n} now; {moves}").format(
            lo=self.min, hi=self.max, n=self.n, moves=moves)

    def _move(self, c: Change) -> str:
        return _("{old} → {new} after {at} {unit}s ({speedup:.2f}× faster per unit of work, {why})").format(
            old=c.old, new=c.new, at=c.at, unit=self.unit, speedup=c.speedup, why=c.why)

    # ------------------------------------------------------------------------------------ decisions

    def _sensing(self) -> None:
        """Once the load sample answers, start no higher than the free cores (before any search)."""
        free = self._sense()
        if free is None:
            return
        self._sense, self.sensed, self._free = None, free, free
        start = max(self.min, min(self._goal, free))
        self._capped = free < self._goal
        if start != self.n and self._phase == "base" and not self.changes and self.tries == 0:
            self.n = self._cand = start
            self._set(self.n)
            self._costs.clear()

    def _set(self, n: int) -> None:
        if n == self._applied:
            return
        self._apply(n)
        self._applied = n
        self._skip = max(self._skip, 1 if self.count else self.warmup)

    def _next_try(self) -> None:
        """Try the next neighbour of ``n`` this search allows (the preferred direction first), or hold."""
        for d in (("up", "down") if self._prefer == "up" else ("down", "up")):
            if d in self._allow and (self.n < self.max if d == "up" else self.n > self.min):
                self._cand = self.n + (1 if d == "up" else -1)
                self.tries += 1
                self._phase = "try"
                self._set(self._cand)
                return
        self._settle()

    def _clearly_slower(self, base: float) -> bool:
        """The window so far against ``base``: its first two units both twice as slow, or half a window's
        median slower by four margins."""
        k = len(self._costs)
        return ((k >= 2 and min(self._costs) > 2 * base)
                or (k >= max(2, self.window // 2) and statistics.median(self._costs) > (1 + 4 * self.margin) * base))

    def _judge(self, cost: float) -> None:
        """A neighbour tried that beat the old count goes to :meth:`_check`, on the old count for a window;
        one that lost is given up (:meth:`_lose`)."""
        self._costs.clear()
        self._set(self.n)
        if cost < self._base * (1 - self.margin):
            self._phase, self._won = "check", cost
        else:
            self._lose()

    def _check(self, again: float) -> None:
        """The old count measured again after the try that beat it: keep the try if it beats the mean
        of the old count's two windows, else give it up, with the fresh window as the old count's cost."""
        self._costs.clear()
        if self._won < (self._base + again) / 2 * (1 - self.margin):
            self._keep(again)
        else:
            self._base = again
            self._lose()

    def _keep(self, again: float) -> None:
        """Move to the neighbour that won, and walk on that way (never straight back to the count just
        left); ``again``: the old count's cost in the check."""
        self._costs.clear()
        cand, up = self._cand, self._cand > self.n
        change = Change(self.count, self.n, cand, (self._base + again) / 2 / self._won, self._why)
        self.changes.append(change)
        if self.say is not None:
            self.say(_("threads: {move}").format(move=self._move(change)))
        self.n, self._base, self._moved = cand, self._won, True
        self._set(cand)
        self._allow = {"up" if up else "down"}
        self._up_lost = self._up_lost and not up
        self._next_try()

    def _lose(self) -> None:
        """Stay on ``n`` and try the other way (not after a jump: see :meth:`_hold`), else hold."""
        up = self._cand > self.n
        self._allow.discard("up" if up else "down")
        self._up_lost = self._up_lost or up
        self._next_try()

    def _search(self, why: str, prefer: str, base: float, allow: frozenset[str] = frozenset({"up", "down"})) -> None:
        self._why, self._prefer, self._base = why, prefer, base
        self._allow, self._moved = set(allow), False
        self._next_try()

    def _settle(self) -> None:
        """Hold ``n``; the next periodic try comes later after a search that changed nothing."""
        self._every = self.recheck_every if self._moved else min(2 * self._every, 8 * self.recheck_every)
        self._phase, self._ref, self._since = "hold", self._base, 0
        self._window_sample = self._sampler() if self._sampler is not None else None

    def _hold(self, cost: float) -> None:
        """Search again after ``recheck_every`` units (longer after fruitless tries), or when two windows
        running cost more than ``jump`` away from the settled cost (a neighbour came or went; one window
        can be a burst). After a jump only one way can win: fewer threads when the cost rose, more when it
        fell. With a load sample, more threads are tried after a jump only when the last sample found a
        core free for them, and at once when a new sample does (one runs over a window, or over several
        where a window is shorter than the sample's minimum, as decoding's may be); the periodic search
        tries both ways whatever the samples say, so a wrong sample cannot hold the count down for good."""
        self._since += self.window
        self._jumps = self._jumps + 1 if abs(cost - self._ref) > self.jump * self._ref else 0
        free = self._window_sample() if self._window_sample is not None else None
        if free is not None:
            self._free = free
        if free is not None or self._window_sample is None:  # one not yet at its minimum time runs on
            self._window_sample = self._sampler() if self._sampler is not None else None
        allow = {"up", "down"} if self._free is None or self._free > self.n else {"down"}
        if self._jumps >= 2 or self._since >= self._every:
            jumped, self._jumps = self._jumps >= 2, 0
            prefer = "down" if cost > self._ref else "up"
            self._up_lost = self._up_lost and not jumped  # the load changed: a free core may now win
            wanted = {prefer} & allow if jumped else {"up", "down"}
            if wanted:
                self._search("jump" if jumped else "recheck", prefer, cost, frozenset(wanted))
        elif free is not None and free > self.n < self.max and not self._up_lost:
            self._search("free", "up", cost, frozenset({"up"}))


class PerThread:
    """One :class:`ThreadTuner` per OS thread, made by ``factory`` on first use: PyTorch's OpenMP thread
    count belongs to the thread that sets it, so each decoding thread of a server tunes its own."""

    def __init__(self, factory: Callable[[], ThreadTuner]) -> None:
        self.factory, self._local = factory, threading.local()
        self.all: list[ThreadTuner] = []
        self._lock = threading.Lock()

    def get(self) -> ThreadTuner:
        tuner = getattr(self._local, "tuner", None)
        if tuner is None:
            tuner = self._local.tuner = self.factory()
            with self._lock:
                self.all.append(tuner)
        return tuner
