"""Atomic file writes: write to a temporary file in the same folder, fsync, then rename.

A crash (or SIGKILL) at any moment leaves either the old file or the new one, never a mix.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


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


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
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
