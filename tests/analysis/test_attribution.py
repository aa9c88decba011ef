"""Beyond raw attention weights (§27.5, §28.5): rollout, Spearman's ρ, gradient attribution and
`attnlab attribute`, on hand-built matrices and on the session's tiny `numbers` runs."""

from __future__ import annotations

import copy
import json
import re
import sys

import pytest
import torch

from attnlab.analysis import attribution as A
from attnlab.analysis.report import Report
from attnlab.cli import main, make_parser
from attnlab.data.batching import collate
from attnlab.models import traits
from attnlab.translator import Translator, decode_many, teacher_forced, token_labels

SENTENCE = "twenty one"


# ------------------------------------------------------------------------------ rank and spearman


def test_rank_gives_ties_their_mean_rank():
    assert A.rank(torch.tensor([10.0, 30.0, 20.0, 30.0, 5.0])).tolist() == [2.0, 4.5, 3.0, 4.5, 1.0]


def test_spearman_is_the_textbook_formula_without_ties():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        a, b = torch.randn(7, generator=g), torch.randn(7, generator=g)
        n, d = 7, A.rank(a) - A.rank(b)
        assert A.spearman(a, b) == pytest.approx(1 - 6 * float((d**2).sum()) / (n * (n * n - 1)))


def test_spearman_reads_only_the_order():
    a = torch.tensor([0.1, 0.5, 0.2, 0.9])
    assert A.spearman(a, a.exp() * 3) == pytest.approx(1.0)
    assert A.spearman(a, -a) == pytest.approx(-1.0)
    assert A.spearman(a, torch.ones(4)) is None  # undefined for a constant row
    assert A.spearman(torch.tensor([1.0]), torch.tensor([2.0])) is None


# ---------------------------------------------------------------------------------------- rollout


def test_rollout_is_the_product_of_the_residual_corrected_layers_on_a_hand_built_example():
    l1h1 = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]
    l1h2 = [[1.0, 0.0, 0.0], [0.1, 0.9, 0.0], [0.6, 0.2, 0.2]]
    l2h1 = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    l2h2 = [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    w = torch.tensor([[l1h1, l1h2], [l2h1, l2h2]], dtype=torch.float64)  # (L=2, H=2, 3, 3)
    # By hand: heads' mean, + I, rows / 2 (each row of the mean sums to 1).
    a1 = [[1.0, 0.0, 0.0], [0.15, 0.85, 0.0], [0.2, 0.125, 0.675]]
    a2 = [[1.0, 0.0, 0.0], [0.25, 0.75, 0.0], [0.25, 0.0, 0.75]]

    def matmul(x, y):
        return [[sum(x[i][k] * y[k][j] for k in range(3)) for j in range(3)] for i in range(3)]

    got = A.rollout(w)
    assert got.shape == (2, 3, 3)
    assert torch.allclose(got[0], torch.tensor(a1, dtype=torch.float64))
    assert torch.allclose(got[1], torch.tensor(matmul(a2, a1), dtype=torch.float64))


def test_rollout_rows_sum_to_one_and_a_causal_stack_stays_causal():
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(4, 3, 6, 6, generator=g)
    causal = torch.ones(6, 6).tril().bool()
    w = scores.masked_fill(~causal, float("-inf")).softmax(-1)  # (L, H, N, N), rows sum to 1
    w[1, :, 2] = 0.0  # a fully masked row (zeros): it becomes the identity's row
    r = A.rollout(w)
    assert torch.allclose(r.sum(-1), torch.ones(4, 6), atol=1e-6)
    assert torch.equal(r[-1].triu(1), torch.zeros(6, 6))  # nothing flows from a later token
    with pytest.raises(ValueError, match="square|N, N"):
        A.rollout(torch.rand(2, 2, 3, 4))


# ------------------------------------------------------------------------------- gradient attribution


@pytest.fixture(scope="module")
def transformer(tiny_runs):
    return Translator.from_run(tiny_runs("transformer"), device="cpu")


@pytest.fixture(scope="module")
def bahdanau(tiny_runs):
    return Translator.from_run(tiny_runs("bahdanau"), device="cpu")


def _greedy_batch(tr: Translator, a: A.Attribution):
    """The teacher-forcing batch of the model's greedy translation, decoded here again."""
    ids = tr.src_tok.encode(SENTENCE)
    hyp = decode_many(tr.model, [ids], tr.cfg.decode, tr.device, beam_size=1)[0][0]
    assert token_labels(tr.tgt_tok, hyp.tokens, eos=hyp.finished) == a.rows
    return collate([ids], [hyp.tokens], [0])


def _log_probs_without_source_words(tr: Translator, a: A.Attribution) -> tuple[torch.Tensor, torch.Tensor]:
    """``f(x)`` and ``f(0)`` computed apart from the attribution code: the model as it is, and a copy whose
    source embedding table is all zeros (every source token then embeds to the baseline)."""
    batch = _greedy_batch(tr, a)
    T = len(a.rows)

    def f(model):
        logp = teacher_forced(model, batch, tr.device, need_weights=False).logits[0, :T].log_softmax(-1)
        return logp.gather(-1, batch.tgt_out[0, :T, None])[:, 0]  # (T,)

    blank = copy.deepcopy(tr.model)
    blank.get_submodule(traits(tr.cfg.model).embeddings[0]).weight.data.zero_()
    return f(tr.model), f(blank)


@pytest.mark.parametrize("which", ["transformer", "bahdanau"])
def test_integrated_gradients_is_complete_within_one_percent(which, request):
    tr = request.getfixturevalue(which)
    # 512 points: the Transformer's ReLUs put kinks on the path, so Gauss–Legendre converges slowly, and a
    # barely trained model's f(x) − f(0) can be a few hundredths of a nat (its 1 % is then tiny).
    a = A.run(tr, SENTENCE, "ig", steps=512)
    fx, f0 = _log_probs_without_source_words(tr, a)
    assert a.scores.shape == (len(a.rows), len(a.cols)) and a.cols[-1] == "<eos>"
    assert torch.allclose(a.logprob, fx, atol=1e-5) and torch.allclose(a.baseline_logprob, f0, atol=1e-5)
    gap = (a.scores.sum(-1) - (fx - f0)).abs()
    assert torch.all(gap <= 0.01 * (fx - f0).abs() + 1e-6), (a.scores.sum(-1), fx - f0)


def test_input_times_gradient_is_the_embedding_times_its_gradient(bahdanau):
    tr = bahdanau
    a = A.run(tr, SENTENCE, "ixg")
    batch = _greedy_batch(tr, a)
    kept = {}

    def keep(_m, _i, out):  # the source embeddings, made a leaf the gradient is taken for
        kept["e"] = out.detach().requires_grad_(True)
        return kept["e"]

    handle = tr.model.get_submodule(traits(tr.cfg.model).embeddings[0]).register_forward_hook(keep)
    try:
        logp = tr.model(batch.src, batch.src_valid_lens, batch.tgt_in).logits[0].log_softmax(-1)  # eval mode
    finally:
        handle.remove()
    for t in range(len(a.rows)):
        (grad,) = torch.autograd.grad(logp[t, batch.tgt_out[0, t]], kept["e"], retain_graph=True)
        assert torch.allclose(a.scores[t], (kept["e"] * grad)[0].sum(-1), atol=1e-5)


def test_attention_is_put_beside_the_attribution_with_its_rank_correlation(transformer, bahdanau):
    a = A.run(transformer, SENTENCE, "ixg")
    T, S = len(a.rows), len(a.cols)
    titles = list(a.compare)
    assert titles[0].startswith("cross-attention, layer 1 of 1") and "rollout" in titles[1]
    cross = transformer.attention(SENTENCE).attention["cross"][-1].mean(0)  # the one capture, again
    assert torch.allclose(a.compare[titles[0]], cross[:T, :S], atol=1e-6)
    assert torch.allclose(a.compare[titles[1]].sum(-1), torch.ones(T), atol=1e-5)  # a rollout's rows sum to 1
    for t in range(T):
        assert a.rho[titles[0]][t] == A.spearman(a.scores[t].abs(), cross[t, :S])
    b = A.run(bahdanau, SENTENCE, "ixg")
    assert list(b.compare) == ["additive attention (Bahdanau)"]
    text = b.format()
    assert "per sentence, additive attention (Bahdanau): ρ = " in text and "top-1 agreement" in text


def test_rollout_of_the_transformer_encoder(transformer):
    r = A.run(transformer, SENTENCE, "rollout")
    (m,) = r.maps
    raw = transformer.attention(SENTENCE).attention["enc_self"]
    assert m.kind == "enc_self" and m.labels[-1] == "<eos>"
    assert torch.allclose(m.rollout, A.rollout(raw)[-1]) and torch.allclose(m.attention, raw[-1].mean(0))
    assert torch.allclose(m.rollout.sum(-1), torch.ones(len(m.labels)), atol=1e-5)
    assert json.loads(json.dumps(r.to_json()))["maps"][0]["kind"] == "enc_self"


def test_what_cannot_be_attributed_says_so_in_one_line(transformer, bahdanau, monkeypatch):
    with pytest.raises(A.AttributionError, match="no stack of self-attention"):
        A.run(bahdanau, SENTENCE, "rollout")
    with pytest.raises(A.AttributionError, match="unknown gradient method"):
        A.run(transformer, SENTENCE, "saliency")
    with pytest.raises(A.AttributionError, match="steps=0"):
        A.run(transformer, SENTENCE, "ig", steps=0)
    with pytest.raises(A.AttributionError, match="no token"):
        A.run(transformer, "   ", "ig")
    monkeypatch.setitem(sys.modules, "captum.attr", None)  # Captum missing: import fails
    with pytest.raises(A.AttributionError, match=r"pip install -e '\.\[explain\]'"):
        A.run(transformer, SENTENCE, "ig")


@pytest.mark.parametrize("method", ["ixg", "rollout"])
def test_run_answers_through_the_report_protocol(transformer, method):
    """run(...) -> a Report whatever the method: the tables as text, the maps drawn, the data as JSON."""
    r = A.run(transformer, SENTENCE, method)
    assert isinstance(r, Report)
    assert r.format().startswith(f"{SENTENCE} → ") and "per sentence" in r.format()
    assert len(r.figure().axes) >= 2
    assert json.loads(json.dumps(r.to_json()))["method"] == method


# -------------------------------------------------------------------------------------------- CLI


def test_attribute_prints_the_tables_and_draws_the_figure(tiny_runs, tmp_path, capsys):
    run = tiny_runs("bahdanau")
    assert main(["attribute", str(run), SENTENCE, "--steps", "8", "--save-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{SENTENCE} → ")
    assert "integrated gradients (8 steps" in out and "f(x)−f(0)" in out
    assert re.search(r"^completeness: \|Σa − \(f\(x\)−f\(0\)\)\| is at most \d+\.\d\d % ", out, re.M)
    assert re.search(r"^output +twenty one <eos> │", out, re.M)  # source tokens across, output tokens down
    assert "per sentence, additive attention (Bahdanau): ρ = " in out
    png = tmp_path / "twenty-one-steps8_ig.png"  # the steps are a setting: a figure per setting
    assert f"wrote {png}" in out and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["attribute", str(tiny_runs("transformer")), SENTENCE, "--method", "rollout", "--json",
                 "--save-dir", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out.split("\nwrote ")[0])
    assert report["method"] == "rollout" and report["maps"][0]["labels"] == ["twenty", "one", "<eos>"]
    assert (tmp_path / "twenty-one_rollout.png").is_file()


def test_the_cli_defaults_to_the_library_s_steps():
    assert make_parser().parse_args(["attribute", "RUN", SENTENCE]).steps == A.DEFAULT_STEPS


def test_attribute_refuses_in_one_line(tiny_runs, tmp_path, capsys):
    run = str(tiny_runs("bahdanau"))
    assert main(["attribute", run, SENTENCE, "--method", "rollout", "--save-dir", str(tmp_path)]) == 2
    assert main(["attribute", run, SENTENCE, "--steps", "0", "--save-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)
    assert "no stack of self-attention" in err[0] and "--steps 0 must be >= 1" in err[1]
