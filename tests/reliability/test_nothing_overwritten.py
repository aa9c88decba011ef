"""Nothing of the user's is overwritten: `train --out` into a folder that is not a run, and
`translate --output` onto its input or after a failure (`export --force`: tests/export/test_export.py)."""

from __future__ import annotations

import json
import os
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


# ------------------------------------------------------------------------------------- translate --output

PREVIOUS = "the previous translations\n"


@pytest.fixture
def translate_setup(tiny_runs, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("twenty-one\nthree\n")
    out = tmp_path / "out.txt"
    out.write_text(PREVIOUS)
    return str(tiny_runs("transformer")), src, out


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("how", ["same", "symlink-out", "symlink-in"])
def test_translate_output_onto_its_input_is_refused(translate_setup, tmp_path, capsys, how):
    """`translate --file X --output X` once emptied X; so did a symbolic link to X on either side."""
    run, src, _ = translate_setup
    link = tmp_path / "link.txt"
    link.symlink_to(src)
    file, output = {"same": (src, src), "symlink-out": (src, link), "symlink-in": (link, src)}[how]
    before = src.read_bytes()
    assert main(["translate", run, "--checkpoint", "last", "--file", str(file), "--output", str(output)]) == 2
    _one_error_line(capsys.readouterr().err, "--output", "input")
    assert src.read_bytes() == before and link.is_symlink() and not _leftovers(tmp_path)


def test_translate_output_onto_stdin_is_refused(translate_setup, capsys, monkeypatch):
    """`translate RUN --output X < X`: the same file reached through stdin."""
    import io

    run, src, _ = translate_setup
    before = src.read_bytes()
    with open(src, "rb") as f:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(f))
        assert main(["translate", run, "--checkpoint", "last", "--output", str(src)]) == 2
    _one_error_line(capsys.readouterr().err, "--output", "input")
    assert src.read_bytes() == before


@pytest.mark.parametrize("bad", ["missing", "folder"])
def test_a_failing_file_leaves_the_previous_output(translate_setup, tmp_path, capsys, bad):
    run, _, out = translate_setup
    file = tmp_path / "nope.txt" if bad == "missing" else tmp_path
    assert main(["translate", run, "--checkpoint", "last", "--file", str(file), "--output", str(out)]) == 2
    _one_error_line(capsys.readouterr().err, str(file))
    assert out.read_text() == PREVIOUS and not _leftovers(tmp_path)


@pytest.mark.parametrize("failure", [KeyboardInterrupt, RuntimeError])
def test_a_translation_that_stops_leaves_the_previous_output(translate_setup, tmp_path, monkeypatch, failure):
    """Ctrl-C (or a bug) half-way: the previous output is whole and no temporary file is left."""
    from attnlab.translator import Translator

    run, src, out = translate_setup

    def broken(self, *args, **kwargs):
        raise failure("stopped")

    monkeypatch.setattr(Translator, "translate_full", broken)
    if failure is KeyboardInterrupt:
        assert main(["translate", run, "--checkpoint", "last", "--file", str(src), "--output", str(out)]) == 130
    else:
        with pytest.raises(RuntimeError):
            main(["translate", run, "--checkpoint", "last", "--file", str(src), "--output", str(out)])
    assert out.read_text() == PREVIOUS and not _leftovers(tmp_path)


def test_translate_output_is_replaced_whole(translate_setup, tmp_path, capsys):
    """A good run replaces the previous output with one line per input line, in the file's usual mode,
    through a symbolic link to it too (the link stays a link); a device such as /dev/null is written to."""
    run, src, out = translate_setup
    assert main(["translate", run, "--checkpoint", "last", "--file", str(src), "--output", str(out)]) == 0
    first = out.read_text()
    assert first != PREVIOUS and len(first.splitlines()) == 2
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()
    link = tmp_path / "link-out.txt"
    link.symlink_to(out)
    out.write_text(PREVIOUS)
    assert main(["translate", run, "--checkpoint", "last", "--file", str(src), "--output", str(link)]) == 0
    assert link.is_symlink() and out.read_text() == first and not _leftovers(tmp_path)
    assert main(["translate", run, "--checkpoint", "last", "--file", str(src), "--output", "/dev/null"]) == 0
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
