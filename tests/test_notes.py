"""attnlab.notes: the notes' sections, their D2L numbers and the worked example, in one place."""

from __future__ import annotations

import re
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
    assert set(table.values()) <= {*source.split(), "<eos>"}
    assert (table["."], table["<eos>"]) == (".", "<eos>")  # the table's last two rows: the whole table is judged


def _doc_d2l_rows() -> tuple[list[tuple[list[str], list[str]]], dict[str, str]]:
    """Both tables of docs/notes-sections.md: each row's (zh numbers, en numbers), and the topic of each
    section of the second table ("D2L sections the code cites by topic")."""
    rows, topics = [], {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| §") and len(cells) == 5 and not line.startswith("| § "):
            zh, en = cells[3], cells[4]
        elif len(cells) == 4 and cells[0][:1].isdigit():
            zh, en = cells[0], cells[1]
            topics[zh] = cells[2].removeprefix("the ").removesuffix(" attention").lower()
        else:
            continue
        rows.append(([x.strip() for x in zh.split(",")], [x.strip() for x in en.split(",")]))
    return rows, topics


_NUMS = r"\d+(?:\.\d+)*(?:–\d+(?:\.\d+)*)?(?:,\s*\d+(?:\.\d+)*(?:–\d+(?:\.\d+)*)?)*"
#: "D2L §10.4", "D2L 10.3.2 zh / 11.3.4 en", "D2L's (10.7 zh / 11.7 en" — not "D2L's 0.005" (a value of D2L's).
CITATION = re.compile(rf"D2L(?:'s \(|\s+§?)({_NUMS})(?:\s+zh\s*/\s*({_NUMS})\s+en)?")


def test_every_d2l_section_the_code_cites_is_in_the_doc_and_names_its_topic():
    src = Path(__file__).resolve().parents[1] / "src" / "attnlab"
    rows, topics = _doc_d2l_rows()
    known_zh = {x for zh, _ in rows for x in zh}
    pairs = {(z, e) for zh, en in rows if len(zh) == len(en) for z, e in zip(zh, en)}
    cited = 0
    for path in sorted(src.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for m in CITATION.finditer(text):
            where = f"{path.relative_to(src)}: {m.group(0)!r}"
            zh = [x.strip() for x in m.group(1).split(",")]
            assert set(zh) <= known_zh, f"{where} cites a D2L section docs/notes-sections.md does not list"
            if m.group(2):
                en = [x.strip() for x in m.group(2).split(",")]
                assert len(zh) == len(en) and set(zip(zh, en)) <= pairs, f"{where}: not one row's zh / en pair"
            around = text[max(0, m.start() - 120):m.end() + 40].lower()
            for x in zh:
                assert x not in topics or topics[x] in around, f"{where} is D2L's {topics.get(x)!r}, not named here"
            cited += 1
    assert cited >= 15
