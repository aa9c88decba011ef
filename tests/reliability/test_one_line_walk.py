"""Every `attnlab` command walked through a careless user's mistakes: exit 2, one `error:` line, no traceback.

The commands come from the parser (`attnlab.cli.make_parser`), so a new command fails
:func:`test_every_command_is_walked` until it has cases here. Each command gets the mistakes that
fit its options: a RUN or file that does not exist, a folder where a file is expected, a file where
a folder is expected, an output folder that cannot be written (under a file, under ``/proc``: root
can write anywhere else), and out-of-range counts (``--beam 0``, ``--nbest 0``, ``--widths 100000``).
``serve``'s port is walked with the web server's own tests. The commands run in this process
(``attnlab.cli.main``), in a fresh current folder, and training is forbidden: a mistake must stop a
command before it trains. A full disk: test_full_disk.py; files of the user's: test_nothing_overwritten.py.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from attnlab.cli import main, make_parser

# {run}: a tiny trained Transformer run; {missing}: a path that does not exist; {file}: a text file;
# {dir}: an empty folder; {proc}: a path under /proc (nothing can be created there, not even by root)
CASES: dict[str, list[tuple[str, list[str]]]] = {
    "data": [("missing run", ["--run", "{missing}"]), ("file as run", ["--run", "{file}"]),
             ("missing config", ["--config", "{missing}"]), ("folder as config", ["--config", "{dir}"]),
             ("missing data", ["--dataset", "fra-eng", "--data", "{missing}"])],
    "train": [("file as out", ["--model", "transformer", "--out", "{file}"]),
              ("out under a file", ["--model", "transformer", "--out", "{file}/run"]),
              ("out under /proc", ["--model", "transformer", "--out", "{proc}"]),
              ("resume a missing run", ["--resume", "--out", "{missing}"]),
              ("missing config", ["--model", "transformer", "--out", "{dir}/r", "--config", "{missing}"]),
              ("folder as config", ["--model", "transformer", "--out", "{dir}/r", "--config", "{dir}"])],
    "config": [("missing config", ["--model", "transformer", "--config", "{missing}"]),
               ("folder as config", ["--model", "transformer", "--config", "{dir}"])],
    "translate": [("missing run", ["{missing}", "x"]), ("file as run", ["{file}", "x"]),
                  ("missing file", ["{run}", "--file", "{missing}"]), ("folder as file", ["{run}", "--file", "{dir}"]),
                  ("folder as output", ["{run}", "x", "--output", "{dir}"]),
                  ("output under /proc", ["{run}", "x", "--output", "{proc}"]),
                  ("output under a file", ["{run}", "x", "--output", "{file}/out.txt"]),
                  ("beam 0", ["{run}", "x", "--beam", "0"]), ("beam -1", ["{run}", "x", "--beam", "-1"]),
                  ("nbest 0", ["{run}", "x", "--nbest", "0"]),
                  ("nbest over beam", ["{run}", "x", "--beam", "2", "--nbest", "3"])],
    "evaluate": [("missing run", ["{missing}"]), ("file as run", ["{file}"]), ("beam 0", ["{run}", "--beam", "0"])],
    "demo": [("file as runs-dir", ["--runs-dir", "{file}"]), ("runs-dir under /proc", ["--runs-dir", "{proc}"]),
             ("missing data", ["--data", "{missing}", "--runs-dir", "{dir}/demo"])],
    "completion": [("unknown shell", ["fish"])],
    "attention": [("missing run", ["{missing}", "x"]), ("file as run", ["{file}", "x"]),
                  ("file as save-dir", ["{run}", "x", "--save-dir", "{file}"]),
                  ("save-dir under /proc", ["{run}", "x", "--save-dir", "{proc}"]),
                  ("timeline of a missing run", ["{missing}", "x", "--timeline"]),
                  ("beam 0", ["{run}", "x", "--beam", "0"])],
    "explain": [("missing run", ["{missing}", "x"]), ("file as run", ["{file}", "x"]),
                ("file as save-dir", ["{run}", "x", "--save-dir", "{file}"]),
                ("save-dir under /proc", ["{run}", "x", "--save-dir", "{proc}"])],
    "params": [("missing run", ["{missing}"]), ("file as run", ["{file}"]),
               ("file as save-dir", ["{run}", "--save-dir", "{file}"]),
               ("save-dir under /proc", ["{run}", "--save-dir", "{proc}"]),
               ("missing config", ["--model", "transformer", "--config", "{missing}"])],
    "positional": [("missing run", ["{missing}"]), ("file as run", ["{file}"]),
                   ("file as save-dir", ["{run}", "--save-dir", "{file}"]),
                   ("save-dir under /proc", ["{run}", "--save-dir", "{proc}"])],
    "selfcheck": [("missing run", ["{missing}"]), ("file as run", ["{file}"])],
    "doctor": [("missing run", ["{missing}"]), ("file as run", ["{file}"])],
    "sweep": [("file as runs-dir", ["--model", "transformer", "--dataset", "numbers", "--grid", "train.lr=1e-3,2e-3",
                                    "--max-steps", "2", "--runs-dir", "{file}"]),
              ("runs-dir under /proc", ["--model", "transformer", "--dataset", "numbers", "--grid",
                                        "train.lr=1e-3,2e-3", "--max-steps", "2", "--runs-dir", "{proc}"]),
              ("missing config", ["--model", "transformer", "--grid", "train.lr=1e-3", "--runs-dir", "{dir}/s",
                                  "--config", "{missing}"])],
    "heads": [("missing run", ["{missing}"]), ("file as run", ["{file}"]),
              ("file as save-dir", ["{run}", "--save-dir", "{file}"]),
              ("save-dir under /proc", ["{run}", "--save-dir", "{proc}"]), ("missing gold", ["{run}", "--gold", "{missing}"])],
    "compare": [("missing run", ["{run}", "{missing}"]), ("file as run", ["{run}", "{file}"]),
                ("file as save-dir", ["{run}", "{run}", "--save-dir", "{file}"]),
                ("save-dir under /proc", ["{run}", "{run}", "--save-dir", "{proc}"])],
    "fill": [("missing run", ["{missing}", "x"]), ("file as run", ["{file}", "x"])],
    "align": [("missing run", ["{missing}"]), ("file as run", ["{file}"]), ("missing gold", ["{run}", "--gold", "{missing}"]),
              ("file as gold", ["{run}", "--gold", "{file}"]), ("file as save-dir", ["{run}", "--save-dir", "{file}"]),
              ("save-dir under /proc", ["{run}", "--save-dir", "{proc}"]),
              ("missing reverse run", ["{run}", "--reverse", "{missing}"])],
    "attribute": [("missing run", ["{missing}", "x"]), ("file as run", ["{file}", "x"]),
                  ("file as save-dir", ["{run}", "x", "--save-dir", "{file}"]),
                  ("save-dir under /proc", ["{run}", "x", "--save-dir", "{proc}"])],
    "scaling": [("file as runs-dir", ["--runs-dir", "{file}", "--dataset", "numbers"]),
                ("runs-dir under /proc", ["--runs-dir", "{proc}", "--dataset", "numbers"]),
                ("missing data", ["--data", "{missing}", "--runs-dir", "{dir}/s"]),
                ("widths 100000", ["--widths", "100000", "--plan-only", "--dataset", "numbers"])],
    "serve": [("missing run", ["{missing}"]), ("file as run", ["{file}"]), ("missing gold", ["{run}", "--gold", "{missing}"])],
    "export": [("missing run", ["{missing}", "{dir}/o"]), ("file as run", ["{file}", "{dir}/o"]),
               ("file as out", ["{run}", "{file}"]), ("out under /proc", ["{run}", "{proc}"]),
               ("out under a file", ["{run}", "{file}/o"])],
    "average": [("missing run", ["{missing}"]), ("file as run", ["{file}"]),
                ("last 0", ["{run}", "--last", "0"]), ("more than it holds", ["{run}", "--last", "99"]),
                ("bad name", ["{run}", "--last", "1", "--name", "../x"])],
}

QUIET = {"train", "translate", "evaluate", "demo", "sweep", "scaling", "heads", "compare"}  # no progress lines


def _commands() -> set[str]:
    sub = next(a for a in make_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {p.prog.split()[-1] for p in dict.fromkeys(sub.choices.values())}


def test_every_command_is_walked():
    assert _commands() == set(CASES)


class _Trained(AssertionError):
    pass


@pytest.fixture
def walk(tiny_runs, tmp_path, monkeypatch, capsys):
    """``walk(argv) -> (exit code, stderr)``, run in a fresh folder where training is forbidden."""

    run_dir = str(tiny_runs("transformer"))  # trained before training is forbidden

    def no_training(*args, **kwargs):
        raise _Trained("the command started training instead of refusing the mistake")

    monkeypatch.setattr("attnlab.training.session.settle_config", no_training)
    work = tmp_path / "cwd"
    work.mkdir()
    (work / "file.txt").write_text("hello .\n")
    (work / "dir").mkdir()
    monkeypatch.chdir(work)
    paths = {"run": run_dir, "missing": str(work / "nope"), "file": str(work / "file.txt"),
             "dir": str(work / "dir"), "proc": "/proc/attnlab-walk/x"}

    def run(command: str, argv: list[str]) -> tuple[int, str]:
        args = [command, *(a.format(**paths) for a in argv), *(["--quiet"] if command in QUIET else [])]
        capsys.readouterr()
        try:
            rc = main(args)
        except SystemExit as e:  # a usage error: argparse exits
            rc = e.code
        assert not Path(paths["missing"]).exists(), "a mistake created the path it named"
        return rc, capsys.readouterr().err

    return run


def assert_one_error_line(rc: int, err: str) -> None:
    """Exit 2 and one `error:` line; a usage error may print the command's usage above it."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    errors = [x for x in lines if x.startswith("error:")]
    assert rc == 2 and len(errors) == 1 and lines[-1] == errors[0], (rc, err)
    if not lines[0].startswith("usage:"):
        assert len(lines) == 1, err


@pytest.mark.parametrize(
    "command,case,argv",
    [pytest.param(c, name, argv, id=f"{c}: {name}") for c, cases in CASES.items() for name, argv in cases],
)
def test_one_line(walk, command, case, argv):
    assert_one_error_line(*walk(command, argv))


# ------------------------------------------------------------------------ corrupt run and export files

def _rehash(folder: Path, name: str) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _word_vocab(edit):
    def damage(export: Path) -> None:
        tok = json.loads((export / "tokenizer.en.json").read_text())
        edit(tok)
        (export / "tokenizer.en.json").write_text(json.dumps(tok))
        _rehash(export, "tokenizer.en.json")  # the content check must stop it, not the checksum
    return damage


def _ckpt(run: Path) -> Path:
    """The checkpoint LAST names (a budgeted run keeps several: the decay's and the rotation's)."""
    return run / "checkpoints" / (run / "checkpoints" / "LAST").read_text().strip()


RUN_DAMAGE = {
    "binary LAST": lambda r: (r / "checkpoints" / "LAST").write_bytes(b"\x00\xff\xfe\x80"),
    "binary BEST": lambda r: (r / "checkpoints" / "BEST").write_bytes(b"\x00\xff\xfe\x80"),
    "manifest not JSON": lambda r: (_ckpt(r) / "manifest.json").write_text("{not json"),
    "manifest files not a table": lambda r: (_ckpt(r) / "manifest.json").write_text('{"files": 5}'),
    "tokenizers.json not UTF-8": lambda r: (r / "tokenizers.json").write_bytes(b"\xff\xfe"),
    "tokenizers.json sides not objects": lambda r: (r / "tokenizers.json").write_text('{"src": 1, "tgt": [2]}'),
}
EXPORT_DAMAGE = {
    "tokenizer of another model type": _word_vocab(lambda t: t.__setitem__("model", {"type": "WordPiece",
                                                                                       "vocab": {"<unk>": 0}})),
    "tokenizer ids not integers": _word_vocab(lambda t: t["model"].__setitem__("vocab", {"<unk>": "x", "<pad>": 1})),
    "tokenizer model a list": _word_vocab(lambda t: t.__setitem__("model", [1, 2])),
    "tokenizer vocab a list": _word_vocab(lambda t: t["model"].__setitem__("vocab", [1, 2, 3])),
}
@pytest.mark.parametrize("damage,command", [(d, c) for d in RUN_DAMAGE for c in ("translate", "export")])
def test_a_damaged_run_is_one_line(walk, tiny_runs, tmp_path, damage, command):
    run = shutil.copytree(tiny_runs("transformer"), tmp_path / "damaged")
    RUN_DAMAGE[damage](run)
    which = "best" if damage == "binary BEST" else "last"
    argv = [str(run), "x"] if command == "translate" else [str(run), str(tmp_path / "exported")]
    assert_one_error_line(*walk(command, [*argv, "--checkpoint", which]))


@pytest.mark.parametrize("damage", list(EXPORT_DAMAGE))
def test_a_crafted_export_tokenizer_is_one_line(walk, tiny_runs, tmp_path, damage):
    from attnlab.export.folder import export_run

    export = export_run(tiny_runs("transformer"), tmp_path / "exported")
    EXPORT_DAMAGE[damage](export)
    rc, err = walk("translate", [str(export), "x"])
    assert_one_error_line(rc, err)
    assert "tokenizer.en.json" in err
