"""Each request in its own language: the API's learner text (the alignment verdict's `summary`, warnings)
follows `lang`, `?lang=`, then Accept-Language, then the server's --lang; requests in different languages
at once do not clash, and the CLI's process-wide language is untouched."""

from __future__ import annotations

import re
import threading

import pytest

from attnlab import i18n
from attnlab.evaluation.alignment import AlignmentCheck
from attnlab.web.language import accepted_language

CJK = re.compile(r"[\u4e00-\u9fff]")
NOTES = "i'm home ."


@pytest.fixture(scope="module")
def notes_client(notes_run):
    """A TestClient over the run that translates the notes' example (so its answer carries a verdict)."""
    from fastapi.testclient import TestClient

    from attnlab.web.app import create_app

    with TestClient(create_app([f"notes={notes_run}"]), base_url="http://127.0.0.1") as c:
        yield c


def _summary_in(lang: str, verdict: dict) -> str:
    with i18n.speaking(lang):
        return AlignmentCheck.from_json(verdict).summary()


def test_concurrent_requests_each_get_their_own_language(notes_client):
    """Two threads post at once, one in English and one in Chinese, several times over: every answer's
    summary and warning is in its own request's language; the process's language stays English."""
    rounds, barrier = 6, threading.Barrier(2)
    answers: dict[str, list[dict]] = {"en": [], "zh": []}
    failures: list[BaseException] = []
    ways = {"en": {"headers": {"Accept-Language": "en-GB,en;q=0.9"}, "json": {"text": NOTES, "max_len": 2}},
            "zh": {"headers": {"Accept-Language": "en"}, "json": {"text": NOTES, "max_len": 2, "lang": "zh"}}}

    def ask(lang: str) -> None:
        try:
            for _ in range(rounds):
                barrier.wait(10)
                r = notes_client.post("/api/translate", **ways[lang])
                assert r.status_code == 200, r.text
                answers[lang].append(r.json())
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failures.append(e)
            barrier.abort()

    threads = [threading.Thread(target=ask, args=(lang,)) for lang in ways]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    for lang, got in answers.items():
        assert len(got) == rounds
        for d in got:
            assert d["alignment"]["summary"] == _summary_in(lang, d["alignment"])
            (warning,) = d["warnings"]  # max_len 2 stops the translation before <eos>
            assert bool(CJK.search(d["alignment"]["summary"])) == bool(CJK.search(warning)) == (lang == "zh"), d
    assert i18n.language() == "en" and i18n._("options") == "options"


@pytest.mark.parametrize("how, want", [
    ({"params": {"lang": "zh"}}, "zh"),
    ({"params": {"lang": "zh-CN"}, "headers": {"Accept-Language": "en"}}, "zh"),
    ({"headers": {"Accept-Language": "fr-FR, zh-Hans;q=0.8, en;q=0.5"}}, "zh"),
    ({"headers": {"Accept-Language": "zh;q=0.4, en;q=0.6"}}, "en"),
    ({"headers": {"Accept-Language": "fr, *"}}, "en"),  # none it has: the server's language
    ({}, "en"),
])
def test_the_language_is_lang_then_accept_language_then_the_servers(notes_client, how, want):
    d = notes_client.post("/api/translate", json={"text": NOTES}, **how).json()
    assert d["alignment"]["summary"] == _summary_in(want, d["alignment"])
    assert bool(CJK.search(d["alignment"]["summary"])) == (want == "zh")


def test_the_servers_lang_is_the_fallback_and_the_cli_keeps_its_own(notes_run):
    """`attnlab serve --lang zh` (the CLI's language set before create_app): answers default to Chinese,
    a request may ask for English, and neither changes the CLI's language."""
    from fastapi.testclient import TestClient

    from attnlab.web.app import create_app

    i18n.set_language("zh")
    with TestClient(create_app([f"notes={notes_run}"]), base_url="http://127.0.0.1") as c:
        zh = c.post("/api/translate", json={"text": NOTES}).json()["alignment"]
        en = c.post("/api/translate", json={"text": NOTES, "lang": "en"}).json()["alignment"]
    assert CJK.search(zh["summary"]) and not CJK.search(en["summary"])
    assert i18n.language() == "zh" and i18n._("options") == "选项"


@pytest.mark.parametrize("how, loc", [
    ({"json": {"text": NOTES, "lang": "klingon"}}, ["body", "lang"]),
    ({"json": {"text": NOTES}, "params": {"lang": "klingon"}}, ["query", "lang"]),
])
def test_an_unknown_lang_is_a_one_line_422(notes_client, how, loc):
    r = notes_client.post("/api/translate", **how)
    assert r.status_code == 422, r.text
    (item,) = r.json()["detail"]
    assert item["loc"] == loc and "not an available language" in item["msg"] and "\n" not in item["msg"]


def test_accept_language_by_weight():
    have = {"en", "zh"}
    assert accepted_language("zh-CN,zh;q=0.9,en;q=0.8", have) == "zh"
    assert accepted_language("en;q=0.9, zh", have) == "zh"
    assert accepted_language("de, en;q=0.1", have) == "en"
    assert accepted_language("zh;q=0, fr", have) is None
    assert accepted_language("*", have) is None and accepted_language("", have) is None
    assert accepted_language("zh;q=oops, en;q=0.2", have) == "en"  # a malformed weight counts as 0
