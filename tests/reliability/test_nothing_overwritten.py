"""Nothing of the user's is overwritten: `train --out` into a folder that is not a run, and
`translate --output` onto its input or after a failure (`export --force`: tests/export/test_export.py)."""

from __future__ import annotations

import json
import shutil

import pytest

from attnlab import config as C
from attnlab import runs
from attnlab.cli import main
from attnlab.export.folder import export_run
from tests.conftest import tiny_config


def _tree(root):
    return {p.relative_to(root).as_posix(): (None if p.is_dir() else p.read_bytes()) for p in root.rglob("*")}


def _one_error_line(err: str, *needles: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def train_args(tmp_path):
    cfg_file = tmp_path / "tiny.toml"
    cfg_file.write_text(C.dumps_toml(tiny_config("transformer", "train.max_steps=2")))
    return lambda out, *more: ["train", "--model", "transformer", "--config", str(cfg_file), "--size", "base",
                               "--out", str(out), "--quiet", *more]


def _project(path):
    path.mkdir()
    (path / "config.toml").write_text('[tool.mine]\nname = "my project"\n')
    (path / "meta.json").write_text(json.dumps({"project": "mine"}))
    (path / "notes.txt").write_text("my notes\n")
    return path


@pytest.mark.parametrize("what", ["export", "project", "notes"])
def test_train_out_refuses_a_folder_that_is_not_a_run(tiny_runs, tmp_path, train_args, capsys, what):
    """Pass: exit 2, one line saying to choose an empty or new folder (or --resume), every file as it was."""
    if what == "export":
        out = export_run(tiny_runs("transformer"), tmp_path / "exported")
    elif what == "project":
        out = _project(tmp_path / "project")
    else:
        out = tmp_path / "notes"
        out.mkdir()
        (out / "notes.txt").write_text("my notes\n")
    before = _tree(out)
    assert main(train_args(out)) == 2
    _one_error_line(capsys.readouterr().err, str(out), "not a run", "empty or new folder", "--resume")
    assert _tree(out) == before


def test_train_out_into_a_run_keeps_its_rules(tiny_runs, tmp_path, train_args, capsys):
    """A run with checkpoints is refused as before; a run that died before its first checkpoint (its
    meta.json is attnlab's) is started afresh, its records set aside and a file of the user's kept."""
    run = shutil.copytree(tiny_runs("transformer"), tmp_path / "run")
    assert main(train_args(run)) == 2
    _one_error_line(capsys.readouterr().err, "already holds a run", "--resume")
    shutil.rmtree(run / "checkpoints")
    (run / "notes.txt").write_text("my notes\n")
    assert main(train_args(run)) == 0
    assert (run / "notes.txt").read_text() == "my notes\n" and (run / "metrics.jsonl.old").is_file()
    assert runs.resolve_checkpoint(run, "last").name == "step-0000002"
