"""One writer per run folder: an OS lock (``flock``) on ``RUN/train.lock`` while a process trains into it.

Two processes training into one folder interleave checkpoints, rotate each other's step folders away and
leave ``metrics.jsonl`` with two histories. So ``train`` holds an exclusive, non-blocking ``flock`` on
``RUN/train.lock`` from before it reads the folder until it returns; the kernel drops the lock when the
process ends, however it ends (``kill -9`` included), so a lock is never stale and never needs removing.
The file itself stays (deleting it would let a third process lock a new file while a second still holds
the old one); it holds the holder's pid and command line, for the error the next writer gets.

With ``--nproc`` the ``attnlab`` launcher takes the lock before torchrun starts and hands the same open
file to torchrun, so it is held from the first worker's start to the last one's end, across elastic
restarts; rank 0 recognises its launcher's lock by :data:`LAUNCHER_ENV`. Under a torchrun started by hand,
rank 0 takes it. Where ``flock`` is not supported (some network file systems) training goes on unlocked,
with one warning.
"""

from __future__ import annotations

import errno
import os
import shlex
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from attnlab.errors import AttnlabError
from attnlab.i18n import _

try:
    import fcntl
except ImportError:  # Windows: no flock; runs are not locked there
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = "train.lock"
LAUNCHER_ENV = "ATTNLAB_LAUNCHER_PID"  # set by `attnlab train --nproc` for torchrun and its workers
_MAX_HOLDER_BYTES = 4096
_GONE_GRACE_S = 10.0  # how long a lock whose recorded holder has ended may take to be let go


class RunLockedError(AttnlabError):
    """Another process is training into the run folder."""


@dataclass
class RunLock:
    """A held lock (``fd`` open and locked), or none (``fd`` None: the launcher holds it, or the
    folder cannot be locked). :meth:`release` is safe to call more than once."""

    path: Path
    fd: int | None = None

    def release(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)  # closing the last descriptor of the open file drops the flock


def _command() -> str:
    argv = list(sys.argv) or ["?"]
    if Path(argv[0]).name in ("__main__.py", "attnlab"):  # `python -m attnlab …` or the console script
        argv[0] = "attnlab"
    return shlex.join(argv)[:300]


def _holder(path: Path) -> tuple[int | None, str]:
    """``(pid, command)`` recorded by the holder of ``path`` (None, "" when unreadable)."""
    try:
        with open(path, "rb") as f:
            lines = f.read(_MAX_HOLDER_BYTES).decode("utf-8", "replace").splitlines()
        return int(lines[0]), (lines[1] if len(lines) > 1 else "")
    except (OSError, ValueError, IndexError):
        return None, ""


def _not_a_lock(path: Path) -> RunLockedError:
    return RunLockedError(_("{path} is not a regular file (a link, a folder or a device), so the run folder cannot "
                            "be locked; remove it (training keeps its lock there) and run again").format(path=path))


def _gone(pid: int | None) -> bool:
    """Whether the process ``pid`` has ended (False when unknown, or alive under another user)."""
    if pid is None or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _flock_or_wait_for_the_gone(fd: int, path: Path) -> None:
    """``flock`` ``fd`` now, or within :data:`_GONE_GRACE_S` when the recorded holder has already ended:
    after ``kill -9`` of a launcher its torchrun and workers, which share the lock, end just after it
    (``PR_SET_PDEATHSIG``), and a restart at once must not be refused in the name of a dead process."""
    deadline = None
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES) or not _gone(_holder(path)[0]):
                raise
            deadline = deadline or time.monotonic() + _GONE_GRACE_S
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def lock_run_folder(out_dir: str | Path) -> RunLock:
    """Lock ``out_dir`` (created if new) for this process's training; release with :meth:`RunLock.release`.

    Raises :class:`RunLockedError` with one line naming the holding process when another holds it, unless
    that process is this job's ``attnlab --nproc`` launcher (:data:`LAUNCHER_ENV`). A folder that cannot
    be made or written gives an unheld lock: the checks that follow report it in their own words.
    """
    out_dir = Path(out_dir)
    path = out_dir / LOCK_FILE
    if fcntl is None or (out_dir.exists() and not out_dir.is_dir()):
        return RunLock(path)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: a run folder from elsewhere (a tarball) whose train.lock is a symlink must not make
        # training truncate the file it points at; O_NONBLOCK: a FIFO in its place must not hang the open.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):  # a symlink, a folder, a socket or device
            raise _not_a_lock(path) from None
        return RunLock(path)  # a folder that cannot be written: the checks that follow say so
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device: flock on it would lock nothing shared
        os.close(fd)
        raise _not_a_lock(path)
    try:
        _flock_or_wait_for_the_gone(fd, path)
    except OSError as e:
        os.close(fd)
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            print(f"warning: could not lock {path} ({e.strerror or e}); make sure no other process trains "
                  f"into {out_dir}", file=sys.stderr)
            return RunLock(path)
        pid, command = _holder(path)
        if pid is not None and str(pid) == os.environ.get(LAUNCHER_ENV):
            return RunLock(path)  # this job's launcher holds it for every worker
        who = (_("process {pid} ({command})").format(pid=pid, command=command) if pid is not None
               else _("another process"))
        raise RunLockedError(_("{out_dir} is in use: {who} is training into it (it holds {path}); wait for it to "
                               "end or stop it, or choose another --out").format(out_dir=out_dir, who=who, path=path)
                             ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{_command()}\n".encode(), 0)
    except OSError:
        pass  # the lock holds without its note; a second writer is still refused
    return RunLock(path, fd)
