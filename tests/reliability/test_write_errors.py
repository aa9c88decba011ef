"""A full disk or a read-only run folder under the commands that write reports and figures: one `error:` line.

`evaluate` (a split and `--src`) checks its run folder before it decodes anything; `attention`, `positional`
and `params` name the figure they could not write. Each case runs on a real tmpfs (filled with zeros, or
remounted read-only: root on Linux) and on an in-process fake whose writes under the folder raise the
same errno (everywhere).
"""

from __future__ import annotations

import builtins
import errno
import os
import pickle
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.errors import AttnlabError, WriteError
from attnlab.evaluation import evaluate as E
from attnlab.files import atomic_write_bytes, atomic_write_text

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class Folder:
    """``root``: a folder that :meth:`break_` makes full (ENOSPC) or read-only (EROFS), really or faked."""

    def __init__(self, root: Path, how: str, kind: str, monkeypatch) -> None:
        self.root, self.how, self.kind, self.monkeypatch = root, how, kind, monkeypatch
        self.errno = errno.ENOSPC if how == "full" else errno.EROFS

    def _under(self, file) -> bool:
        return not isinstance(file, int) and Path(os.path.abspath(os.fsdecode(file))).is_relative_to(self.root)

    def break_(self) -> None:
        if self.kind == "tmpfs" and self.how == "read-only":
            done = subprocess.run(["mount", "-o", "remount,ro", str(self.root)], capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            return
        if self.kind == "tmpfs":
            with open(self.root / "filler", "wb") as f:  # zeros until the tmpfs refuses
                try:
                    while True:
                        f.write(bytes(1 << 16))
                        f.flush()
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
            return
        real_open, real_os_open, code = builtins.open, os.open, self.errno
        # A full disk still gives a new (empty) file and refuses its bytes: the fake opens /dev/full instead,
        # where every write is ENOSPC. A read-only folder refuses the open itself.

        def refuse(file):
            return OSError(code, os.strerror(code), os.fsdecode(file))

        def fake_open(file, mode="r", *args, **kwargs):
            if any(c in mode for c in "wax+") and self._under(file):
                if self.how == "full":
                    return real_open("/dev/full", mode.replace("x", "w"), *args, **kwargs)
                raise refuse(file)
            return real_open(file, mode, *args, **kwargs)

        def fake_os_open(path, flags, *args, **kwargs):
            if flags & _WRITE_FLAGS and self._under(path):
                if self.how == "full":
                    return real_os_open("/dev/full", os.O_RDWR)
                raise refuse(path)
            return real_os_open(path, flags, *args, **kwargs)

        self.monkeypatch.setattr(builtins, "open", fake_open)
        self.monkeypatch.setattr(os, "open", fake_os_open)

    @property
    def why(self) -> str:
        return os.strerror(self.errno)


def _folder(kind: str, how: str, tmp_path: Path, monkeypatch):
    root = tmp_path / "disk"
    root.mkdir()
    if kind == "fake" and how == "full" and not os.path.exists("/dev/full"):
        pytest.skip("the fake full disk writes to /dev/full, which this system lacks")
    if kind == "tmpfs":
        if not sys.platform.startswith("linux") or os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a tmpfs needs root on Linux; the fake case covers this machine")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", f"attnlab-test-{uuid.uuid4().hex[:8]}",
                               str(root)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"could not mount a tmpfs ({done.stderr.strip()}); the fake case covers this machine")
    try:
        yield Folder(root, how, kind, monkeypatch)
    finally:
        monkeypatch.undo()  # the fake's open() must not outlive the test
        if kind == "tmpfs":
            subprocess.run(["umount", "-l", str(root)], capture_output=True)


@pytest.fixture(params=["tmpfs", "fake"])
def full(request, tmp_path, monkeypatch):
    yield from _folder(request.param, "full", tmp_path, monkeypatch)


@pytest.fixture(params=[("full", "tmpfs"), ("full", "fake"), ("read-only", "tmpfs"), ("read-only", "fake")],
                ids=["full-tmpfs", "full-fake", "read-only-tmpfs", "read-only-fake"])
def broken(request, tmp_path, monkeypatch):
    how, kind = request.param
    yield from _folder(kind, how, tmp_path, monkeypatch)


def _one_error_line(err: str, *needles: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("mode", ["split", "src"])
def test_evaluate_refuses_a_broken_run_folder_before_decoding(broken, mode, tiny_runs, tmp_path, monkeypatch, capsys):
    """Pass: on a full or read-only run folder, `evaluate` (a split or --src) exits 2 with one line naming the
    run folder and the reason, without decoding a sentence; nothing in the run changes."""
    run = broken.root / "run"
    shutil.copytree(tiny_runs("transformer"), run)
    src = tmp_path / "src.txt"
    src.write_text("twenty one\nthree\n", encoding="utf-8")
    before = _snapshot(run)
    broken.break_()
    decoded = []
    monkeypatch.setattr(E, "_decode", lambda *a, **k: decoded.append(1) or pytest.fail("decoded before the check"))
    args = ["evaluate", str(run), "--quiet"] + (["--src", str(src), "--ref", str(src)] if mode == "src" else [])
    assert main(args) == 2
    _one_error_line(capsys.readouterr().err, str(run), broken.why)
    assert not decoded
    monkeypatch.undo()
    assert _snapshot(run) == before


def test_evaluate_on_a_disk_that_fills_while_it_decodes(full, tiny_runs, monkeypatch, capsys):
    """Pass: the disk fills after the decoding; `evaluate` prints its scores, then one line naming the file it
    could not write and "No space left on device"; the run's files are as they were."""
    run = full.root / "run"
    shutil.copytree(tiny_runs("transformer"), run)
    before = _snapshot(run)
    real = E._decode

    def decode_then_fill(*args, **kwargs):
        out = real(*args, **kwargs)
        full.break_()
        return out

    monkeypatch.setattr(E, "_decode", decode_then_fill)
    assert main(["evaluate", str(run), "--quiet", "--max-sentences", "4"]) == 2
    out, err = capsys.readouterr()
    assert "BLEU" in out  # the scores are seen before the write fails
    _one_error_line(err, str(run / "hyps-test-first4.txt"), "No space left on device", "free some space")
    monkeypatch.undo()
    assert {k: v for k, v in _snapshot(run).items() if k != "filler"} == before


@pytest.mark.parametrize("command", [
    ["attention", "{run}", "twenty one", "--json"],
    ["positional", "{run}"],
    ["params", "{run}"],
    ["positional", "--save-dir", "{root}/figures"],
])
def test_figures_on_a_full_disk_are_one_line(full, command, tiny_runs, capsys):
    """Pass: `attention`, `positional` and `params` on a full disk exit 2 with one line naming the figure they
    could not write, "No space left on device" and the fix; no temporary file is left in the folder."""
    run = full.root / "run"
    shutil.copytree(tiny_runs("transformer"), run)
    (run / "figures").mkdir()
    full.break_()
    argv = [a.format(run=run, root=full.root) for a in command]
    assert main(argv) == 2
    _one_error_line(capsys.readouterr().err, "could not write", str(full.root), ".png", "No space left on device",
                    "free some space")
    assert not [p for p in full.root.rglob(".*.tmp")]


def test_write_error_is_an_attnlab_error_and_the_os_error(tmp_path, monkeypatch):
    """Pass: a failed atomic write raises WriteError: one line for the CLI (AttnlabError), and the OSError it was
    (errno, strerror, the file), so code that catches OSError to go on without the file still does; it pickles."""
    import attnlab.files as io

    def refuse(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(io, "_atomic_write_bytes", refuse)
    target = tmp_path / "report.json"
    with pytest.raises(WriteError) as caught:
        atomic_write_text(target, "{}")
    e = caught.value
    assert isinstance(e, AttnlabError) and isinstance(e, OSError)
    assert (e.errno, e.strerror, e.filename) == (errno.ENOSPC, "No space left on device", str(target))
    assert str(e).startswith(f"could not write {target}: No space left on device") and "\n" not in str(e)
    again = pickle.loads(pickle.dumps(e))
    assert (str(again), again.errno, again.filename) == (str(e), e.errno, e.filename)
    monkeypatch.undo()
    (tmp_path / "file").write_text("x")
    with pytest.raises(WriteError, match="could not write .*file/x"):
        atomic_write_bytes(tmp_path / "file" / "x", b"")  # under a file: ENOTDIR / EEXIST, still one line
