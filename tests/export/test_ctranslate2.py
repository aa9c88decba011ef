"""CTranslate2: the converted model decodes as attnlab does (greedy float32: the same tokens)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from attnlab.errors import AttnlabError
from attnlab.export.engine import CT2Translator, load_translator
from attnlab.export.folder import export_run
from attnlab.translator import Translator

pytest.importorskip("ctranslate2")

# (kind, steps, overrides): trained pre-norm/sinusoidal/tied outputs that end with <eos>; untrained
# post-norm/learned/untied outputs that run to the length limit (CTranslate2 cuts them per row).
VARIANTS = {
    "transformer": ("transformer", 150),
    "transformer-postnorm-learned-untied": ("transformer", 1, "model.norm_first=false", "model.positional=learned",
                                            "model.tie_embeddings=false"),
    "decoder-only-untrained": ("decoder-only", 1),
    "decoder-only-postnorm-learned": ("decoder-only", 1, "model.norm_first=false", "model.positional=learned"),
}


def _export(export_runs, tmp_path, name, quantization="float32"):
    run = export_runs(*VARIANTS[name])
    return run, export_run(run, tmp_path / "out", fmt="ctranslate2", quantization=quantization)


def _hyps(tr, sentences, beam=1):
    out = tr.translate_full(sentences, beam_size=beam)
    return [(t[0].tokens, t[0].finished) for t in out]


@pytest.mark.parametrize("name", list(VARIANTS))
def test_float32_greedy_equals_attnlab(export_runs, tmp_path, numbers_sentences, name):
    run, out = _export(export_runs, tmp_path, name)
    ours = Translator.from_run(run, device="cpu")
    ct2 = CT2Translator.from_export(out, device="cpu")
    expected = _hyps(ours, numbers_sentences)
    assert _hyps(ct2, numbers_sentences) == expected
    # Both stopping rules are exercised: the trained model's outputs end with <eos>; some of an
    # untrained one's run to the length limit, which CTranslate2 must cut per row as attnlab does.
    if name == "transformer":
        assert any(f for _, f in expected)
    else:
        assert not all(f for _, f in expected)
    capped = ct2._search([ours.encode_source("seven thousand")[0]], ours.cfg.decode, 1, max_len=2)[0][0]
    assert capped.tokens == ours._search([ours.encode_source("seven thousand")[0]], ours.cfg.decode, 1,
                                         max_len=2)[0][0].tokens


@pytest.mark.slow
def test_trained_decoder_only_greedy_equals_attnlab(export_runs, tmp_path, numbers_sentences):
    run = export_runs("decoder-only", 150)
    out = export_run(run, tmp_path / "out", fmt="ctranslate2")
    assert _hyps(CT2Translator.from_export(out, device="cpu"), numbers_sentences) == _hyps(
        Translator.from_run(run, device="cpu"), numbers_sentences)


def test_int8_runs_and_mostly_agrees(export_runs, tmp_path, numbers_sentences):
    run, out = _export(export_runs, tmp_path, "transformer", quantization="int8")
    ours = Translator.from_run(run, device="cpu").translate(numbers_sentences)
    ct2 = CT2Translator.from_export(out, device="cpu")
    assert ct2.ct2_info["quantization"] == "int8"
    got = ct2.translate(numbers_sentences)
    assert sum(a == b for a, b in zip(ours, got)) >= 0.8 * len(ours), list(zip(ours, got))


def test_beam_nbest_and_attention(export_runs, tmp_path, numbers_sentences):
    run, out = _export(export_runs, tmp_path, "transformer")
    ct2 = CT2Translator.from_export(out, device="cpu")
    res = ct2.translate_full(numbers_sentences[:10], beam_size=4, nbest=3)
    assert all(len(r) == 3 and len({tuple(t.tokens) for t in r}) == 3 for r in res)
    ours = Translator.from_run(run, device="cpu")
    a, b = ours.attention("forty-two"), ct2.attention("forty-two")  # CTranslate2 decodes, PyTorch draws
    assert a.tgt_tokens == b.tgt_tokens and set(a.attention) == set(b.attention) == {"enc_self", "dec_self", "cross"}


def test_refusals(export_runs, tmp_path):
    gru = export_runs("bahdanau", 1)
    with pytest.raises(AttnlabError, match="GRU model; CTranslate2 export covers"):
        export_run(gru, tmp_path / "g", fmt="ctranslate2")
    assert not (tmp_path / "g").exists()
    run = export_runs("transformer")
    with pytest.raises(AttnlabError, match="holds no CTranslate2 model"):
        load_translator(run, device="cpu", engine="ctranslate2")
    plain = export_run(run, tmp_path / "plain")
    with pytest.raises(AttnlabError, match="holds no CTranslate2 model"):
        CT2Translator.from_export(plain, device="cpu")
    assert type(load_translator(plain, device="cpu", engine="auto")) is Translator


def test_without_ctranslate2_one_line_error(export_runs, tmp_path, monkeypatch):
    run, out = _export(export_runs, tmp_path, "transformer")
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import now fails as if not installed
    with pytest.raises(AttnlabError, match=r"pip install 'attnlab\[ct2\]'"):
        load_translator(out, device="cpu", engine="ctranslate2")
    with pytest.raises(AttnlabError, match=r"attnlab\[ct2\]"):
        export_run(run, tmp_path / "again", fmt="ctranslate2")
    assert type(load_translator(out, device="cpu", engine="auto")) is Translator  # serve falls back, with a note


def test_serve_uses_the_engine(export_runs, tmp_path):
    pytest.importorskip("fastapi")
    from attnlab.web.registry import load_runs

    _, out = _export(export_runs, tmp_path, "transformer")
    loaded = load_runs([f"n={out}"], device="cpu")["n"]
    assert isinstance(loaded.translator, CT2Translator) and loaded.info["engine"] == "ctranslate2"
    assert loaded.translator.attention("seven").translation == Translator.from_run(out, device="cpu").translate("seven")


def _attnlab(*args, input=None):
    env = {**os.environ, "ATTNLAB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "attnlab", *args], input=input, capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_cli_export_then_translate_with_ctranslate2(export_runs, tmp_path, numbers_sentences):
    """The issue's check: export --format ctranslate2, then translate OUT --engine ctranslate2 gives the same
    lines as translate RUN, on 20 numbers sentences (and so does the exported folder on attnlab's engine)."""
    run, out = export_runs("transformer"), tmp_path / "out"
    said = _attnlab("export", str(run), str(out), "--format", "ctranslate2")
    assert "ctranslate2/ (float32)" in said
    lines = "\n".join(numbers_sentences[:20]) + "\n"
    expected = _attnlab("translate", str(run), "--device", "cpu", input=lines)
    assert len(expected.splitlines()) == 20 and any(expected.splitlines())
    assert _attnlab("translate", str(out), "--engine", "ctranslate2", "--device", "cpu", input=lines) == expected
    assert _attnlab("translate", str(out), "--device", "cpu", input=lines) == expected
