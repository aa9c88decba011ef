"""A disk that fills up at the end of a run or before a resume: one `error:` line, the checkpoints kept.

Each case runs twice: on a real small tmpfs filled with zeros (where one can be mounted: root on
Linux) and on an in-process fake whose every write under the folder raises ENOSPC (everywhere).
The disk fills at a chosen moment, so the tests say exactly which write meets it.
"""

from __future__ import annotations

import builtins
import errno
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from attnlab import config as C
from attnlab import runs
from attnlab.cli import main
from tests.conftest import tiny_config
from tests.reliability._helpers import plan_note

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class Disk:
    """A folder that :meth:`fill` makes full: a real tmpfs, or the ENOSPC fake."""

    def __init__(self, root: Path, kind: str, monkeypatch) -> None:
        self.root, self.kind, self.monkeypatch = root, kind, monkeypatch

    def _under(self, file) -> bool:
        if isinstance(file, int):
            return False
        return Path(os.path.abspath(os.fsdecode(file))).is_relative_to(self.root)

    def fill(self) -> None:
        if self.kind == "tmpfs":
            with open(self.root / "filler", "wb") as f:  # zeros until the tmpfs refuses
                try:
                    while True:
                        f.write(bytes(1 << 16))
                        f.flush()
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
            return
        real_open, real_os_open = builtins.open, os.open

        def full(file):
            return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fsdecode(file))

        def fake_open(file, mode="r", *args, **kwargs):
            if any(c in mode for c in "wax+") and self._under(file):
                raise full(file)
            return real_open(file, mode, *args, **kwargs)

        def fake_os_open(path, flags, *args, **kwargs):
            if flags & _WRITE_FLAGS and self._under(path):
                raise full(path)
            return real_os_open(path, flags, *args, **kwargs)

        self.monkeypatch.setattr(builtins, "open", fake_open)
        self.monkeypatch.setattr(os, "open", fake_os_open)


@pytest.fixture(params=["tmpfs", "fake"])
def disk(request, tmp_path, monkeypatch):
    root = tmp_path / "disk"
    root.mkdir()
    if request.param == "tmpfs":
        if not sys.platform.startswith("linux") or os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a tmpfs needs root on Linux; the fake case covers this machine")
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", f"attnlab-test-{uuid.uuid4().hex[:8]}",
                                  str(root)], capture_output=True, text=True)
        if mounted.returncode != 0:
            pytest.skip(f"could not mount a tmpfs ({mounted.stderr.strip()}); the fake case covers this machine")
    try:
        yield Disk(root, request.param, monkeypatch)
    finally:
        monkeypatch.undo()  # the fake's open() must not outlive the test
        if request.param == "tmpfs":
            subprocess.run(["umount", "-l", str(root)], capture_output=True)


def _one_error_line(err: str, *needles: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_full_disk_at_the_end_of_a_run_is_one_line(disk, tmp_path, monkeypatch, capsys):
    """Pass: the disk fills right after the final checkpoint is saved; `attnlab train` exits 2 with one
    line naming the file it could not write and saying the checkpoints are saved; LAST verifies."""
    cfg_file = tmp_path / "tiny.toml"
    cfg_file.write_text(C.dumps_toml(tiny_config("transformer", "train.max_steps=3")))
    real_save = runs.save_checkpoint

    def save_then_fill(run_dir, step, *args, **kwargs):
        path = real_save(run_dir, step, *args, **kwargs)
        if step == 3:
            disk.fill()
        return path

    monkeypatch.setattr(runs, "save_checkpoint", save_then_fill)
    run = disk.root / "run"
    rc = main(["train", "--model", "transformer", "--config", str(cfg_file), "--size", "base", "--out", str(run),
               "--quiet"])
    assert rc == 2
    _one_error_line(capsys.readouterr().err, "No space left on device", "meta.json", "checkpoint")
    last = runs.resolve_checkpoint(run, "last")
    assert last.name == "step-0000003"
    runs.verify_checkpoint(last)


def test_full_disk_on_resume_is_one_line(disk, tiny_runs, capsys):
    """Pass: `attnlab train --resume` on a full disk exits 2 with one line naming the file it could not
    write; the checkpoint it would resume from is byte-for-byte untouched and still LAST."""
    run = disk.root / "run"
    shutil.copytree(tiny_runs("transformer"), run)
    last = runs.resolve_checkpoint(run, "last")
    before = {p.name: p.read_bytes() for p in last.iterdir()}
    disk.fill()
    rc = main(["train", "--resume", "--out", str(run), "--quiet", "--max-steps", "44"])
    assert rc == 2
    plan, err = plan_note(capsys.readouterr().err)  # 40 -> 44 updates: the resume says how its plan moves
    assert "40 updates -> 44 updates" in plan
    _one_error_line(err, "No space left on device", str(run))
    assert runs.resolve_checkpoint(run, "last") == last
    assert {p.name: p.read_bytes() for p in last.iterdir()} == before
