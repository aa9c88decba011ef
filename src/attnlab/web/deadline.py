"""Work that ends with its request's deadline: a clock the model threads read as they compute.

A request's model work runs in a thread of the pool (:meth:`~attnlab.web.state.ServerState.run_admitted`),
and Python cannot stop a thread from outside; answering 504 at the deadline would leave the work
running, holding its admission slot, for as long as it takes. So the work stops itself:
``run_admitted`` runs it :func:`within` the request's deadline, and every served model reads that
clock before each of its top modules and blocks runs (:func:`watch`, a forward pre-hook). Decoding
therefore checks it between output tokens, integrated gradients between its batches of
interpolation points, a teacher-forced alignment between its batches, and the work raises
:class:`DeadlinePassed` at the first check past the deadline; the thread ends and frees its slot.
The jobs also :func:`check` between their stages (model, JSON, compression).

The deadline is per thread (``threading.local``): two requests computing on one model at once
each read their own, and a model used outside the server (no deadline set) is never stopped.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

_local = threading.local()
_watched: weakref.WeakSet[nn.Module] = weakref.WeakSet()
_watch_lock = threading.Lock()
WATCH_DEPTH = 2  # the model's modules and their blocks: checked at least once per decoding step


class DeadlinePassed(Exception):
    """The request's work reached its deadline and stopped (the route answers 504)."""


@contextmanager
def within(deadline: float) -> Iterator[None]:
    """Bound the work this thread does inside the block by ``deadline`` (a ``time.monotonic()`` value)."""
    before = getattr(_local, "deadline", None)
    _local.deadline = deadline
    try:
        yield
    finally:
        _local.deadline = before


def check() -> None:
    """Raise :class:`DeadlinePassed` when this thread's deadline has passed (never without one)."""
    deadline = getattr(_local, "deadline", None)
    if deadline is not None and time.monotonic() >= deadline:
        raise DeadlinePassed("the work passed its deadline and stopped")


def run_within(deadline: float, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` :func:`within` ``deadline``; work that starts too late stops before it begins."""
    with within(deadline):
        check()
        return fn(*args)


def _pre_hook(_module: nn.Module, _args: Any) -> None:
    check()


def watch(model: Any) -> None:
    """Make ``model`` (an ``nn.Module``; anything else is left alone) :func:`check` the deadline
    before each of its modules down to :data:`WATCH_DEPTH` runs. Done once per model, however
    many apps serve it; a thread without a deadline pays one attribute lookup per check."""
    if not isinstance(model, nn.Module):
        return
    with _watch_lock:
        if model in _watched:
            return
        for name, module in model.named_modules():
            if name.count(".") < WATCH_DEPTH:  # "" (the model), "decoder", "decoder_blocks.0"
                module.register_forward_pre_hook(_pre_hook)
        _watched.add(model)
