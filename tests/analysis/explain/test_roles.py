"""explain's roles sections (notes §2, §8, §11–12, §17–20): the Query/Key/Value scores worked by hand
equal nn.MultiheadAttention and the models' own weights, the logit by hand equals the model's logit, and
the residual adds printed per layer add up — for pre-norm and for the notes' post-norm."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

from attnlab.analysis.explain import params, sentence
from attnlab.analysis.explain.by_hand import additive_scores, capture, head_scores
from attnlab.attention.masks import masked_softmax
from attnlab.data.batching import collate
from attnlab.data.vocab import Vocab
from attnlab.models import build_model
from attnlab.translator import Translator
from tests.conftest import tiny_config

SRC, TGT = [7, 9, 11, 5], [4, 6, 8]  # ids of one sentence pair (any ids below the tiny vocabularies)


def _captured(kind: str, *extra: str):
    torch.manual_seed(0)
    model = build_model(tiny_config(kind, *extra).model, 20, 20).eval()
    return model, capture(model, collate([SRC], [TGT], [0]), torch.device("cpu"))


def test_in_proj_split_into_heads_is_nn_multiheadattentions_layout():
    """Head h's scores from rows h·Dh:(h+1)·Dh of in_proj's W_q and W_k, softmaxed, equal the weights of
    torch's nn.MultiheadAttention loaded with the same in_proj_weight, and the model's own weights."""
    model, cap = _captured("transformer", "model.num_heads=4")
    mha = model.decoder_blocks[0].cross_attention
    call = cap.of("decoder_blocks.0.cross_attention")[0]
    query, memory = call.args[0], call.args[1]  # (1, T, D), (1, S, D)
    ref = nn.MultiheadAttention(mha.num_hiddens, mha.num_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(mha.in_proj.weight)
        ref.in_proj_bias.copy_(mha.in_proj.bias)
    with torch.no_grad():  # the hooked tensors are inference tensors
        _, ref_w = ref(query, memory, memory, need_weights=True, average_attn_weights=False)  # (1, H, T, S)
    with torch.inference_mode():
        ours = torch.stack([torch.softmax(head_scores(mha, query[0], memory[0], h), dim=-1)
                            for h in range(mha.num_heads)])  # (H, T, S)
    torch.testing.assert_close(ours, ref_w[0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ours, cap.fwd.attention["cross"][0, 0], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("query", ["previous", "current"])
def test_additive_scores_are_the_bahdanau_models_weights(query):
    model, cap = _captured("bahdanau", f"model.attention_query={query}")
    calls = [c for c in cap.calls if c.name == "attention"]
    if query == "previous":  # one additive attention per decoder step (<bos> y1 y2 y3), s(t'−1) each
        assert len(calls) == len(TGT) + 1
        queries = [call.args[0][0, 0] for call in calls]
    else:  # the GRU ran first over the whole target: one call, s(1) … s(T) as its queries
        assert len(calls) == 1 and calls[0].args[0].shape[1] == len(TGT) + 1
        queries = list(calls[0].args[0][0])
    values = calls[0].args[2][0]  # h_t (S, M): keys = values
    for t, q in enumerate(queries):
        with torch.inference_mode():
            alpha = torch.softmax(additive_scores(model.attention, q, values), dim=-1)
        torch.testing.assert_close(alpha, cap.fwd.attention["cross"][0, 0, 0, t], atol=1e-6, rtol=1e-5)


def _floats(pattern: str, text: str) -> list[float]:
    """The groups of ``pattern``'s first match in ``text``, as floats."""
    return [float(x) for x in re.search(pattern, text).groups()]


def _residual_rows(text: str) -> list[tuple[float, ...]]:
    num = r"([0-9.]+)"
    return [tuple(float(v) for v in m if v) for m in re.findall(
        rf"‖X‖ +{num}  ‖Sublayer‖ +{num}  ‖X \+ Sublayer‖ +{num}(?:  ‖LayerNorm\(X \+ Sublayer\)‖ +{num})?", text)]


@pytest.mark.parametrize("kind", ["transformer", "decoder-only", "bahdanau"])
def test_explain_works_step_1_by_hand(tiny_runs, kind):
    tr = Translator.from_run(tiny_runs(kind), which="last")
    text = sentence.run(tr, "twenty one").format()
    assert "== 6. Query, Key, Value" in text and "== 7. one logit by hand" in text
    # the scores' softmax equals the model's weights and the row the decoding section printed
    gaps = re.search(r"max \|Δ\| = ([0-9.e+-]+) against the model's own weights, ([0-9.e+-]+) against", text)
    assert max(float(gaps.group(1)), float(gaps.group(2))) < 1e-5
    row = re.search(r"(?:mean of the \d+ heads|softmax α_t) +([0-9. ]+)   ← step 1", text).group(1).split()
    printed = re.search(r"step 1: input '<bos>'\n    attention \([^)]*\): (.*)", text).group(1)
    keys = re.search(r"^    keys[^\n]*?  +(\S.*)", text, flags=re.M).group(1).split()
    for tok, w in re.findall(r"(\S+) ([0-9.]+)(?:,|$)", printed):  # the top 3 printed, 2 decimals
        assert float(row[keys.index(tok)]) == pytest.approx(float(w), abs=0.0051)
    assert len(row) == len(keys) and sum(float(v) for v in row) == pytest.approx(1.0, abs=5e-3)
    # the logit by hand: W_o[id]·out + b_o[id] = the model's logit, and its softmax is step 1's probability
    dot, bias, hand, model = _floats(r"·out = ([+-][0-9.]+), b_o\[\d+\] = ([+-][0-9.]+) → logit = ([+-][0-9.]+); "
                                     r"the model's logit ([+-][0-9.]+)", text)
    assert hand == pytest.approx(dot + bias, abs=2e-4) and hand == pytest.approx(model, abs=2e-4)
    p_hand = _floats(r"→ p\(.+?\) = ([0-9.]+), the probability", text)[0]
    assert p_hand == pytest.approx(_floats(r"→ chooses .+? \(p = ([0-9.]+)\)", text)[0], abs=1e-3)
    assert "weight tying" in text and "tgt_embedding" in text  # tiny configs tie W_o to the target table
    if kind == "bahdanau":
        assert "k_t = h_t" in text and "no W_v" in text and "residual connections" not in text
    else:
        D, H = tr.cfg.model.num_hiddens, tr.cfg.model.num_heads
        assert f"H = {H} heads of size D/H = {D}/{H} = {D // H}" in text and f"W_k = rows {D}:{2 * D}" in text


@pytest.mark.parametrize("kind", ["transformer", "decoder-only", "bahdanau"])
def test_part_3_has_a_row_for_every_parameter_tensor(tiny_runs, kind):
    """The walk through the network lists the layer holding each of named_parameters(); cross-attention's
    in_proj, read only in slices (W_q on the decoder, W_k and W_v on the memory), with its weight's shape."""
    tr = Translator.from_run(tiny_runs(kind), which="last")
    report = sentence.run(tr, "twenty one")
    rows = {name: (shape, calls) for name, _, shape, calls in report.modules}
    assert {p.rsplit(".", 1)[0] for p, _ in tr.model.named_parameters()} <= set(rows)
    if kind == "transformer":
        D = tr.cfg.model.num_hiddens
        assert rows["decoder_blocks.0.cross_attention.in_proj"] == (f"({3 * D}, {D})", 0)
        walk = report.format().split("== 3.")[1].split("== 4.")[0]
        assert f"weight ({3 * D}, {D}), read in slices by decoder_blocks.0.cross_attention" in walk
        names = [n for n, *_ in report.modules]
        assert names.index("decoder_blocks.0.cross_attention.in_proj") + 1 == names.index(
            "decoder_blocks.0.cross_attention.out_proj")


def test_part_9_cites_bleu_where_the_notes_list_it(tiny_runs):
    """The notes list BLEU in §9's table of things that are not parameters (docs/notes-sections.md), not in
    §21 (training the Transformer)."""
    text = sentence.run(Translator.from_run(tiny_runs("bahdanau"), which="last"), "twenty one").format()
    row = next(line for line in text.split("== 9.")[1].splitlines() if line.strip().startswith("BLEU"))
    assert row.endswith("not differentiable (§9)")


@pytest.mark.parametrize("norm_first", [True, False])
def test_residual_adds_add_up_for_pre_and_post_norm(tmp_path, norm_first):
    from attnlab.training.loop import train

    run = tmp_path / "run"
    train(tiny_config("transformer", f"model.norm_first={str(norm_first).lower()}", "model.num_layers=2",
                      "train.max_steps=2"), run, progress=False)
    text = sentence.run(Translator.from_run(run, which="last"), "twenty one").format()
    placement = "pre-norm" if norm_first else "post-norm (the notes' placement)"
    assert f"this model is {placement} (model.norm_first={str(norm_first).lower()})" in text
    assert f"model.norm_first={str(not norm_first).lower()}" in text  # the other placement, one setting away
    rows = _residual_rows(text)
    assert len(rows) == 2 * 2 + 2 * 3  # 2 encoder layers × (attention, FFN) + 2 decoder layers × 3 sublayers
    assert float(re.search(r"next tensor: max \|Δ\| = ([0-9.e+-]+)", text).group(1)) < 1e-5
    within = [rows[0:2], rows[2:4], rows[4:7], rows[7:10]]  # the sublayers of one block, in order
    for block in within:
        for a, b in zip(block, block[1:]):  # the next sublayer's X is this one's output
            assert b[0] == pytest.approx(a[2] if norm_first else a[3], abs=0.011)
    if norm_first:
        assert "final LayerNorm" in text and all(len(r) == 3 for r in rows)
    else:
        assert all(len(r) == 4 for r in rows) and "(the stack's final LayerNorm)" not in text


def test_an_untied_model_says_W_o_is_its_own_matrix(tmp_path):
    from attnlab.training.loop import train

    run = tmp_path / "untied"
    train(tiny_config("bahdanau", "model.tie_embeddings=false", "train.max_steps=2"), run, progress=False)
    text = sentence.run(Translator.from_run(run, which="last"), "twenty one").format()
    assert "W_o is its own matrix" in text and "weight tying" not in text
    dot, bias, hand, model = _floats(r"·out = ([+-][0-9.]+), b_o\[\d+\] = ([+-][0-9.]+) → logit = ([+-][0-9.]+); "
                                     r"the model's logit ([+-][0-9.]+)", text)
    assert hand == pytest.approx(model, abs=2e-4)
    assert "is tied to the" not in text.split("== 9.")[1]  # the §9 table counts W_o in its own row


def test_module_paths_are_labelled_with_layers_counted_from_1():
    from attnlab.analysis.explain.sentence import _layer_from_1

    assert _layer_from_1("encoder_blocks.0.attention") == "   (layer 1)"
    assert _layer_from_1("decoder_blocks.1.cross_attention.in_proj") == "   (layer 2)"
    assert _layer_from_1("src_embedding") == ""
    from attnlab.i18n import speaking

    with speaking("zh"):  # `explain --lang zh`: the label is Chinese too
        assert _layer_from_1("decoder_blocks.1.cross_attention") == "   （第 2 层）"


class DotScore(nn.Module):
    """A scaled dot-product score in Bahdanau's decoder instead of the additive one: no parameters, and
    the call Bahdanau makes of its attention module (``project_keys``; queries, keys, values, mask)."""

    def project_keys(self, keys):
        return keys

    def forward(self, queries, keys, values, mask=None, projected_keys=None):
        k = keys if projected_keys is None else projected_keys  # (B, K, D)
        weights = masked_softmax(queries @ k.transpose(1, 2) / math.sqrt(k.shape[-1]), mask)  # (B, Q, K)
        return weights @ values, weights


def test_explain_finds_bahdanau_s_attention_module_whatever_its_score():
    """Explain reads the attention module where the model keeps it, not by its class: a Bahdanau model
    whose attention scores by dot product gets its context vectors checked, its Query, Key and Value
    named, and no additive formula it does not compute."""
    torch.manual_seed(0)
    cfg = tiny_config("bahdanau")
    vocab = Vocab.build([["twenty", "one", "thirty"]], "en")
    model = build_model(cfg.model, len(vocab), len(vocab)).eval()
    model.attention = DotScore()
    tr = Translator(model, vocab, vocab, cfg)
    text = sentence.run(tr, "twenty one").format()
    contexts = re.findall(r"context c_\d+ = \[.*\] \((\d+) dims\)", text)
    assert contexts and all(int(d) == cfg.model.num_hiddens for d in contexts)
    assert float(re.search(r"own output: max \|Δ\| = ([0-9.e+-]+)", text).group(1)) < 1e-5  # Σ α h_t
    assert "k_t = h_t" in text and "no W_v" in text and "DotScore" in text and "w_vᵀ tanh" not in text
    assert "context vectors c_t'" in text.split("== 9.")[1]
    assert "context vector c_t'" in {r.name for r in params.run(model).not_parameters}


@pytest.mark.parametrize("kind", ["transformer", "decoder-only"])
def test_the_ffn_is_one_function_at_every_position_and_mixes_no_tokens(tiny_runs, kind):
    """§19 on a trained model: the FFN run position by position equals it run on all positions; reordered
    positions come out reordered; replacing one position's input moves no other position's output, while the
    self-attention of the same layer moves them (it mixes tokens, §12)."""
    from attnlab.analysis.explain.by_hand import ffn_check

    tr = Translator.from_run(tiny_runs(kind), which="last")
    ids = tr.encode_source("twenty one")[0]
    cap = capture(tr.model, collate([ids + [3]], [[4, 5]], [0]), tr.device)
    check = ffn_check(cap)
    assert check.name.endswith("0.ffn") and check.order == list(range(len(check.order)))[::-1]
    assert check.each < 1e-5 and check.perm < 1e-5
    assert check.ffn_mix == 0.0 and check.att_mix > 1e-3
    text = sentence.run(tr, "twenty one").format()
    assert "the FFN mixes none (§19)" in text and "the same function applied at each position" in text


def test_models_without_an_ffn_have_no_ffn_section():
    from attnlab.analysis.explain.by_hand import ffn_check

    model, cap = _captured("bahdanau")
    assert ffn_check(cap) is None
