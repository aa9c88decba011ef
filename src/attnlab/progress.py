"""Progress of a long command on stderr, for a person at a terminal or for a program reading a log.

One :class:`Progress` serves three forms (``--log-format``):

- ``bar``: a tqdm bar, redrawn in place. A run with a time budget draws the budget's seconds
  (``12/60 s``), not a number of updates: the updates a minute holds are re-projected as the run
  goes (``training/budget.py``), and a bar whose total jumps says nothing;
- ``plain``: one line every ``interval_s`` seconds (``step, loss, lr, tokens/s, elapsed, ETA``), each
  ended by a newline, never a carriage return, so a log file grows by a line, not by redraws;
- ``json``: the same events as JSON lines (``{"event": "progress", …}``, ``"message"``, ``"valid"``…),
  and every other line written to stderr while the command runs is wrapped as a ``message`` event
  (:func:`json_stderr`), so every line of the log parses.

``auto`` (the default) is ``bar`` on a terminal and ``plain`` otherwise. Messages are always lines of
their own: the bar writes them above itself.
"""

from __future__ import annotations

import io
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from attnlab.i18n import N_, _

__all__ = ["FORMATS", "Progress", "json_stderr", "resolve_format"]

FORMATS = ("auto", "bar", "plain", "json")
#: a plain or JSON progress line at most this often, by default (seconds)
INTERVAL_S = 10.0

# How a figure reads in a line or beside the bar; others are printed as they are.
# The labels are translated in a plain line (``--lang``); the bar's postfix and the JSON keys stay as they are.
_SHOWN = {"loss": (N_("loss"), "{:.3f}"), "lr": ("lr", "{:.2e}"), "tokens_per_s": ("tok/s", "{:,.0f}")}
#: the units' names in a plain line (the JSON record keeps the unit itself as its key)
_UNITS = {"step": N_("step"), "sentence": N_("sentence"), "batch": N_("batch"), "line": N_("line")}


def resolve_format(fmt: str, stream: TextIO | None = None) -> str:
    """``auto`` → ``bar`` when ``stream`` (stderr by default) is a terminal, else ``plain``."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r} is unknown; choose one of: {', '.join(FORMATS)}")
    if fmt != "auto":
        return fmt
    stream = stream if stream is not None else sys.stderr
    try:
        return "bar" if stream.isatty() else "plain"
    except (AttributeError, ValueError):  # a closed or odd stream
        return "plain"


def clock_text(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` from an hour on)."""
    s = max(int(round(seconds)), 0)
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """Progress of ``desc`` in ``unit`` s: :meth:`update` after each one, :meth:`message` and :meth:`event`
    for lines of their own, :meth:`close` at the end (see the module docstring for the forms).

    ``total``: the units planned when that number holds (None: unknown, or re-projected as it goes);
    ``budget_s``: a time budget, which the bar draws instead of ``total``; ``initial``: units done
    before (a resumed run). ``clock`` paces the lines (tests pass a simulated one).
    """

    def __init__(self, desc: str, fmt: str = "auto", *, unit: str = "step", total: int | None = None,
                 initial: int = 0, budget_s: float = 0.0, interval_s: float = INTERVAL_S,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.fmt = resolve_format(fmt, self.stream)
        self.desc, self.unit, self.total, self.budget_s = desc, unit, total, budget_s
        self.n, self.initial, self.interval_s, self.clock = initial, initial, interval_s, clock
        self.figures: dict[str, Any] = {}
        self.t0 = self.t_line = clock()
        self.elapsed_s = 0.0
        self.lines = 0  # progress lines written (plain, json)
        self._n_line = initial  # the position the last line showed
        self.bar = None
        if self.fmt == "bar":
            from tqdm.auto import tqdm  # imported when a bar is drawn

            if budget_s > 0:  # the budget's seconds: a total that never moves
                self.bar = tqdm(total=round(budget_s), desc=desc, unit="s", dynamic_ncols=True, file=self.stream,
                                bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} s{postfix}")
            else:
                self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True,
                                file=self.stream)

    # ------------------------------------------------------------------------------ progress

    def update(self, n: int = 1, elapsed_s: float | None = None, **figures: Any) -> None:
        """``n`` more units done; ``elapsed_s``: the time the budget has spent (default: since this
        object was made); ``figures``: the latest values to show (loss, lr, tokens_per_s, …)."""
        self.n += n
        self.figures.update(figures)
        now = self.clock()
        self.elapsed_s = elapsed_s if elapsed_s is not None else now - self.t0
        if self.bar is not None:
            if self.budget_s > 0:
                self.bar.set_postfix({self.unit: self.n, **self._shown()}, refresh=False)
                self.bar.update(min(self.elapsed_s, self.bar.total) - self.bar.n)
            else:
                self.bar.set_postfix(self._shown(), refresh=False)
                self.bar.update(n)
        elif now - self.t_line >= self.interval_s:
            self.t_line = now
            self._line()

    def set(self, **figures: Any) -> None:
        """New values of the figures, shown with the next update."""
        self.figures.update(figures)

    def eta_s(self) -> float | None:
        """Seconds left: the budget's, or the units left at the rate so far, whichever ends first."""
        etas = []
        if self.budget_s > 0:
            etas.append(max(self.budget_s - self.elapsed_s, 0.0))
        done, spent = self.n - self.initial, self.clock() - self.t0
        if self.total is not None and done > 0 and spent > 0:
            etas.append(max(self.total - self.n, 0) * spent / done)
        return min(etas) if etas else None

    def record(self) -> dict[str, Any]:
        """The progress event: position, figures, elapsed and ETA (seconds)."""
        rec: dict[str, Any] = {"event": "progress", self.unit: self.n}
        if self.total is not None:
            rec["total"] = self.total
        rec.update({k: v for k, v in self.figures.items() if v is not None})
        rec["elapsed_s"] = round(self.elapsed_s, 1)
        eta = self.eta_s()
        if eta is not None:
            rec["eta_s"] = round(eta, 1)
        return rec

    def _shown(self) -> dict[str, str]:
        out = {}
        for key, value in self.figures.items():
            if value is None:
                continue
            label, spec = _SHOWN.get(key, (key, "{}"))
            out[label] = spec.format(value) if isinstance(value, (int, float)) and math.isfinite(value) else str(value)
        return out

    def _line(self) -> None:
        rec = self.record()
        self.lines += 1
        self._n_line = self.n
        if self.fmt == "json":
            self._write(json.dumps(rec))
            return
        unit = _(_UNITS[self.unit]) if self.unit in _UNITS else self.unit
        where = f"{unit} {self.n}" + (f"/{self.total}" if self.total is not None else "")
        parts = [f"{self.desc}: {where}", *(f"{_(k) if k == 'loss' else k} {v}" for k, v in self._shown().items()),
                 _("elapsed {clock}").format(clock=clock_text(self.elapsed_s))]
        if "eta_s" in rec:
            parts.append(_("ETA {clock}").format(clock=clock_text(rec["eta_s"])))
        self._write(", ".join(parts))

    # ------------------------------------------------------------------------------ lines of their own

    def message(self, text: str) -> None:
        """A line of its own (above the bar; ``{"event": "message", "text": …}`` in JSON)."""
        self.event("message", text)

    def event(self, name: str, text: str, **data: Any) -> None:
        """An event such as a validation: ``text`` as its own line, or ``{"event": name, **data, "text": text}``."""
        if self.fmt == "json":
            self._write(json.dumps({"event": name, **data, "text": text}, default=str))
        elif self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            self._write(text)

    def _write(self, line: str) -> None:
        stream = getattr(self.stream, "raw", self.stream)  # past json_stderr's wrapping: already JSON
        stream.write(line + "\n")
        stream.flush()

    def close(self, summary: bool = False) -> None:
        """End the bar; with ``summary``, a plain or JSON report also gets a last progress line when the
        work moved since its last one (a short job otherwise ends without any)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif summary and self.fmt != "bar" and self.n != self._n_line:
            self.elapsed_s = self.clock() - self.t0
            self._line()
        self._n_line = self.n


class _JsonLines(io.TextIOBase):
    """A text stream that writes each complete line it is given to ``raw`` as a JSON ``message`` event."""

    def __init__(self, raw: TextIO) -> None:
        self.raw, self._pending = raw, ""

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, s: str) -> int:
        self._pending += s
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._emit(line)
        return len(s)

    def _emit(self, line: str) -> None:
        line = line.replace("\r", "").rstrip()
        if line:
            self.raw.write(json.dumps({"event": "message", "text": line}) + "\n")
            self.raw.flush()

    def flush(self) -> None:
        self.raw.flush()

    def finish(self) -> None:
        if self._pending:
            self._emit(self._pending)
            self._pending = ""


@contextmanager
def json_stderr(on: bool = True) -> Iterator[None]:
    """While the block runs, every line written to ``sys.stderr`` (warnings, notes) becomes a JSON
    ``message`` event, so a ``--log-format json`` log parses line by line. Does nothing when ``on`` is False."""
    if not on:
        yield
        return
    real, wrapped = sys.stderr, _JsonLines(sys.stderr)
    sys.stderr = wrapped
    try:
        yield
    finally:
        wrapped.finish()
        sys.stderr = real
