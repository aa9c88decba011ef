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


def test_cite_names_several_sections_with_each_d2l_section_once():
    # §4–9: 9.7.1 and 9.7.2 fall under 9.7, 9.1.1 under 9.1; the English 10.2.1–10.2.3 under 10.2
    assert notes.cite("4–9") == "§4–9 (D2L 9.1, 9.5, 9.7, 10.4 zh / 10.2, 10.5, 10.7, 11.4 en)"
    assert notes.cite("11, 28") == "§11, §28 (D2L 10.5, 14.8 zh / 11.5, 11.9 en)"
    assert notes.cite("13-16") == notes.cite("13–16") == "§13–16 (D2L 10.6.3 zh / 11.6.3 en)"
    with pytest.raises(KeyError):
        notes.cite("27–29")


def test_the_help_cites_both_numberings_wherever_it_cites_the_notes():
    """Every "§N" of a command's summary or description comes with D2L's numbers in both editions."""
    import argparse
    import re

    from attnlab.cli import make_parser

    parser = make_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in sub._choices_actions}
    texts = [(name, helps.get(name) or "") for name in sub.choices]
    texts += [(name, p.description or "") for name, p in sub.choices.items()]
    cited = [(name, t) for name, t in texts if "§" in t]
    assert len(cited) >= 10
    for name, text in cited:
        assert re.search(r"§[\d.–, §]+ \(D2L [\d., –]+ zh / [\d., –]+ en\)", text), (name, text)


def test_the_example_and_its_table_agree():
    source, target = notes.EXAMPLE
    assert source in notes.SENTENCES and target in notes.ACCEPTED[source]
    table = notes.NOTES_ALIGNMENT[source]
    assert [table[w] for w in ("je", "suis", "chez", "moi")] == ["i'm", "i'm", "home", "home"]  # the notes' §1
    assert set(table.values()) <= set(source.split())
