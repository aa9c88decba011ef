"""How a command stops on a signal: Ctrl-C (SIGINT) and SIGTERM end every `attnlab` command alike.

Inside training the signal is a flag the loop reads between steps (:class:`attnlab.training.session.StopFlag`):
the step finishes, ``last`` is saved, and ``train`` returns ``stopped_by="signal"``; a command that trains
(``train``, ``demo``, ``sweep``, ``scaling``) then stops instead of going on to its next model. Anywhere
else the signal raises :class:`Interrupted` where the program is, so ``finally`` blocks and atomic writes
(``attnlab.io``) unwind as for Ctrl-C. Either way the process exits with ``128 + the signal's number``
(130 for SIGINT, 143 for SIGTERM), the status a shell gives a process a signal ended.

This module imports no torch: ``attnlab``'s ``main`` installs it before any command runs.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


class Interrupted(KeyboardInterrupt):
    """A command stopped by ``signum`` (a :class:`KeyboardInterrupt`, so code that already handles
    Ctrl-C handles SIGTERM the same way)."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


def exit_code(exc: BaseException | int | None) -> int:
    """``128 + signum`` for an :class:`Interrupted` (or a signal number), 130 for a plain Ctrl-C."""
    signum = exc if isinstance(exc, int) else getattr(exc, "signum", signal.SIGINT)
    return 128 + int(signum)


def _raise_interrupted(signum: int, frame: Any) -> None:  # noqa: ARG001
    raise Interrupted(signum)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While inside, SIGTERM raises :class:`Interrupted` in the main thread, as SIGINT raises
    ``KeyboardInterrupt``. A SIGTERM the process was started ignoring (``SIG_IGN``) stays ignored;
    outside the main thread (where Python cannot set handlers) nothing changes."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
