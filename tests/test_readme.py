"""The README starts with use: the two commands, what the demo shows, a five-minute guide; the
benchmarks come near the end, and no table cell runs past two lines."""

from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
CELL_CHARS = 110  # about two lines of a two-column table as GitHub renders it


def test_usage_comes_first_and_benchmarks_near_the_end():
    heads = re.findall(r"^## (.+)$", README, flags=re.M)
    assert heads[:3] == ["What the demo shows", "Five minutes with attnlab", "Commands"], heads
    assert heads.index("Benchmarks") >= len(heads) - 3, heads
    guide = README.split("## Five minutes with attnlab", 1)[1].split("\n## ", 1)[0]
    steps = ["**Train**", "**Translate**", "**Look at attention**", "**Serve**", "**Export**", "**Your own corpus**"]
    assert [guide.index(s) for s in steps] == sorted(guide.index(s) for s in steps)
    assert "--data pairs.tsv data.src_lang=en data.tgt_lang=de" in guide
    assert "| budget |" not in README  # the benchmark table lives in bench/RESULTS.md


def test_no_table_cell_longer_than_two_lines():
    rows = [line for line in README.splitlines() if line.startswith("|") and not line.startswith("|---")]
    long = [c.strip() for row in rows for c in row.strip("|").split("|") if len(c.strip()) > CELL_CHARS]
    assert not long, long
