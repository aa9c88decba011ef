"""The learner's language (issue #18, item 10): the Chinese catalogue, ``--lang`` / ``ATTNLAB_LANG``, the
CJK font fallback of the figures and the web page's unknown characters."""

from __future__ import annotations

import io
import re
import string
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from attnlab import i18n
from attnlab.cli import main

SRC = Path(__file__).resolve().parents[1] / "src"
PO = SRC / "attnlab" / "locale" / "zh" / "LC_MESSAGES" / "attnlab.po"
MO = PO.with_suffix(".mo")
HAN = re.compile(r"[\u4e00-\u9fff]")


pytestmark = pytest.mark.usefixtures("english_only")  # tests/conftest.py


def _po():
    from babel.messages.pofile import read_po

    with PO.open("rb") as f:
        return read_po(f)


def _fields(template: str) -> list[tuple[str, str, str | None]]:
    """The ``str.format`` fields of a template: (name, format spec, conversion), in a canonical order.
    A width (``<12``) may differ: a CJK character is two columns wide, so a translation pads its own way."""
    return sorted((name, re.sub(r"^<\d+$", "", spec or ""), conv)
                  for _, name, spec, conv in string.Formatter().parse(template) if name is not None)


# --- the catalogue ------------------------------------------------------------------------------------


def test_the_catalogue_holds_exactly_the_messages_the_code_wraps():
    """Every ``_("…")`` / ``N_("…")`` in src/ and every string the web page marks (``data-i18n`` in
    index.html, ``t("…")`` / ``N_("…")`` in app.js) has an entry, and no entry is left over from old code."""
    pytest.importorskip("babel", reason="Babel (a dev dependency) extracts the messages")
    from babel.messages.extract import extract_from_dir

    from attnlab.web.page_text import page_messages

    in_code: dict[str, str] = {}
    for fname, _line, msg, _comments, _ctx in extract_from_dir(
        str(SRC), method_map=[("**.py", "python")], keywords={"_": None, "N_": None}
    ):
        in_code.setdefault(msg, fname)
    for msg, fname in page_messages().items():
        in_code.setdefault(msg, fname)
    in_po = {m.id for m in _po() if m.id}
    assert {m: f for m, f in in_code.items() if m not in in_po} == {}, "wrapped in code, missing from the .po"
    assert sorted(in_po - set(in_code)) == [], "in the .po, no longer in the code"
    assert any(f.endswith("doctor.py") for f in in_code.values()) and "app.js" in in_code.values()


def test_every_message_is_translated_and_keeps_its_format_fields():
    """A translation that drops or renames a ``{field}`` would raise (or lie) at ``.format`` time."""
    pytest.importorskip("babel")
    messages = [m for m in _po() if m.id]
    assert len(messages) > 50
    for m in messages:
        assert m.string and not m.fuzzy, m.id
        assert _fields(m.string) == _fields(m.id), (m.id, m.string)
    assert sum(bool(HAN.search(m.string)) for m in messages) >= 0.9 * len(messages)


def test_the_shipped_mo_is_the_po_compiled():
    """The committed .mo (what ``gettext`` reads) says exactly what the .po says."""
    pytest.importorskip("babel")
    from babel.messages.mofile import read_mo, write_mo

    buf = io.BytesIO()
    write_mo(buf, _po())
    compiled = read_mo(io.BytesIO(buf.getvalue()))
    with MO.open("rb") as f:
        shipped = read_mo(f)
    as_dict = lambda cat: {m.id: m.string for m in cat if m.id}  # noqa: E731
    assert as_dict(shipped) == as_dict(compiled)


def test_the_po_passes_the_checks_pybabel_compile_runs():
    """``pybabel compile`` refuses an entry whose id Babel reads as a %-format (``{x} % of`` is ``% o``)."""
    pytest.importorskip("babel")
    assert [(m.id, [str(e) for e in errors]) for m, errors in _po().check()] == []


# --- choosing the language ----------------------------------------------------------------------------


def test_set_language_accepts_regional_forms_and_refuses_unknown_ones(monkeypatch):
    assert i18n.available_languages()[:1] == ["en"] and "zh" in i18n.available_languages()
    assert i18n.set_language("zh_CN.UTF-8") == "zh" and i18n.language() == "zh"
    assert i18n._("healthy") == "健康"
    assert i18n.set_language("en") == "en" and i18n._("healthy") == "healthy"
    monkeypatch.setenv(i18n.ENV_VAR, "zh-Hans")
    assert i18n.set_language(None) == "zh"
    with pytest.raises(i18n.LanguageError, match=r"--lang 'klingon' .*choose one of: en, zh"):
        i18n.set_language("klingon")


def test_an_unknown_language_is_one_error_line_naming_the_available_ones(capsys, monkeypatch, tmp_path):
    assert main(["doctor", str(tmp_path), "--lang", "fr"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: --lang 'fr'") and "en, zh" in err
    monkeypatch.setenv(i18n.ENV_VAR, "fr")
    assert main(["doctor", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: ATTNLAB_LANG 'fr'") and "en, zh" in err


def _markers(text: str) -> list[str]:
    """The structure of a doctor report: each line's indent and first symbol (✓ ✗ ? ~ - →)."""
    out = []
    for line in text.splitlines():
        indent, first = re.match(r"(\s*)(\S?)", line).groups()
        out.append(indent + (first if first in "✓✗?~-→" else "text"))
    return out


def test_doctor_speaks_chinese_with_lang_or_the_environment(tiny_runs, capsys, monkeypatch):
    run = str(tiny_runs("transformer"))
    assert main(["doctor", run]) == 0
    en = capsys.readouterr().out
    assert main(["doctor", run, "--lang", "zh"]) == 0
    zh = capsys.readouterr().out
    assert "verdict:" in en and not HAN.search(en)
    assert "训练诊断" in zh and "结论：" in zh and "verdict" not in zh
    assert "学习率" in zh  # the notes' §10 term
    assert _markers(zh) == _markers(en)  # the same report, line for line, only in the other language
    monkeypatch.setenv(i18n.ENV_VAR, "zh")
    assert main(["doctor", run]) == 0
    assert capsys.readouterr().out == zh
    assert main(["--lang", "en", "doctor", run]) == 0  # the option beats the environment
    assert capsys.readouterr().out == en


# --- figures and the web page -------------------------------------------------------------------------


def test_figures_fall_back_to_an_installed_cjk_font_and_keep_the_latin_one():
    pytest.importorskip("matplotlib")
    import matplotlib

    from attnlab.viz import fonts
    from attnlab.viz.figure import new_figure

    before = list(matplotlib.rcParams["font.family"])
    fig = new_figure((2, 1))
    after = list(matplotlib.rcParams["font.family"])
    family = fonts.cjk_family()
    if family is None:  # no CJK font on this machine (scripts/setup.sh says how to install one)
        assert after == before
        return
    assert after[0] == before[0] and after[-1] == family and after.count(family) == 1
    fig.text(0.1, 0.5, "注意力权重 attention")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns "Glyph … missing from font(s)" without a fallback
        fig.png()


def test_the_web_page_names_the_characters_bpe_does_not_know():
    """A BPE vocabulary turns unseen characters, not words, into <unk>: the page names the word and them."""
    pytest.importorskip("fastapi")
    from attnlab.data.subword import BPETokenizer
    from attnlab.web.routes.translate import unknown_words

    tok = BPETokenizer.train(["i'm home .", "he is calm .", "we are at home ."] * 5, 60, "en")
    text = "i'm home 日本 , café ."
    tokens = [*tok.tokens(text), "<eos>"]
    assert tokens.count("<unk>") >= 4  # 日 本 , é
    got = unknown_words(SimpleNamespace(src_tok=tok), text, tokens)
    assert got == ["日本 (日, 本)", ",", "café (f, é)"]
    assert not any("<unk>" in w for w in got)
    assert unknown_words(SimpleNamespace(src_tok=tok), "i'm home .", tok.tokens("i'm home .")) == []


@pytest.mark.parametrize(
    ("kind", "terms"),
    [
        ("transformer", ("查询", "键", "值", "位置编码", "注意力权重", "多头注意力", "超参数", "参数")),
        ("bahdanau", ("更新门", "重置门", "上下文向量", "候选隐藏状态", "注意力权重", "超参数")),
    ],
)
def test_explain_speaks_the_notes_terms_in_chinese(tiny_runs, capsys, kind, terms):
    """``attnlab explain RUN SENTENCE --lang zh`` (issue #18's check): the notes' own terms, and the same
    numbers as the English walk-through."""
    run = str(tiny_runs(kind))
    assert main(["explain", run, "twenty one", "--reference", "vingt et un"]) == 0
    en = capsys.readouterr().out
    assert main(["explain", run, "twenty one", "--reference", "vingt et un", "--lang", "zh"]) == 0
    zh = capsys.readouterr().out
    assert [t for t in terms if t not in zh] == []
    assert not HAN.search(en)
    numbers = lambda text: re.findall(r"[-+]?\d+\.\d+", text)  # noqa: E731 - every printed measurement
    assert numbers(zh) == numbers(en)


def test_columns_line_up_by_terminal_cells():
    """Chinese characters take two terminal cells: padding counts cells, not characters."""
    from attnlab import i18n

    assert i18n.width("编码器") == 6 and i18n.width("abc") == 3 and i18n.width("e\u0301") == 1
    rows = [i18n.ljust(name, 12) + "|" for name in ("编码器", "attention", "解码器 GRU")]
    assert {i18n.width(r) for r in rows} == {13}
    assert i18n.rjust("12", 5) == "   12" and i18n.width(i18n.center("键", 6)) == 6


def test_untranslated_messages_are_remembered_not_hidden():
    from attnlab import i18n

    try:
        i18n.set_language("zh")
        assert i18n._("a message no catalogue holds") == "a message no catalogue holds"
        assert i18n.missing() == ["a message no catalogue holds"]
        i18n.set_language("en")
        i18n._("a message no catalogue holds")
        assert i18n.missing() == []  # English is the source: nothing is missing
    finally:
        i18n.set_language("en")


def test_using_switches_for_a_block_only():
    from attnlab import i18n

    i18n.set_language("en")
    with i18n.using("zh") as lang:
        assert lang == "zh" and i18n.language() == "zh"
    assert i18n.language() == "en"
    with i18n.using(None) as lang:
        assert lang == "en"


def test_speaking_is_one_contexts_language_and_leaves_the_process_one(english_only):
    """Two threads speak English and Chinese at once through i18n.speaking (the web server's per-request
    language): each reads its own, and the process-wide language (the CLI's --lang) never changes."""
    import threading

    barrier, got, errors = threading.Barrier(2), {}, []

    def speak(lang: str) -> None:
        try:
            with i18n.speaking(lang):
                seen = set()
                for _n in range(200):
                    barrier.wait(10) if _n % 50 == 0 else None
                    seen.add((i18n.language(), i18n._("options")))
                got[lang] = seen
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=speak, args=(lang,)) for lang in ("en", "zh")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and got == {"en": {("en", "options")}, "zh": {("zh", "选项")}}
    assert i18n.language() == "en" and i18n._("options") == "options"
    with i18n.speaking("zh"), i18n.using("en"):  # inside a request, using() changes that request's alone
        assert i18n._("options") == "options"
    assert i18n.language() == "en"
