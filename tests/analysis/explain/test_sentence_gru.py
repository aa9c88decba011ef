"""explain on the GRU models (notes §1–3, §6–7): the gates per unit and step, the gates heatmap, Bahdanau's
context vectors c_t' = Σ α h_t, and the "not formed" note — checked against the trained model itself."""

from __future__ import annotations

import json
import re

import pytest
import torch

from attnlab import cli
from attnlab.analysis.explain.sentence import gate_tracks, gates_figure, run, scratch_gru_copy
from attnlab.analysis.report import Report
from attnlab.data.batching import collate
from attnlab.translator import Translator, decode_many, teacher_forced, token_labels


def _tracks(tr: Translator, sentence: str):
    """Gate tracks of ``sentence`` decoded greedily by the recording copy, and the ids it decoded."""
    model = scratch_gru_copy(tr)
    ids, _ = tr.encode_source(sentence)
    hyp = decode_many(model, [ids], tr.cfg.decode, tr.device, beam_size=1)[0][0]
    inputs = token_labels(tr.tgt_tok, [2, *hyp.tokens], eos=False)[: len(hyp.tokens) + int(hyp.finished)]
    return gate_tracks(model, tr.cfg.model.bidirectional, token_labels(tr.src_tok, ids), inputs), ids, hyp


@pytest.mark.parametrize("kind", ["bahdanau", "seq2seq"])
def test_gate_tracks_are_the_trained_models_own_states(tiny_runs, kind):
    tr = Translator.from_run(tiny_runs(kind), which="last")
    tracks, ids, hyp = _tracks(tr, "twenty one")
    enc, dec = tracks["encoder"], tracks["decoder"]
    D = tr.cfg.model.num_hiddens
    assert enc.z.shape == (D, len(ids) + 1) and dec.z.shape[0] == D
    # The encoder's h_t are nn.GRU's outputs (the trained model, not the scratch copy) ...
    src = torch.tensor([ids + [3]])
    with torch.inference_mode():
        outputs, _ = tr.model.encoder(src, torch.tensor([len(ids) + 1]))
    torch.testing.assert_close(enc.h, outputs[0].T, atol=1e-5, rtol=1e-5)
    # ... and the decoder's h_t are the states the teacher-forced pass over the same output computes.
    batch = collate([ids], [list(hyp.tokens)], [0])
    n = dec.h.shape[1]
    if getattr(tr.model, "after_step", False):  # W_o reads tanh(W_c [s; c]): the GRU's own states, run alone
        with torch.inference_mode():
            state = tr.model.init_state(tr.model.encode(batch.src, batch.src_valid_lens), batch.src_valid_lens)
            states, _ = tr.model.decoder(tr.model.tgt_embedding(batch.tgt_in), state.hidden)
    else:
        states = teacher_forced(tr.model, batch, tr.device, need_weights=False).hidden
    torch.testing.assert_close(dec.h, states[0, :n].T, atol=1e-5, rtol=1e-5)
    # §7: every gate in (0, 1), candidate and state in (−1, 1), h_t = z ⊙ h_t−1 + (1 − z) ⊙ h̃_t
    assert ((enc.z > 0) & (enc.z < 1)).all() and ((dec.r > 0) & (dec.r < 1)).all()
    assert (dec.h_tilde.abs() < 1).all() and (enc.h.abs() < 1).all()
    h_prev = torch.cat([torch.zeros(D, 1), enc.h[:, :-1]], dim=1)
    torch.testing.assert_close(enc.z * h_prev + (1 - enc.z) * enc.h_tilde, enc.h, atol=1e-6, rtol=1e-6)


def test_gates_figure_draws_every_gate_of_both_grus(tiny_runs):
    tr = Translator.from_run(tiny_runs("bahdanau"), which="last")
    tracks, _, _ = _tracks(tr, "twenty one")
    fig = gates_figure(tracks)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 8  # (encoder, decoder) × (z, r, h̃, h)
    torch.testing.assert_close(torch.as_tensor(images[0].get_array()), tracks["encoder"].z, check_dtype=False)
    assert [im.get_clim() for im in images[:4]] == [(0.0, 1.0), (0.0, 1.0), (-1.0, 1.0), (-1.0, 1.0)]


def test_explain_shows_units_context_vectors_and_writes_gates_png(tiny_runs, tmp_path, capsys):
    tr = Translator.from_run(tiny_runs("bahdanau"), which="last")
    assert cli.main(["explain", str(tiny_runs("bahdanau")), "twenty one", "--checkpoint", "last",
                     "--save-dir", str(tmp_path)]) == 0
    text = capsys.readouterr().out  # the report's text, then the path of its figure
    [png] = tmp_path.glob("twenty-one*_gates.png")  # one figure per sentence (and checkpoint): gates.png was shared
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and str(png) in text
    assert "r_t ⊙ (W_hh h_t−1 + b_hh)" in text and "W_hh (r_t ⊙ h_t−1)" in text  # both placements named
    rows = re.findall(r"step +\d+ +\S+: z \[([^\]]*)\]  r \[[^\]]*\]  h̃ \[[^\]]*\]  h \[[^\]]*\]", text)
    assert rows and all(len(r.split()) == 3 for r in rows)  # three units per step
    contexts = re.findall(r"context c_(\d+) = \[.*\] \((\d+) dims\), ‖c‖ = ([0-9.]+)", text)
    steps = re.findall(r"^  step (\d+): input", text, flags=re.M)
    assert len(contexts) == len(steps) >= 1 and all(int(d) == tr.cfg.model.num_hiddens for _, d, _ in contexts)
    gap = float(re.search(r"own output: max \|Δ\| = ([0-9.e+-]+)", text).group(1))
    assert gap < 1e-5  # Σ α h_t from the shown weights is what the attention module returned
    assert "movement" not in text  # how much the rows change is no verdict (evaluation/alignment.py)
    # beside the map: each output's argmax and its integrated-gradients row; no table for this sentence
    looks = re.findall(r"^    (\S+) +(\S+) ([0-9.]+) +(\S+) (\d+)%$", text, flags=re.M)
    result = tr.attention("twenty one")
    assert [o for o, *_ in looks] == result.tgt_tokens
    w = result.attention["cross"][0, 0]  # (T, S): Bahdanau's one map
    assert [s for _, s, *_ in looks] == [result.src_tokens[int(i)] for i in w.argmax(-1)]
    assert "no verdict on this sentence" in text and "(AER)" in text and "why attention can sit still (§1)" in text


def test_seq2seq_explain_has_gates_but_no_context_vectors(tiny_runs):
    text = run(Translator.from_run(tiny_runs("seq2seq"), which="last"), "twenty one").format()
    assert "GRU gates" in text and "context c_" not in text and "attention movement" not in text


def test_explain_holds_the_notes_example_against_the_table_and_says_why_attention_can_sit_still(notes_run):
    from attnlab.evaluation.alignment import check_result

    tr = Translator.from_run(notes_run)
    report = run(tr, "i'm home .")
    text = report.format()
    check = check_result(tr.attention("i'm home ."))
    assert check.judged == 6 and text.count(check.summary()) == 1  # the whole table: . and <eos> too
    assert "depends on (integrated gradients, 16 steps)" in text and "recurrent state" in text
    assert report.to_json()["depends"]["alignment"]["formed"] is check.formed


@pytest.mark.parametrize("kind", ["bahdanau", "transformer"])
def test_run_answers_through_the_report_protocol(tiny_runs, kind):
    """explain's run -> a Report: the walk-through as text in the language asked (for that call only), the
    GRU's gates as its figure (none for a Transformer), and its data as JSON."""
    report = run(Translator.from_run(tiny_runs(kind), which="last"), "twenty one", reference="vingt et un")
    assert isinstance(report, Report)
    text = report.format()
    assert "== 1. tokens → ids" in text and "== 8. loss against the reference" in text
    assert report.format("zh") != text and report.format() == text
    assert (report.figure() is not None) == (kind == "bahdanau")
    data = json.loads(json.dumps(report.to_json()))
    assert data["translation"] == report.translation and len(data["steps"]) == len(report.steps)
    assert data["loss"]["reference"] == "vingt et un" and data["text"] == text


@pytest.mark.parametrize("kind", ["bahdanau", "transformer"])
def test_explain_on_the_notes_size_shows_the_notes_shapes_and_its_own_ids(tmp_path, kind):
    """--size notes (§5–8) trained: (V, 32) embeddings, 32-dim states, W_o (V_tgt, 32) and b_o (V_tgt,) read off
    the model; the §4 sentence about ids uses this run's ids; the §10 line lists the hyperparameters it has."""
    from attnlab.training.loop import train

    run_dir = tmp_path / "notes"
    from attnlab import config as C

    cfg = C.apply_overrides(C.preset(kind), [  # the preset's sizes, so that the tier's are the ones set
        "data.dataset=numbers", "data.numbers_size=400", "data.num_steps=16", "train.size=notes", "train.max_steps=2",
        "train.eval_every=0", "train.eval_frac=0", "train.save_every=0", "train.threads=1", "decode.max_len_b=6"])
    train(cfg, run_dir, progress=False)
    tr = Translator.from_run(run_dir, which="last")
    assert tr.cfg.train.size == "notes" and tr.cfg.model.num_hiddens == 32
    text = run(tr, "twenty one").format()
    V_src, V_tgt = len(tr.src_tok), len(tr.tgt_tok)
    assert f"a trainable lookup table of shape ({V_src}, 32)" in text
    assert f"W_o ({V_tgt}, 32), b_o ({V_tgt},)" in text and "W_o is its own matrix" in text
    ids = tr.encode_source("twenty one")[0]
    small, big = sorted(ids[:2])
    assert re.search(rf"not quantities: {big} \(\S+\) is not 'more' than {small} \(\S+\)", text)
    assert "86" not in text.split("== 2.")[0]  # the notes' ids, never beside this run's
    line = next(x for x in text.splitlines() if "hyperparameters (set by you" in x)
    assert ("num_heads=4" in line) == (kind == "transformer") and "num_hiddens=32" in line
    assert ("embed_size=32" in line) == (kind == "bahdanau") and "tie_embeddings=False" in line
    if kind == "bahdanau":
        assert re.search(r"encoder hidden states h_t +\(1, \d+, 32\)", text)


def test_explain_says_what_the_output_layer_reads(tiny_runs):
    """§8's logits: W_o reads tanh(W_c [s; c]) when Bahdanau queries with the state after its step (the
    preset, as part 7 works it by hand), the decoder state s for the fixed-context seq2seq."""
    for kind, formula in [("bahdanau", "W_o tanh(W_c [s; c]) + b_o"), ("seq2seq", "W_o s + b_o")]:
        tr = Translator.from_run(tiny_runs(kind), which="last")
        assert getattr(tr.model, "after_step", False) is (kind == "bahdanau")
        text = run(tr, "twenty one").format()
        header = next(line for line in text.splitlines() if line.startswith("== 5."))
        table = next(line for line in text.splitlines() if line.strip().startswith("logits "))
        assert f"logits = {formula} (§8)" in header and table.endswith(f"{formula} (§8)"), (header, table)
