"""Every `attnlab …` command a reader is shown — in the notes tour's markdown and code, and in the READMEs'
shell blocks — is one the CLI accepts: each is parsed by the real parser (nothing is executed), so an
invalid choice or a renamed option fails here rather than in a learner's terminal."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest

from attnlab.cli import make_parser, parse

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "examples").glob("*.ipynb"))
READMES = [ROOT / "README.md", ROOT / "README.zh.md"]
#: Where a shown command starts: `attnlab`, `.venv/bin/attnlab`, `-m attnlab` (not `attnlab.load`, `attnlab/`).
START = re.compile(r"(?:^|(?<=[\s/]))attnlab(?=\s|$)")


def _argv(command: str) -> list[str]:
    """The argv of the first `attnlab` command of a shell line: comments, pipes, redirections and `&&` end it."""
    words = shlex.split(command, comments=True)
    argv: list[str] = []
    for w in words[1:]:  # words[0] is attnlab itself
        if w in {"|", "||", "&&", ";"} or w.startswith((">", "<", "2>")):
            break
        argv.append(w)
    return argv


def _notebook_commands(path: Path) -> list[str]:
    """`attnlab …` in a code span of any cell (markdown prose, code comments), and `!attnlab …` lines."""
    shown = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        shown += re.findall(r"`(attnlab(?: [^`]*)?)`", source)
        shown += [line.lstrip(" !") for line in source.splitlines() if re.match(r"\s*!attnlab\s", line)]
    return shown


def _readme_commands(path: Path) -> list[str]:
    """The `attnlab …` lines of the README's fenced shell blocks (a table's `[--option]` shorthand is not run)."""
    shown, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = line.strip() in {"```bash", "```sh", "```console"}
            continue
        if fenced and (m := START.search(line)):
            shown.append(line[m.start():])
    return shown


def _shown() -> list[tuple[str, str]]:
    shown = [(p.name, c) for p in NOTEBOOKS for c in _notebook_commands(p)]
    return shown + [(p.name, c) for p in READMES for c in _readme_commands(p)]


def _parse_error(argv: list[str]) -> str | None:
    """None when the CLI's parser accepts ``argv``, else what it said. A bare command name
    (`attnlab heads` in prose) names the command: it must exist, its arguments are not checked."""
    parser = make_parser()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            if len(argv) == 1:
                sub = next(a for a in parser._actions if a.dest == "command")
                return None if argv[0] in sub.choices else f"no command {argv[0]!r}"
            parse(parser, argv)
        except SystemExit as e:
            return None if e.code == 0 else err.getvalue().strip().splitlines()[-1]
    return None


def test_the_notebooks_and_readmes_show_commands():
    shown = _shown()
    assert {name for name, _ in shown} >= {p.name for p in NOTEBOOKS + READMES}
    assert sum(name.endswith(".ipynb") for name, _ in shown) >= 10


@pytest.mark.parametrize("where, command", _shown(), ids=lambda x: x if "attnlab" not in x else None)
def test_every_shown_command_parses(where, command):
    assert (err := _parse_error(_argv(command))) is None, f"{where}: `{command}`: {err}"


def test_an_invalid_choice_is_caught():
    assert "invalid choice" in _parse_error(["train", "--model", "encoder_only", "--out", "runs/x"])
