"""Helpers for the reliability suite: a private copy of a tiny run to tamper with, and manifest fixes.

Tampering tests recompute the manifest's sha256 after changing a file, so that it is the *content*
check (pickle refusal, header check, vocabulary fingerprint) that must stop the file, not the checksum.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from attnlab import runs

SPECIAL_SPELLINGS = ("<unk>", "<pad>", "<bos>", "<eos>")


def copy_run(src: Path, dst: Path) -> Path:
    """A private copy of a run folder (the session's tiny runs are shared by every test)."""
    shutil.copytree(src, dst)
    return dst


def last_checkpoint(run: Path) -> Path:
    return runs.resolve_checkpoint(run, "last")


def rehash(path: Path) -> None:
    """Rewrite ``manifest.json`` of checkpoint folder ``path`` so that its sha256 match the files again."""
    mpath = path / runs.MANIFEST
    manifest = json.loads(mpath.read_text())
    manifest["files"] = {f: hashlib.sha256((path / f).read_bytes()).hexdigest() for f in manifest["files"]}
    mpath.write_text(json.dumps(manifest))


def assert_no_specials(text: str) -> None:
    for s in SPECIAL_SPELLINGS:
        assert s not in text, (s, text)


def plan_note(err: str) -> tuple[str, str]:
    """``err`` split into the resume's one note on its new plan and the rest."""
    lines = err.strip().splitlines()
    note = [line for line in lines if line.startswith("--resume changes the plan")]
    assert len(note) == 1, err
    return note[0], "\n".join(line for line in lines if line not in note)
