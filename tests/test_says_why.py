"""The source says why, not when (docs/DESIGN.md, Conventions): short docstrings, no measurements, no commits.

A docstring states a contract in at most :data:`MAX_DOCSTRING` lines and links a longer explanation in
docs/explanations/ by name; a measured figure (a speedup, a throughput) belongs in bench/RESULTS.md or
docs/experiments/, and a commit hash in the history. Contract constants (limits, defaults, shapes such as
``1024×256``) are not measurements and pass.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attnlab"
MAX_DOCSTRING = 25

#: a measured figure: a throughput, a score or a utilisation (``30 BLEU``, ``41% MFU``), a speedup written as a
#: decimal ratio (``1.79×``) or "N× faster", or a time said of a machine or as a guess (``on 2 cores``, ``about
#: 30 s``); a factor in a rule (``1.5 × ln V``) is spaced and passes, and a setting (``default 10 s``) passes
MEASURED = re.compile(
    r"\d[\d.,]*\s*(?:GFLOP/s|TFLOP/s|tok/s|tokens/s|sent/s)"
    r"|\d[\d.,]*\s*%?\s*(?:BLEU|MFU)\b"
    r"|\b\d+-core\b|\bon \d+ (?:cores|CPUs|threads)\b"
    r"|(?:about|roughly|around|~)\s*\d[\d.,]*\s*(?:ms|s|seconds|min|minutes|hours?)\b"
    r"|\b\d+\.\d+[×x](?![\w⁰¹²³])"
    r"|\d+(?:\.\d+)?\s*[×x]\s+(?:faster|slower)"
)
#: a commit hash, short or whole: 7 to 40 hex digits with at least one digit and two letters (so ``1e999`` and
#: words pass; a sha256 checksum, 64 digits, is data and passes)
COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=(?:[0-9]*[a-f]){2})[0-9a-f]{7,40}\b")


def sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def long_docstrings(path: Path) -> list[str]:
    """``["FILE:LINE NAME (N lines)"]`` for each docstring of ``path`` over :data:`MAX_DOCSTRING` lines."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                n = first.end_lineno - first.lineno + 1
                if n > MAX_DOCSTRING:
                    out.append(f"{path.relative_to(SRC)}:{first.lineno} {getattr(node, 'name', '<module>')} ({n} lines)")
    return out


def test_every_docstring_fits_in_25_lines():
    over = [d for p in sources() for d in long_docstrings(p)]
    assert not over, "docstrings over 25 lines (move the explanation to docs/explanations/): " + "; ".join(over)


def test_no_measured_figure_or_commit_hash_in_the_source():
    hits = []
    for p in sources():
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            for pattern, what in ((MEASURED, "measured figure"), (COMMIT, "commit hash")):
                m = pattern.search(line)
                if m:
                    hits.append(f"{p.relative_to(SRC)}:{i} {what} {m.group(0)!r}")
    assert not hits, "move these to bench/RESULTS.md or docs/experiments/: " + "; ".join(hits)


@pytest.mark.parametrize("line, caught", [
    ("1.79× this path's nn.Linear", True), ("~3× slower than amax", True), ("(2.7x faster optimizer step)", True),
    ("greedy 463 sent/s at 64 sentences", True), ("90.7 GFLOP/s on 1 thread", True), ("again at 5c36ba4", True),
    ("peak GFLOP/s × minutes", False), ("above 1.5 × ln V", False), ("1024×256 = 262,144 numbers", False), ("not 8×10⁰", False),
    ("so 1e999999999 is refused", False), ("step-0000500", False), ("the decade's facade", False),
    ("reaches 30.2 BLEU on the test split", True), ("at 41% MFU", True), ("about 30 s per direction", True),
    ("40: about 2 minutes on 2 cores", True), ("on an idle 2-core laptop", True),
    ("measured at 5c36ba4e0f9d2b7a1c3e5f7a9b1d3f5e7a9c1b2d", True),
    ("(default 10 s)", False), ("a 1 s matmul probe", False), ("sacreBLEU's BLEU and chrF", False),
    ("BLEU-4 over 4-gram precisions", False), ("sha256 " + "0123456789abcdef" * 4, False),
])
def test_the_patterns_catch_measurements_and_hashes_only(line, caught):
    assert bool(MEASURED.search(line) or COMMIT.search(line)) is caught
