"""How a command stops on a signal: Ctrl-C (SIGINT) and SIGTERM end every `attnlab` command alike.

Inside training the signal is a flag the loop reads between steps (:class:`attnlab.training.session.StopFlag`):
the step finishes, ``last`` is saved, and ``train`` returns ``stopped_by="signal"``; a command that trains
(``train``, ``demo``, ``sweep``, ``scaling``) then stops instead of going on to its next model. Anywhere
else the signal raises :class:`Interrupted` where the program is, so ``finally`` blocks and atomic writes
(``attnlab.files``) unwind as for Ctrl-C. Either way the process exits with ``128 + the signal's number``
(130 for SIGINT, 143 for SIGTERM), the status a shell gives a process a signal ended.

This module imports no torch: ``attnlab``'s ``main`` installs it before any command runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
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


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int | None = None) -> bool:
    """Have Linux SIGKILL this process when its parent ends (``prctl(PR_SET_PDEATHSIG)``), however the
    parent ends: ``kill -9`` of ``attnlab train --nproc`` then takes torchrun with it, and torchrun's end
    its workers, instead of leaving them training, orphaned, into a folder nobody holds.

    ``parent_pid``: the parent this process was started by; if it is gone already (this process was
    reparented before the call), this process ends at once, as it would have a moment later. The signal
    is tied to the thread that started this process, so call it only in a process started from its
    parent's main thread (``subprocess`` in the launcher, and in torchrun's agent). Returns False where
    there is no ``prctl`` (not Linux): nothing changes.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)
    return True
