"""CTranslate2: the converted model decodes as attnlab does (greedy float32: the same tokens; int8: nearly, and
the same on every x86 processor)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

from attnlab.errors import AttnlabError
from attnlab.export.ct2 import INT8_PAIR_BOUND, int8_weights
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


def test_int8_weights_never_saturate():
    """Every neighbouring pair of an int8 row sums to at most 128 (255 · 128 fits an int16), and rounding
    stays within half a step: the rule holds for rows built to break CTranslate2's own (two maxima side by side)."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(40, 33)).astype(np.float32)  # an odd width: the last input has no neighbour
    w[1, 4:6] = 3.0  # a pair of maxima: CTranslate2's 127 / max|w| rounds it to 127 + 127
    w[2] = 0.0
    w[3] = 1e-39  # a tiny row: the scale stays finite
    q, scale = int8_weights(w)
    assert q.dtype == np.int8 and scale.dtype == np.float32 and np.isfinite(scale).all()
    pairs = np.abs(np.pad(q.astype(np.int32), ((0, 0), (0, 1)))).reshape(40, -1, 2).sum(axis=2)
    assert pairs.max() <= INT8_PAIR_BOUND and np.abs(q).max() <= 127
    assert np.all(np.abs(w - q / scale[:, None]) <= 0.5 / scale[:, None] * (1 + 1e-6))
    assert (q[2] == 0).all() and scale[2] == 1


def _int8_and_float(run, tmp_path):
    q8 = export_run(run, tmp_path / "int8", fmt="ctranslate2", quantization="int8")
    return CT2Translator.from_export(q8, device="cpu"), export_run(run, tmp_path / "f32", fmt="ctranslate2")


def _log_probs(model_dir, tr, sources, outputs, **env):
    """CTranslate2's log-probability of every token of ``outputs`` (token lists; here, or in a child with ``env``)."""
    src = [[tr.src_tok.id_to_token(i) for i in tr.encode_source(s)[0]] for s in sources]
    tgt = [list(tokens) for tokens in outputs]
    if env:
        code = ("import json, sys, ctranslate2; d = json.load(sys.stdin); m = ctranslate2.Translator(d['dir'], "
                "device='cpu', intra_threads=1); print(json.dumps([r.log_probs for r in m.score_batch(d['src'], d['tgt'])]))")
        proc = subprocess.run([sys.executable, "-c", code], input=json.dumps({"dir": str(model_dir), "src": src,
                              "tgt": tgt}), capture_output=True, text=True, env={**os.environ, **env}, timeout=120)
        assert proc.returncode == 0, proc.stderr
        rows = json.loads(proc.stdout)
    else:
        import ctranslate2

        rows = [r.log_probs for r in ctranslate2.Translator(str(model_dir), device="cpu", intra_threads=1)
                .score_batch(src, tgt)]
    return np.concatenate([np.asarray(r, dtype=np.float64) for r in rows])


@pytest.mark.slow
def test_int8_agrees_with_attnlab(stable_run, tmp_path, unseen_numbers):
    """int8 greedy is attnlab's float greedy on >= 97 % of the sentences, and 99 % of the tokens' log-probabilities
    are within 0.01 of float32's: attnlab's int8 rounding computes exact integer products on every x86 processor.
    Measured over four seeds of this model: 100 % agreement, 99th percentile 0.002-0.003, whatever the ISA.
    CTranslate2's own rounding saturates without VNNI: there its 99th percentile is 0.05-0.21 (an
    under-trained model that outputs empty strings even agreed on 29 of 60 sentences)."""
    sources, references = zip(*unseen_numbers)
    attnlab = Translator.from_run(stable_run, device="cpu")
    ours, tokens = attnlab.translate(list(sources)), [t[0].tokens for t in attnlab.translate_full(list(sources))]
    assert all(ours) and sum(a == b for a, b in zip(ours, references)) >= 0.95 * len(ours)  # a stable model
    ct2, f32 = _int8_and_float(stable_run, tmp_path)
    assert ct2.ct2_info["quantization"] == "int8" and ct2.ct2_info["int8_pair_bound"] == INT8_PAIR_BOUND
    got = ct2.translate(list(sources))
    same = sum(a == b for a, b in zip(ours, got))
    assert same >= 0.97 * len(ours), [(a, b) for a, b in zip(ours, got) if a != b]
    q8 = _log_probs(tmp_path / "int8" / "ctranslate2", ct2, sources, tokens)
    fp = _log_probs(f32 / "ctranslate2", ct2, sources, tokens)
    assert np.quantile(np.abs(q8 - fp), 0.99) <= 0.01


# What an x86 processor without VNNI computes (the CI's AMD EPYC): CTranslate2's own kernels and oneDNN's
# capped at AVX2, MKL off (CTranslate2 leaves MKL off on non-Intel processors).
NO_VNNI = {"CT2_FORCE_CPU_ISA": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "CT2_USE_MKL": "0"}


@pytest.mark.slow
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86 int8 kernels only")
def test_int8_same_without_vnni(stable_run, tmp_path, unseen_numbers):
    """The int8 model scores the same on this processor as with AVX2 kernels and no VNNI, so a processor with
    VNNI (where no rounding saturates) also checks what one without computes. CTranslate2's own rounding
    differs by 0.19 to 1.3 between the two on the models tried; attnlab's by float noise (< 1e-3)."""
    sources = [s for s, _ in unseen_numbers]
    ct2, _ = _int8_and_float(stable_run, tmp_path)
    outputs = [t[0].tokens for t in ct2.translate_full(sources)]
    here = _log_probs(tmp_path / "int8" / "ctranslate2", ct2, sources, outputs)
    avx2 = _log_probs(tmp_path / "int8" / "ctranslate2", ct2, sources, outputs, **NO_VNNI)
    assert np.abs(here - avx2).max() <= 0.01


def test_compute_type_that_rounds_is_refused(export_runs, tmp_path):
    """CTranslate2 would round a float32 export's weights itself for int8 (or int16 off MKL): refused in one line."""
    _, out = _export(export_runs, tmp_path, "transformer")
    for compute_type in ("int8", "int8_float32", "int16", "auto"):
        with pytest.raises(AttnlabError, match=f"compute type {compute_type} makes CTranslate2 round"):
            CT2Translator.from_export(out, device="cpu", compute_type=compute_type)
    assert CT2Translator.from_export(out, device="cpu", compute_type="float32").translate("seven")
    _, q8 = _export(export_runs, tmp_path / "q", "transformer", quantization="int8")
    assert CT2Translator.from_export(q8, device="cpu", compute_type="int8").ct2_info["compute_type"] == "int8"


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
    with pytest.raises(AttnlabError, match=r"pip install -e '\.\[ct2\]'"):
        load_translator(out, device="cpu", engine="ctranslate2")
    with pytest.raises(AttnlabError, match=r"'\.\[ct2\]'"):
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
