"""Greedy and beam search on real, tiny, untrained attnlab models of every kind.

Skipped cleanly when ``attnlab.models`` cannot be imported (it is written separately).
"""

import pytest
import torch

from attnlab.config import ModelConfig
from attnlab.data.vocab import BOS, EOS, PAD
from attnlab.decoding import BANNED_IDS, beam_search, greedy_search, max_lengths

models = pytest.importorskip("attnlab.models", reason="attnlab.models is not available")

KINDS = ("seq2seq", "bahdanau", "transformer", "decoder-only")
SRC_VOCAB, TGT_VOCAB = 23, 19
ATTENTION = {
    "seq2seq": set(),
    "bahdanau": {"cross"},
    "transformer": {"dec_self", "cross"},
    "decoder-only": {"self"},
}


def tiny_model(kind: str, seed: int = 0):
    torch.manual_seed(seed)
    cfg = ModelConfig(
        kind=kind,
        num_hiddens=16,
        embed_size=16,
        num_layers=2,
        num_heads=2,
        ffn_num_hiddens=32,
        dropout=0.1,
        max_positions=64,
        tie_embeddings=False,
    )
    model = models.build_model(cfg, SRC_VOCAB, TGT_VOCAB)
    with torch.no_grad():  # peakier outputs than a fresh init (fewer near-ties) and some early <eos>
        model.output.weight.normal_(0.0, 2.0)
        model.output.bias.zero_()
        model.output.bias[EOS] = 1.0
    return model.eval()


def batch(seed: int = 1, lens=(3, 7, 1, 5, 9, 2)):
    g = torch.Generator().manual_seed(seed)
    src = torch.full((len(lens), max(lens)), PAD, dtype=torch.int64)
    for i, n in enumerate(lens):
        src[i, : n - 1] = torch.randint(4, SRC_VOCAB, (n - 1,), generator=g)
        src[i, n - 1] = EOS
    return src, torch.tensor(lens)


def teacher_forced(model, src, valid, hyp):
    """Score and attention of ``hyp`` recomputed by the model's parallel (teacher-forced) forward pass."""
    t_out = hyp.length
    labels = (hyp.tokens + [EOS])[:t_out]
    tgt_in = torch.tensor([[BOS] + labels[:-1]])
    with torch.no_grad():
        out = model(src, valid, tgt_in, need_weights=True)
    log_probs = torch.log_softmax(out.logits.float(), dim=-1)[0]  # (T, V)
    score = float(log_probs[torch.arange(t_out), torch.tensor(labels)].sum())
    return score, {name: w[0] for name, w in out.attention.items()}


@pytest.mark.parametrize("kind", KINDS)
def test_beam_one_equals_greedy(kind):
    model = tiny_model(kind)
    src, valid = batch()
    limits = max_lengths(valid, 1.5, 3, cap=20)
    greedy = greedy_search(model, src, valid, limits, length_penalty=0.6)
    beam = beam_search(model, src, valid, 1, limits, length_penalty=0.6)
    for g, (b,) in zip(greedy, beam):
        assert (b.tokens, b.finished, b.score, b.normalized_score) == (
            g.tokens,
            g.finished,
            g.score,
            g.normalized_score,
        )
    for h in greedy:
        assert not set(h.tokens) & set(BANNED_IDS) and EOS not in h.tokens


@pytest.mark.parametrize("kind", KINDS)
def test_batched_equals_one_at_a_time(kind):
    model = tiny_model(kind)
    src, valid = batch()
    limits = max_lengths(valid, 1.5, 3, cap=20)
    greedy = greedy_search(model, src, valid, limits)
    beams = beam_search(model, src, valid, 3, limits, length_penalty=1.0, nbest=2)
    for i, n in enumerate(valid.tolist()):
        one_src, one_valid = src[i : i + 1, :n], valid[i : i + 1]
        g = greedy_search(model, one_src, one_valid, limits[i : i + 1])[0]
        assert (g.tokens, g.finished) == (greedy[i].tokens, greedy[i].finished)
        assert g.score == pytest.approx(greedy[i].score, abs=1e-4)
        b = beam_search(model, one_src, one_valid, 3, limits[i : i + 1], length_penalty=1.0, nbest=2)[0]
        assert [(h.tokens, h.finished) for h in b] == [(h.tokens, h.finished) for h in beams[i]]
        assert [h.score for h in b] == pytest.approx([h.score for h in beams[i]], abs=1e-4)
    outcomes = {h.finished for h in greedy} | {h.finished for hs in beams for h in hs}
    assert outcomes == {True, False}  # both ways of ending are exercised


@pytest.mark.parametrize("kind", KINDS)
def test_scores_and_attention_match_the_teacher_forced_pass(kind):
    # Each step's attention row and log-probability, gathered incrementally (KV caches, beam reordering,
    # dropped rows), must be what one parallel forward pass over the chosen output computes.
    model = tiny_model(kind)
    src, valid = batch(seed=6, lens=(4, 6, 2))
    for i, n in enumerate(valid.tolist()):
        one_src, one_valid = src[i : i + 1, :n], valid[i : i + 1]
        hyps = [greedy_search(model, one_src, one_valid, 8, need_weights=True)[0]]
        hyps += beam_search(model, one_src, one_valid, 3, 8, nbest=3, need_weights=True)[0]
        for h in hyps:
            score, attention = teacher_forced(model, one_src, one_valid, h)
            assert h.score == pytest.approx(score, abs=1e-4)
            assert set(h.attention) == ATTENTION[kind]
            for name, w in h.attention.items():
                ref = attention[name]
                if name == "self":  # decoder-only: the target rows of the whole-sequence map
                    ref = ref[:, :, n:, :]
                assert w.shape == ref.shape, name  # (L, H, T_out, keys)
                torch.testing.assert_close(w, ref, atol=1e-5, rtol=1e-4)
