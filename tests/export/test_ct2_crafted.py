"""A crafted CTranslate2 export (a file edited, the manifest hashed again so the checksums pass) is refused in
one line naming the file and the fix (export again), through the library and `attnlab translate --engine`."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.errors import CheckpointError
from attnlab.export.engine import CT2Translator
from attnlab.export.folder import export_run

pytest.importorskip("ctranslate2")


@pytest.fixture(scope="module")
def exports(export_runs, tmp_path_factory):
    """``exports(kind) -> Path``: a pristine CTranslate2 export of a tiny run of ``kind`` (copy it to change it)."""
    root, done = tmp_path_factory.mktemp("ct2-crafted"), {}

    def get(kind: str) -> Path:
        if kind not in done:
            done[kind] = export_run(export_runs(kind, 1), root / kind, fmt="ctranslate2")
        return done[kind]

    return get


def _rehash(folder: Path) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"] = {f: hashlib.sha256((folder / f).read_bytes()).hexdigest() for f in manifest["files"]}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _edit_json(path: Path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def _flip(spec):
    spec["engines"]["ctranslate2"]["one_sequence"] = not spec["engines"]["ctranslate2"]["one_sequence"]
    return spec


def _damage_bin(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncate":
        data = data[:1000]
    else:
        data[10:30] = b"\xff" * 20  # inside the first variable's name
    path.write_bytes(bytes(data))


CASES = {  # name -> (kind, what to change, the file the error names)
    "one_sequence-flipped": ("transformer", lambda f: _edit_json(f / "config.json", _flip), "config.json"),
    "one_sequence-flipped-decoder-only": ("decoder-only", lambda f: _edit_json(f / "config.json", _flip),
                                          "config.json"),
    "one_sequence-not-a-bool": ("transformer", lambda f: _edit_json(
        f / "config.json", lambda s: {**s, "engines": {"ctranslate2": {**s["engines"]["ctranslate2"],
                                                                        "one_sequence": "no"}}}), "config.json"),
    "model.bin-truncated": ("transformer", lambda f: _damage_bin(f / "ctranslate2" / "model.bin", "truncate"),
                            "ctranslate2/model.bin"),
    "model.bin-bytes": ("decoder-only", lambda f: _damage_bin(f / "ctranslate2" / "model.bin", "bytes"),
                        "ctranslate2/model.bin"),
    "ct2-config-not-json": ("transformer", lambda f: (f / "ctranslate2" / "config.json").write_text("{not json"),
                            "ctranslate2/config.json"),
    "ct2-config-a-list": ("transformer", lambda f: (f / "ctranslate2" / "config.json").write_text("[1]"),
                          "ctranslate2/config.json"),
    "target-vocabulary-renamed": ("transformer", lambda f: _edit_json(
        f / "ctranslate2" / "target_vocabulary.json", lambda v: [*v[:4], "zzz", *v[5:]]),
        "ctranslate2/target_vocabulary.json"),
    "vocabulary-not-json": ("decoder-only", lambda f: (f / "ctranslate2" / "vocabulary.json").write_text("{]"),
                            "ctranslate2/vocabulary.json"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_crafted_ct2_export_is_one_line(case, exports, tmp_path, capsys):
    """Pass: CT2Translator.from_export raises CheckpointError naming the edited file and `attnlab export … --force`;
    `attnlab translate OUT --engine ctranslate2` exits 2 with that one line, no traceback."""
    kind, change, named = CASES[case]
    folder = tmp_path / "out"
    shutil.copytree(exports(kind), folder)
    change(folder)
    _rehash(folder)
    with pytest.raises(CheckpointError) as caught:
        CT2Translator.from_export(folder, device="cpu")
    message = str(caught.value)
    assert str(folder / named) in message and "attnlab export RUN" in message and "--force" in message, message
    assert "\n" not in message
    assert main(["translate", str(folder), "--engine", "ctranslate2", "--device", "cpu", "seven"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == f"error: {message}", err


def test_the_pristine_exports_still_load(exports):
    """Pass: the checks refuse nothing an export wrote (both kinds translate)."""
    for kind in ("transformer", "decoder-only"):
        assert isinstance(CT2Translator.from_export(exports(kind), device="cpu").translate("seven"), str)
