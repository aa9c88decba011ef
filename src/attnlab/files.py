"""Files in and out: atomic writes, and reads with one size cap.

Writes go to a temporary file in the same folder, fsync, then rename: a crash (or SIGKILL) at any moment
leaves either the old file or the new one, never a mix.

Every file or stream a user points attnlab at (a corpus, ``evaluate --src/--ref``, ``translate --file`` or
stdin, a ``--config``) is read through :class:`InputBudget`: at most :data:`MAX_INPUT_BYTES`, counted as the
bytes arrive (a pipe, ``/dev/zero`` or a growing file has no size to trust), in chunks, so Ctrl-C and SIGTERM
still stop the command between two reads (:mod:`attnlab.interrupts`); a regular file larger than the cap is
refused by its size before anything is read. One refusal for all of them, naming the input, the cap and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from attnlab.errors import AttnlabError, WriteError

#: The most bytes read from one file or stream a user names; D2L's fra.txt, the largest input attnlab is
#: built for, is 11.7 MB. Whatever is read is held and decoded whole, so the cap bounds memory.
MAX_INPUT_BYTES = 128 * 2**20
#: The most bytes of one line a line-by-line reader keeps (``translate`` reading a stream): a model reads a
#: few hundred tokens of a line (``Translator.max_src_tokens``), and a line that never ends must not be held.
MAX_LINE_BYTES = 64 * 2**10
#: Bytes asked for in one read: large enough to be fast, small enough that a signal is seen between reads.
READ_CHUNK = 2**20


def mib(n: int) -> str:
    return f"{n / 2**20:g} MiB"


def file_kind(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it is neither a regular file nor a folder (``"a named pipe (FIFO)"``, ``"a character
    device"``, ...), for errors that must not call it missing; None for a file, a folder or nothing."""
    from attnlab.i18n import _

    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    kinds = ((stat.S_ISFIFO, _("a named pipe (FIFO)")), (stat.S_ISCHR, _("a character device")),
             (stat.S_ISBLK, _("a block device")), (stat.S_ISSOCK, _("a socket")))
    return next((kind for test, kind in kinds if test(mode)), None)


def wait_readable(fd: int, poll_s: float = 0.25) -> None:
    """Return once ``fd`` has bytes (or its end) to read, waking every ``poll_s`` seconds meanwhile. A signal the
    kernel hands to another thread of the process (a native library's) does not interrupt the main thread's
    blocking ``read``; between two waits the main thread runs the pending handler, so Ctrl-C and SIGTERM stop
    a read from a silent pipe or terminal too (:mod:`attnlab.interrupts`). A regular file is always ready."""
    import select

    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
    except (AttributeError, OSError, ValueError):
        return  # no poll here: read as it is
    while not poller.poll(int(poll_s * 1000)):
        pass


class InputBudget:
    """The bytes one input (``name``: how errors call it) may still give: :meth:`count` raises ``error`` once more
    than ``cap`` (default :data:`MAX_INPUT_BYTES`) were read; ``fix``: what the refusal tells the user to do."""

    def __init__(self, name: str, cap: int | None = None, fix: str = "", error: type[Exception] | None = None) -> None:
        from attnlab.i18n import _

        self.name, self.cap, self.read = name, MAX_INPUT_BYTES if cap is None else cap, 0
        self.fix = fix or _("split it into smaller files")
        self.error = error or AttnlabError
        self._ = _

    def _limit(self) -> str:
        return self._("more than the {cap} attnlab reads from one file or stream").format(cap=mib(self.cap))

    def check_size(self, fd: int) -> None:
        """Refuse a regular file already larger than the cap, before reading it (other kinds have no size)."""
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size > self.cap:
            raise self.error(self._("{name} holds {size} bytes, {limit}; {fix}").format(
                name=self.name, size=st.st_size, limit=self._limit(), fix=self.fix))

    def count(self, n: int) -> None:
        self.read += n
        if self.read > self.cap:
            raise self.error(self._("{name} holds {limit} (stopped reading); {fix}").format(
                name=self.name, limit=self._limit(), fix=self.fix))

    def read_all(self, f, head: bytes = b"") -> bytes:
        """The rest of the open binary file ``f`` after its first bytes ``head`` (already read from it). ``f`` is
        unbuffered (``open(path, "rb", buffering=0)``), so each read is one system call that returns what has
        arrived, and the wait for more is :func:`wait_readable`'s."""
        try:
            fd = f.fileno()
        except (AttributeError, OSError, ValueError):
            fd = None  # an in-memory stream: counted as it is read
        if fd is not None:
            self.check_size(fd)
        self.count(len(head))
        out = bytearray(head)
        while True:
            if fd is not None:
                wait_readable(fd)
            chunk = f.read(min(READ_CHUNK, self.cap + 1 - self.read))
            if not chunk:
                return bytes(out)
            out += chunk
            self.count(len(chunk))


def read_input(path: str | os.PathLike[str], name: str | None = None, cap: int | None = None, fix: str = "",
               error: type[Exception] | None = None) -> bytes:
    """The bytes of the file, device or pipe ``path``, under the cap (:class:`InputBudget`). ``OSError`` from
    opening or reading is the caller's to word."""
    with open(path, "rb", buffering=0) as f:
        return InputBudget(str(path) if name is None else name, cap, fix, error).read_all(f)


def fsync_dir(path: str | Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once at import: os.umask is process-wide and not thread-safe to probe


def usual_mode(is_dir: bool = False) -> int:
    """The mode ``open()``/``mkdir()`` would give under the current umask (mkstemp/mkdtemp give 0600/0700)."""
    return (0o777 if is_dir else 0o666) & ~_UMASK


def writable_folder(path: str | Path, option: str, keep: bool = False) -> Path:
    """Create the folder ``path`` (and its parents) and check that a file can be written in it, so an
    output folder that cannot be used (a file, under one, read-only, full, ``/proc``) fails in one
    line before any work. The folders it had to create are removed again after the check unless ``keep``
    (a command that may still refuse its input leaves nothing behind; its writers create them).
    Raises :class:`~attnlab.errors.AttnlabError` naming ``option``."""
    from attnlab.errors import AttnlabError
    from attnlab.i18n import _

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise AttnlabError(_("{option} {path} is a file, not a folder; give a folder (it is created if needed)").format(
            option=option, path=path))
    created = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise AttnlabError(_("cannot write in {option} {path}: {error}; choose a folder you can write to").format(
            option=option, path=path, error=e.strerror or e)) from None
    if not keep:
        for p in created:  # deepest first
            with contextlib.suppress(OSError):
                p.rmdir()
    return path


#: what a full disk, a quota or a file size limit raises; and a folder this user may not write in
_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


def write_error(path: str | Path, err: OSError) -> WriteError:
    """The :class:`~attnlab.errors.WriteError` for a write to ``path`` that failed with ``err``: one line
    naming the file, why, that an earlier file of that name is kept (the write is atomic), and the fix."""
    from attnlab.i18n import _

    if err.errno in _FULL:
        fix = _("free some space or write elsewhere, and run it again")
    elif err.errno in _READ_ONLY:
        fix = _("make its folder writable or write elsewhere, and run it again")
    else:
        fix = _("check its folder and run it again")
    why = err.strerror or str(err) or type(err).__name__
    return WriteError(_("could not write {path}: {why} (an earlier file of that name is kept); {fix}").format(
        path=path, why=why, fix=fix), err.errno, err.strerror, str(path))


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (module docstring). Raises :class:`~attnlab.errors.WriteError`
    (an ``AttnlabError`` and an ``OSError``) when it cannot: a full disk or a read-only folder is one line."""
    path = Path(path)
    try:
        _atomic_write_bytes(path, data)
    except OSError as e:
        if isinstance(e, AttnlabError):
            raise
        raise write_error(path, e) from None


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, usual_mode())  # mkstemp makes 0600; give the file the mode open() would
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON data: tensors and numpy arrays become (nested) lists, tuples lists, paths strings,
    non-finite floats None, dataclasses dicts; anything else that JSON cannot hold its ``str``."""
    import dataclasses
    import math

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):  # torch.Tensor, numpy arrays and scalars
        return jsonable(obj.tolist())
    return str(obj)
