"""attnlab.notes: the notes' sections, their D2L numbers and the worked example, in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnlab import notes

DOC = Path(__file__).resolve().parents[1] / "docs" / "notes-sections.md"


def test_every_section_of_the_notes_is_mapped_once():
    assert [s.number for s in notes.SECTIONS] == [str(n) for n in range(1, 29)]
    assert all(s.title and s.title_zh and s.d2l_zh and s.d2l_en for s in notes.SECTIONS)


def test_the_doc_table_is_the_code_table():
    rows = [line for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| §") and not line.startswith("| § ")]
    assert rows == [f"| §{s.number} | {s.title} | {s.title_zh} | {s.d2l_zh} | {s.d2l_en} |" for s in notes.SECTIONS]


def test_cite_gives_both_numberings():
    assert notes.cite(25) == "§25 (D2L 10.4.3, 10.7.6 zh / 11.4.3, 11.7.6 en)"
    assert "中文版 14.8" in notes.cite("28.4", "zh") and "英文版 11.9" in notes.cite("28.4", "zh")
    with pytest.raises(KeyError):
        notes.d2l(29)


def test_the_example_and_its_table_agree():
    source, target = notes.EXAMPLE
    assert source in notes.SENTENCES and target in notes.ACCEPTED[source]
    table = notes.NOTES_ALIGNMENT[source]
    assert [table[w] for w in ("je", "suis", "chez", "moi")] == ["i'm", "i'm", "home", "home"]  # the notes' §1
    assert set(table.values()) <= set(source.split())
