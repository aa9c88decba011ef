"""One attention capture (Translator.attention over teacher_forced), one JSON schema, one probes reader,
one token-label helper, and what inspection asks of the model's traits instead of its kind name."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab import config as C
from attnlab.analysis.heads import attention_modules
from attnlab.data import corpus
from attnlab.data.vocab import load_tokenizer
from attnlab.errors import AttnlabError
from attnlab.maps import attention_json, attention_payload, map_axes
from attnlab.models import build_model, traits
from attnlab.runs import read_run
from attnlab.runs.probes import read_probes
from attnlab.training.sizing import family
from attnlab.training.validation import record_probes
from attnlab.translator import Translator, decode_many, teacher_forced, token_labels
from tests.conftest import tiny_config

ATTN_KINDS = ("transformer", "bahdanau", "decoder-only")
SENTENCE = "three hundred and forty two"


def _untrained(tiny_runs, kind: str, *extra: str, seed: int = 0) -> Translator:
    """An untrained model with a tiny run's tokenizers: it rarely says <eos>, so outputs hit the limit."""
    files = read_run(tiny_runs(kind))
    cfg = C.apply_overrides(files.config, ["decode.max_len_b=7", *extra])
    src, tgt = load_tokenizer(files.tokenizers["src"]), load_tokenizer(files.tokenizers["tgt"])
    torch.manual_seed(seed)
    return Translator(build_model(cfg.model, len(src), len(tgt)), src, tgt, cfg, torch.device("cpu"))


def test_token_labels_end_with_eos_only_when_asked(tiny_runs):
    tok = Translator.from_run(tiny_runs("transformer")).src_tok
    ids = tok.encode("twenty one")
    assert token_labels(tok, ids) == tok.tokens("twenty one") + ["<eos>"]
    assert token_labels(tok, ids, eos=False) == tok.tokens("twenty one")


@pytest.mark.parametrize("kind", ATTN_KINDS)
@pytest.mark.parametrize("max_len", [None, 2])
def test_translator_maps_are_the_teacher_forced_pass_cut_to_their_labels(tiny_runs, kind, max_len):
    tr = _untrained(tiny_runs, kind)
    res = tr.attention(SENTENCE, max_len=max_len)
    n_out = len(res.tgt_tokens)
    assert len(res.tgt_inputs) == n_out and res.tgt_inputs[0] == "<bos>"
    if max_len == 2:
        assert n_out <= 2
    for name, w in res.attention.items():
        queries, keys, outputs = map_axes(res, name)
        assert w.shape[-2:] == (len(queries), len(keys)), name
        if outputs is not None:
            assert len(outputs) == len(queries)
    # the same weights as one teacher-forced pass over the chosen output, with its unkept query cut
    ids, _ = tr.encode_source(SENTENCE)
    hyp = decode_many(tr.model, [ids], tr.cfg.decode, tr.device, max_len=max_len)[0][0]
    from attnlab.data.batching import collate

    raw = teacher_forced(tr.model, collate([ids], [hyp.tokens], [0]), tr.device).attention
    for name, w in res.attention.items():
        torch.testing.assert_close(w, raw[name][0, ..., : w.shape[-2], : w.shape[-1]].float(), rtol=0, atol=0)


def test_teacher_forced_restores_the_mode(tiny_runs):
    tr = _untrained(tiny_runs, "transformer")
    tr.model.train()
    from attnlab.data.batching import collate

    out = teacher_forced(tr.model, collate([[5, 6]], [[7]], [0]), tr.device)
    assert tr.model.training and set(out.attention) == {"enc_self", "dec_self", "cross"}


def test_decode_many_restores_the_mode_when_decoding_raises(tiny_runs):
    tr = _untrained(tiny_runs, "transformer")
    tr.model.train()

    def broken(*a, **k):
        raise RuntimeError("boom")

    tr.model.step = broken
    with pytest.raises(RuntimeError):
        decode_many(tr.model, [[5, 6]], tr.cfg.decode, tr.device)
    assert tr.model.training


@pytest.mark.parametrize("kind", ATTN_KINDS)
def test_one_schema_for_the_page_and_the_file(tiny_runs, kind):
    tr = _untrained(tiny_runs, kind)
    res = tr.attention(SENTENCE, extra_pad=2)
    page = attention_payload(res)
    doc = json.loads(json.dumps(attention_json(res)))
    assert doc["kinds"] == json.loads(json.dumps(page))  # the file holds the page's schema
    assert doc["src_tokens"] == res.src_tokens and doc["src_tokens"][-2:] == ["<pad>", "<pad>"]
    for name, a in page.items():
        queries, keys, outputs = map_axes(res, name)
        assert (a["queries"], a["keys"], a["outputs"]) == (queries, keys, outputs)
        assert a["boundary"] == (len(res.src_tokens) if name == "self" else None)
        assert a["shape"] == [a["layers"], a["heads"], len(queries), len(keys)]
        assert (a["layers"], a["heads"]) == (traits(tr.cfg).attention[name], traits(tr.cfg).heads)


def test_map_axes_names_the_known_kinds_only():
    class R:
        src_tokens, tgt_tokens, tgt_inputs = ["a", "<eos>"], ["x", "<eos>"], ["<bos>", "x"]

    assert map_axes(R, "cross") == (["<bos>", "x"], ["a", "<eos>"], ["x", "<eos>"])
    assert map_axes(R, "self")[2] == ["", "", "x", "<eos>"]
    with pytest.raises(AttnlabError, match="unknown attention kind"):
        map_axes(R, "luong")


def _line(step, sentence="go .", cross=None):
    rec = {"step": step, "sentence": sentence, "translation": "va !", "src_tokens": ["go", ".", "<eos>"],
           "tgt_tokens": ["va", "<eos>"], "attention": {"cross": cross or [[[0.5, 0.25, 0.25, 0.0]] * 2]}}
    return json.dumps(rec) + "\n"


def test_read_probes_groups_orders_and_skips_what_it_cannot_read(tmp_path):
    assert read_probes(tmp_path) == {"sentences": [], "truncated": False}  # no file: no sentences
    lines = [_line(5), _line(0), _line(5, cross=[[[1.0, 0.0, 0.0, 0.0]] * 2]), _line(3, "nine"),
             '{"step": "x", "sentence": "go .", "attention": {}}\n', '{"step": 9, "sent']
    (tmp_path / "probes.jsonl").write_text("".join(lines))
    t = read_probes(tmp_path)
    assert [s["sentence"] for s in t["sentences"]] == ["go .", "nine"] and not t["truncated"]
    steps = t["sentences"][0]["steps"]
    assert [r["step"] for r in steps] == [0, 5]
    assert steps[1]["attention"]["cross"][0][0] == [1.0, 0.0, 0.0]  # the latest record of step 5, unpadded
    cut = read_probes(tmp_path, max_bytes=len(lines[-1]) + len(lines[-2]) + len(lines[-3]) + 5)
    assert cut["truncated"] and [s["sentence"] for s in cut["sentences"]] == ["nine"]  # the newest lines


def test_record_probes_are_the_translators_maps_and_the_decoders_weights(tiny_runs, tmp_path):
    tr = _untrained(tiny_runs, "transformer", "train.probe_sentences=twenty one,three hundred")
    prepared = corpus.prepare(tr.cfg.data, tokenizers=(tr.src_tok, tr.tgt_tok))
    tr.model.train()
    record_probes(tr.model, prepared, tr.cfg, tr.device, tmp_path, 7)
    assert tr.model.training  # training goes on with dropout
    recs = [json.loads(x) for x in (tmp_path / "probes.jsonl").read_text().splitlines()]
    assert [r["sentence"] for r in recs] == ["twenty one", "three hundred"] and {r["step"] for r in recs} == {7}
    for r in recs:
        ids = tr.src_tok.encode(r["sentence"])
        hyp = decode_many(tr.model, [ids], tr.cfg.decode, tr.device, need_weights=True)[0][0]
        assert r["src_tokens"] == token_labels(tr.src_tok, ids)
        assert r["tgt_tokens"] == token_labels(tr.tgt_tok, hyp.tokens, eos=hyp.finished)
        assert list(r["attention"]) == list(hyp.attention)  # the kinds decoding sees: dec_self, cross
        for kind, w in hyp.attention.items():  # (L, H, T_out, keys) as the decoder used them
            got = torch.tensor(r["attention"][kind])
            torch.testing.assert_close(got, w.float().mean(dim=1), rtol=0, atol=1.5e-4)


@pytest.mark.parametrize("kind", ["transformer", "decoder-only", "bahdanau", "seq2seq"])
def test_heads_find_the_attention_modules_the_traits_name(kind):
    cfg = tiny_config(kind, "model.num_layers=2", "model.num_heads=4").model
    model = build_model(cfg, 40, 50)
    t = traits(cfg)
    if kind in ("bahdanau", "seq2seq"):
        with pytest.raises(AttnlabError, match="additive attention" if kind == "bahdanau" else "no attention"):
            attention_modules(model)
        return
    modules = attention_modules(model)
    assert list(modules) == list(t.attention)
    for name, mods in modules.items():
        assert len(mods) == t.attention[name] and all(m.num_heads == t.heads for m in mods)
        assert len({id(m) for m in mods}) == len(mods)
    if kind == "transformer":
        assert modules["cross"][1] is model.decoder_blocks[1].cross_attention


def test_sizing_family_follows_the_traits():
    assert {k: family(tiny_config(k).model) for k in ("seq2seq", "bahdanau", "transformer", "decoder-only")} == {
        "seq2seq": "gru", "bahdanau": "gru", "transformer": "transformer", "decoder-only": "transformer"}


def test_slug_gives_distinct_sentences_distinct_names_in_any_script():
    """Figure names (``<slug>_<kind>.png``): an all-Chinese sentence once slugged to ``sentence`` like every
    other, so the next one overwrote its figures; punctuation or case alone must not merge two names either."""
    from attnlab.maps import slug

    sentences = ["我回家了", "我回家了。", "我回家了！", "他很冷静。", "go", "Go .", "go .", "i'm home .", "i m home",
                 "Ça va ?", "ça va", "。。", "？", "x" * 60, "x" * 61]
    names = [slug(s) for s in sentences]
    assert len(set(names)) == len(sentences), names
    assert slug("我回家了") == "我回家了" and slug("go") == "go"  # nothing lost: no hash
    assert slug("我回家了。").startswith("我回家了-") and slug("i'm home .").startswith("i-m-home-")
    assert slug("i'm  home . ") == slug("i'm home .")  # spacing alone is the same sentence
    assert all(len(n.encode("utf-8")) < 200 and "/" not in n and "_" not in n for n in names)
