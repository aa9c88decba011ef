"""The page's own teaching text in the learner's language (issue #18, item 10): marked in index.html and
app.js, translated in the CLI's one catalogue (attnlab.po), served by ``GET /api/messages``."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from attnlab import i18n
from attnlab.errors import AttnlabError
from attnlab.web.page_text import STATIC_DIR, html_messages, js_messages, page_messages

HAN = re.compile(r"[\u4e00-\u9fff]")
LETTER = re.compile(r"[A-Za-z]")
SHOWN_AS_IS = {"EN", "FR"}  # language badges, the same in every language


pytestmark = pytest.mark.usefixtures("english_only")  # tests/conftest.py


def test_every_marked_page_string_has_a_chinese_translation():
    """Through the compiled catalogue the server reads: a marked string without a translation fails here."""
    msgs = page_messages()
    assert (
        sum(f == "index.html" for f in msgs.values()) >= 40
        and sum(f == "app.js" for f in msgs.values()) >= 40
    )
    _, zh = i18n.catalogue("zh")
    assert [m for m in msgs if zh.gettext(m) == m] == []
    assert sum(bool(HAN.search(zh.gettext(m))) for m in msgs) >= 0.95 * len(msgs)
    # the notes' own terms (查询/键, 注意力权重, 编码器/解码器, 掩蔽, 上下文向量)
    assert (
        zh.gettext("rows: queries · columns: keys · hover a cell") == "行：查询 · 列：键 · 鼠标悬停查看单元格"
    )
    assert "解码器掩蔽自注意力" in zh.gettext(
        next(m for m in msgs if m.startswith("Decoder masked self-attention"))
    )
    assert "上下文向量" in zh.gettext(next(m for m in msgs if m.startswith("This model has no attention")))


class _Unmarked(HTMLParser):
    """Text and labelling attributes of index.html that are not marked for translation."""

    LABELS = ("aria-label", "placeholder", "title")

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth, self.unmarked = 0, []  # depth > 0: inside a data-i18n element

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        marked = (a.get("data-i18n-attrs") or "").split()
        self.unmarked += [f"<{tag} {k}={v!r}>" for k, v in attrs if k in self.LABELS and k not in marked]
        if self.depth or "data-i18n" in a:
            self.depth += 1

    def handle_endtag(self, tag):
        self.depth = max(0, self.depth - 1) if self.depth else 0

    def handle_data(self, data):
        text = data.strip()
        if not self.depth and LETTER.search(text) and text not in SHOWN_AS_IS:
            self.unmarked.append(text)


def test_the_page_marks_all_its_text():
    """A sentence or label added to the page without a mark fails here (then it needs a translation too)."""
    p = _Unmarked()
    p.feed((STATIC_DIR / "index.html").read_text(encoding="utf-8").split("<body>", 1)[1])
    # the option values (argmax, grow-diag, …) are the link methods' names, as the CLI spells them
    assert [
        u for u in p.unmarked if u not in {"argmax", "intersect", "union", "grow-diag", "grow-diag-final-and"}
    ] == []
    js = (STATIC_DIR / "app.js").read_text(encoding="utf-8")
    assert re.findall(r'(?:textContent = |setStatus\(|el\("[a-z0-9]+", "[^"]*", )"[A-Za-z][a-z ]', js) == []


def test_marks_are_read_as_the_page_reads_them():
    assert html_messages(
        '<p data-i18n>two\n   lines &amp; more</p><input placeholder="Type" data-i18n-attrs="placeholder">'
    ) == [
        "two lines & more",
        "Type",
    ]
    assert js_messages('x = t("a \\"b\\" {n}", { n }); y = N_("c"); z.t("no"); set("no");') == [
        'a "b" {n}',
        "c",
    ]
    with pytest.raises(AttnlabError, match="inside"):
        html_messages("<p data-i18n>a <b>b</b></p>")


def test_the_endpoint_speaks_chinese_for_zh_and_english_for_en(client):
    zh = client.get("/api/messages", params={"lang": "zh-CN"})
    assert zh.status_code == 200, zh.text
    d = zh.json()
    assert d["lang"] == "zh" and d["languages"][:1] == ["en"] and "zh" in d["languages"]
    assert set(d["messages"]) == set(page_messages())
    assert (
        d["messages"]["Heatmap"] == "热力图"
        and d["messages"]["query"] == "查询"
        and d["messages"]["key"] == "键"
    )
    cross = next(m for m in d["messages"] if m.startswith("Cross-attention (notes §"))
    assert "{pad}" in d["messages"][cross] and "<pad>" in d["messages"][cross]  # the page fills {pad}
    en = client.get("/api/messages", params={"lang": "en"}).json()
    assert en["lang"] == "en" and all(k == v for k, v in en["messages"].items())


def test_the_default_is_the_servers_language(client):
    from fastapi.testclient import TestClient

    from attnlab.web.app import create_app

    runs = client.app.state.runs
    with TestClient(create_app(runs, lang="zh"), base_url="http://127.0.0.1") as c:
        assert c.get("/api/messages").json()["messages"]["Translate"] == "翻译"
        assert c.get("/api/messages", params={"lang": "en"}).json()["messages"]["Translate"] == "Translate"
    i18n.set_language("zh")  # what `attnlab serve --lang zh` (or ATTNLAB_LANG=zh) does before create_app
    with TestClient(create_app(runs), base_url="http://127.0.0.1") as c:
        assert c.get("/api/messages").json()["lang"] == "zh"
    with pytest.raises(i18n.LanguageError, match="choose one of: en, zh"):
        create_app(runs, lang="fr")


@pytest.mark.parametrize("lang", ["klingon", "x" * 17])
def test_an_unknown_language_is_a_422_in_one_line(client, lang):
    r = client.get("/api/messages", params={"lang": lang})
    assert r.status_code == 422, r.text
    (item,) = r.json()["detail"]
    assert item["loc"] == ["query", "lang"] and "\n" not in item["msg"]
    if lang == "klingon":
        assert item["msg"] == "lang 'klingon' is not an available language; choose one of: en, zh"


def test_the_page_says_what_section_numbers_mean(client):
    """GET /api/sections: every section of the notes with D2L's numbers in both editions, for the page's table."""
    from attnlab import notes

    r = client.get("/api/sections")
    assert r.status_code == 200, r.text
    rows = r.json()["sections"]
    assert [x["number"] for x in rows] == [s.number for s in notes.SECTIONS]
    assert rows[0]["d2l_zh"] == "9.7, 10.4" and rows[0]["d2l_en"] == "10.7, 11.4" and rows[0]["title_zh"]
    html = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    assert 'id="sections-table"' in html and 'href="#sections-card"' in html


def test_the_page_cites_additive_attention_where_the_notes_teach_it():
    """Bahdanau's additive attention is the notes' §1–2 (§3 is teacher forcing)."""
    msgs = page_messages()
    for m in msgs:
        if "additive" in m or "Bahdanau" in m or m.startswith("Cross-attention"):
            assert "§3" not in m, m
