"""Decoding options shared by every decoding command, `serve` included: `attnlab serve --beam …` sets every
request's defaults from the one DECODE_OPTIONS table, and POST /api/translate takes per-request settings by
their decode.* keys, checked as on the command line, capped by the server's limits."""

from __future__ import annotations

import dataclasses

import pytest

from attnlab import translator as translator_mod
from attnlab.cli import main
from attnlab.config import DECODE_OPTIONS
from attnlab.translator import Translator
from attnlab.web.schemas import REQUEST_DECODE_KEYS, SERVER_DECODE_KEYS


@pytest.fixture
def decoded(monkeypatch):
    """Every DecodeConfig the decoder is handed (with the beam and n-best it is asked for), in order."""
    seen: list[tuple] = []
    real = translator_mod.decode_many

    def spy(model, src_seqs, dcfg, device, beam_size=None, nbest=1, **kw):
        seen.append((dcfg, beam_size, nbest))
        return real(model, src_seqs, dcfg, device, beam_size=beam_size, nbest=nbest, **kw)

    monkeypatch.setattr(translator_mod, "decode_many", spy)
    return seen


#: one request's settings per option of the table (the batch keys are the server's alone)
SETTINGS = [
    {"beam_size": 3},
    {"beam_size": 3, "nbest": 2},
    {"beam_size": 2, "length_penalty": 0.0},
    {"max_len_a": 0.0, "max_len_b": 2},
    {"no_repeat_ngram_size": 1},
    {"sampling": True, "sampling_topk": 3, "temperature": 0.7, "seed": 11},
]


def test_every_request_key_is_an_option_of_the_table():
    keys = [key for _option, key, _kind, _help in DECODE_OPTIONS]
    assert set(REQUEST_DECODE_KEYS) | set(SERVER_DECODE_KEYS) == set(keys)
    assert {k for s in SETTINGS for k in s} == set(REQUEST_DECODE_KEYS)  # each is tried below


@pytest.mark.parametrize("as_list", [False, True], ids=["sentence", "list"])
@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(s))
def test_each_request_setting_reaches_the_decoder(client, decoded, settings, as_list):
    text = "seventy three"
    r = client.post("/api/translate", json={"text": [text] if as_list else text, **settings})
    assert r.status_code == 200, r.text
    dcfg, beam, nbest = decoded[-1]
    for key, value in settings.items():
        assert getattr(dcfg, key) == value, key
    assert beam == settings.get("beam_size", 1)
    assert nbest == settings.get("nbest", 1)
    assert {k: r.json()["decode"][k] for k in settings} == settings  # the answer says what it used


def test_nbest_hypotheses_are_translate_jsonl_records(client, tiny_runs):
    """n-best from the API: the records of `translate --nbest K --format jsonl`, equal to translate_full's."""
    tr = Translator.from_run(tiny_runs("transformer"))
    want = tr.translate_full(["forty two"], beam_size=3, nbest=3)[0]
    d = client.post("/api/translate", json={"text": "forty two", "beam_size": 3, "nbest": 3}).json()
    assert d["hypotheses"] == [t.record(rank) for rank, t in enumerate(want, 1)]
    assert [h["rank"] for h in d["hypotheses"]] == [1, 2, 3]
    scores = [h["score"] for h in d["hypotheses"]]
    assert scores == sorted(scores, reverse=True) and d["translation"] == d["hypotheses"][0]["text"]
    assert set(d["hypotheses"][0]) == {"rank", "score", "log_prob", "length", "finished", "text", "tokens"}
    batch = client.post("/api/translate", json={"text": ["forty two"], "beam_size": 3, "nbest": 3}).json()
    assert batch["translations"][0]["hypotheses"] == d["hypotheses"]


def test_sampled_requests_are_the_translators_samples(client, tiny_runs):
    tr = Translator.from_run(tiny_runs("transformer"))
    dcfg = dataclasses.replace(tr.cfg.decode, sampling=True, nbest=3, seed=5, temperature=1.5)
    want = tr.translate_full(["sixty"], nbest=3, decode=dcfg)[0]
    d = client.post("/api/translate", json={"text": "sixty", "sampling": True, "nbest": 3, "seed": 5,
                                            "temperature": 1.5}).json()
    assert [h["text"] for h in d["hypotheses"]] == [t.text for t in want]


def test_max_len_b_caps_the_output(client):
    d = client.post("/api/translate", json={"text": "three hundred and four", "max_len_a": 0, "max_len_b": 2}).json()
    assert len(d["tgt_tokens"]) <= 2 and d["max_len"] == 160  # a·S + b below the server's output limit


def test_defaults_are_unchanged(client, tiny_runs, decoded):
    tr = Translator.from_run(tiny_runs("transformer"))
    d = client.post("/api/translate", json={"text": "ninety nine"}).json()
    assert d["beam_size"] == 1 and "hypotheses" not in d
    assert decoded[-1] == (tr.cfg.decode, 1, 1)  # the run's own decode section, greedy
    assert d["translation"] == tr.translate_full(["ninety nine"])[0][0].text


@pytest.mark.parametrize(
    "settings, loc, needle",
    [
        ({"beam_size": 99}, "beam_size", "beam_size: Input should be less than or equal to 8"),
        ({"beam_size": 4, "nbest": 9}, "nbest", "nbest: Input should be less than or equal to 8"),
        ({"nbest": 3}, "nbest", "decode.nbest=3 must lie between 1 and decode.beam_size=1"),
        ({"length_penalty": 9}, "length_penalty", "decode.length_penalty=9.0 must lie between 0 and 5"),
        ({"length_penalty": "0.6"}, "length_penalty", "valid number"),
        ({"max_len_b": 0}, "max_len_b", "decode.max_len_b=0 must lie between 1 and 10000"),
        ({"no_repeat_ngram_size": -1}, "no_repeat_ngram_size", "decode.no_repeat_ngram_size must be >= 0"),
        ({"temperature": 0.5}, "temperature", "add --sampling (decode.sampling=true)"),
        ({"sampling": True, "beam_size": 2}, "beam_size", "needs decode.beam_size=1"),
        ({"sampling": "yes"}, "sampling", "valid boolean"),
        ({"seed": 2**70}, "seed", "decode.seed=1180591620717411303424 must fit in 64 bits"),
        ({"batch_size": 4}, "batch_size", "the server's setting (`attnlab serve --batch-size`)"),
        ({"beam": 4}, "beam", 'did you mean "beam_size"?'),
    ],
)
def test_bad_settings_are_one_line_422s_naming_the_key(client, settings, loc, needle):
    r = client.post("/api/translate", json={"text": "seven", **settings})
    assert r.status_code == 422, r.text
    (item,) = r.json()["detail"]
    assert item["loc"] == ["body", loc] and needle in item["msg"] and "\n" not in item["msg"], item


def _serve(monkeypatch, *argv: str):
    """`attnlab serve ARGV` up to the point it would serve: its exit status and the app it built."""
    from attnlab.web import serving

    seen = {}

    def fake_serve(app, host, port, limits, log_level="info", sock=None):
        seen["app"] = app
        sock.close()

    monkeypatch.setattr(serving, "serve", fake_serve)
    return main(["serve", *argv, "--port", "0"]), seen.get("app")


@pytest.mark.parametrize("argv, want", [
    (["--beam", "3", "--nbest", "2", "--length-penalty", "0.5", "--max-len-a", "0", "--max-len-b", "3",
      "--no-repeat-ngram-size", "2", "--batch-size", "4", "--max-tokens", "100"],
     {"beam_size": 3, "nbest": 2, "length_penalty": 0.5, "max_len_a": 0.0, "max_len_b": 3,
      "no_repeat_ngram_size": 2, "batch_size": 4, "max_tokens": 100}),
    (["decode.nbest=2", "--sampling", "--sampling-topk", "3", "--temperature", "0.5", "--seed", "9"],
     {"sampling": True, "sampling_topk": 3, "temperature": 0.5, "seed": 9, "nbest": 2}),
])
def test_serve_options_are_every_requests_defaults(tiny_runs, monkeypatch, decoded, argv, want):
    from fastapi.testclient import TestClient

    code, app = _serve(monkeypatch, str(tiny_runs("transformer")), *argv)
    assert code == 0
    with TestClient(app, base_url="http://127.0.0.1") as c:
        r = c.post("/api/translate", json={"text": "eighty"})
        assert r.status_code == 200, r.text
        dcfg = decoded[-1][0]
        assert {k: getattr(dcfg, k) for k in want} == want
        assert len(r.json()["hypotheses"]) == 2
        r = c.post("/api/translate", json={"text": "eighty", "nbest": 1, "seed": 4})  # a request's own wins
        assert (decoded[-1][0].nbest, decoded[-1][0].seed) == (1, 4) and "hypotheses" not in r.json()


@pytest.mark.parametrize("argv, needle", [
    (["--beam", "16"], "decode.beam_size=16 is more than --max-beam 8 allows"),
    (["--beam", "4", "--max-beam", "2"], "decode.beam_size=4 is more than --max-beam 2 allows"),
    (["--length-penalty", "9"], "decode.length_penalty=9.0 must lie between 0 and 5"),
    (["--temperature", "0.5"], "decode.sampling=true"),
    (["model.num_layers=3"], "only decode.* settings apply"),
])
def test_serve_refuses_bad_decode_options_in_one_line(tiny_runs, monkeypatch, capsys, argv, needle):
    code, app = _serve(monkeypatch, str(tiny_runs("transformer")), *argv)
    err = capsys.readouterr().err
    assert code == 2 and app is None
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1, err
