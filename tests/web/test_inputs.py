"""Bad inputs get a 4xx with a field-level message, before the model runs; never a 500."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def _post(client, body: bytes, ctype: str = "application/json"):
    return client.post("/api/translate", content=body, headers={"content-type": ctype})


def _field_error(r, loc_tail):
    assert 400 <= r.status_code < 500, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, list) and detail, detail
    assert any(tuple(d["loc"][-len(loc_tail) :]) == loc_tail and d["msg"] for d in detail), detail
    return detail


@pytest.mark.parametrize(
    "body,loc,needle",
    [
        ({"text": ""}, ("text",), "at least 1"),
        ({"text": "   \t\n "}, ("text",), "whitespace"),
        ({"text": "a" * 301}, ("text",), "at most 300"),
        ({"text": 5}, ("text",), "string"),
        ({"text": [5]}, ("text",), "string"),
        ({"text": None}, ("text",), "string"),
        ({}, ("text",), "required"),
        ({"text": "go .", "beam_size": 0}, ("beam_size",), "greater than or equal"),
        ({"text": "go .", "beam_size": 99}, ("beam_size",), "less than or equal"),
        ({"text": "go .", "beam_size": "2"}, ("beam_size",), "integer"),
        ({"text": "go .", "beam_size": 1.5}, ("beam_size",), "integer"),
        ({"text": "go .", "beam_size": True}, ("beam_size",), "integer"),
        ({"text": "go .", "run": "../../etc/passwd"}, ("run",), "unknown run"),
        ({"text": "go .", "run": "nope"}, ("run",), "transformer, bahdanau"),
        ({"text": "go .", "run": 3}, ("run",), "string"),
        ({"text": "go .", "colour": "red"}, ("colour",), "not permitted"),
        ({"text": "go\u0000 home"}, ("text",), "U+0000 at position 2"),
        ({"text": "go \u001b[31mhome"}, ("text",), "U+001B"),
        ({"text": "go \u202ehome"}, ("text",), "U+202E"),
        ({"text": "go \ufffe"}, ("text",), "U+FFFE"),
    ],
)
def test_bad_fields(client, body, loc, needle):
    detail = _field_error(client.post("/api/translate", json=body), loc)
    assert any(needle in d["msg"] for d in detail), detail


@pytest.mark.parametrize("raw", [b'{"text": "a\\ud800b"}', b'{"text": "\\udfff"}', b'{"text": "\\ud83d"}'])
def test_lone_surrogates_escaped_in_json(client, raw):
    r = _post(client, raw)
    _field_error(r, ("text",))
    r.content.decode("utf-8")  # the error itself is valid UTF-8


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b'{"text": "go .",}',
        b'{"text": "go .',
        b"[1, 2]",
        b'"go ."',
        b"null",
        b"\xff\xfe\x00",
        b'{"text": "\xc3\x28"}',
        b"{" * 5000,
    ],
)
def test_malformed_bodies(client, raw):
    r = _post(client, raw)
    assert 400 <= r.status_code < 500, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, list) and detail[0]["loc"][0] == "body" and detail[0]["msg"]


def test_wrong_content_type_is_refused(client):
    r = _post(client, b"text=go", "application/x-www-form-urlencoded")
    assert 400 <= r.status_code < 500


def test_oversized_body_is_413_before_parsing(client):
    big = json.dumps({"text": "go . " * 10_000}).encode()
    r = _post(client, big)
    assert r.status_code == 413 and "limit is 16384 bytes" in r.json()["detail"][0]["msg"]

    def chunks():  # no Content-Length: the limit still holds
        for _ in range(40):
            yield b" " * 1024

    r = client.post("/api/translate", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


@pytest.mark.parametrize(
    "text", ["😀😀", "你好世界", "שלום עולם", "مرحبا", "e\u0301te\u0301", "ﬁ ß İ", "\u200b"]
)
def test_odd_but_valid_unicode_never_500(client, text):
    r = client.post("/api/translate", json={"text": text})
    if text.strip() and text != "\u200b":
        assert r.status_code == 200, r.text
        d = r.json()
        assert d["src_tokens"][-1] == "<eos>"
    else:
        assert r.status_code in (200, 422)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"text": st.text(max_size=60)},
        optional={
            "beam_size": st.integers(-3, 12) | st.text(max_size=3) | st.none(),
            "run": st.sampled_from(["transformer", "bahdanau", "x", ""]) | st.none(),
        },
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
def test_random_json_never_500(client, body):
    r = client.post(
        "/api/translate", content=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    assert r.status_code < 500, r.text
    if r.status_code == 200:
        assert {"translation", "src_tokens", "tgt_tokens", "attention"} <= set(r.json())
    else:
        assert r.json()["detail"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=80))
def test_random_bytes_never_500(client, raw):
    assert _post(client, raw).status_code < 500


# ------------------------------------------------------------------------------ a list of sentences


def test_a_list_of_sentences_gets_one_translation_each_in_order(client):
    texts = ["twenty one", "three hundred", "seven", "twenty one"]
    r = client.post("/api/translate", json={"text": texts, "beam_size": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [t["source"] for t in body["translations"]] == texts and body["beam_size"] == 2
    singles = [client.post("/api/translate", json={"text": t, "beam_size": 2}).json()["translation"] for t in texts]
    assert [t["translation"] for t in body["translations"]] == singles  # batched == one by one
    assert all({"finished", "truncated", "unknown_words", "warnings"} <= set(t) for t in body["translations"])
    assert "attention" not in body


@pytest.mark.parametrize(
    "body,loc,needle",
    [
        ({"text": []}, ("text",), "empty list"),
        ({"text": ["go .", 5]}, ("text",), "text[1] should be a string"),
        ({"text": ["go .", ""]}, ("text",), "text[1] should have at least 1"),
        ({"text": ["go .", "a" * 301]}, ("text",), "at most 300"),
        ({"text": ["go .", "go\u0000 home"]}, ("text",), "text[1]: text has the control character U+0000"),
        ({"text": ["go ."] * 33}, ("text",), "the limit is 32"),
        ({"text": ["go ."], "kind": "cross"}, ("kind",), "one sentence"),
        ({"text": ["go ."], "encoding": "uint8"}, ("encoding",), "one sentence"),
    ],
)
def test_bad_lists(client, body, loc, needle):
    detail = _field_error(client.post("/api/translate", json=body), loc)
    assert any(needle in d["msg"] for d in detail), detail
