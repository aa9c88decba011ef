"""Atomic file writes: write to a temporary file in the same folder, fsync, then rename.

A crash (or SIGKILL) at any moment leaves either the old file or the new one, never a mix.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from attnlab.errors import AttnlabError, WriteError


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
