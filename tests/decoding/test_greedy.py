import math

import pytest
import torch

from attnlab.data.vocab import BOS, EOS, PAD, UNK
from attnlab.decoding import BANNED_IDS, Hypothesis, gnmt_length_penalty, greedy_search, max_lengths
from tests.decoding.decoding_fakes import A, B, C, D, PrefixModel, dist, hand_model, hashed_model, sources


def test_hand_checked_answers_and_scores():
    model = hand_model()
    src, valid = sources([10, 11, 12], [3, 2, 4])
    hyps = greedy_search(model, src, valid, torch.tensor([5, 5, 3]))
    assert [h.tokens for h in hyps] == [[A, C], [D], [A, A, A]]
    assert [h.finished for h in hyps] == [True, True, False]
    expected = [math.log(0.45 * 0.35 * 0.9), math.log(0.1 * 0.4), 3 * math.log(0.7)]
    for h, score, length in zip(hyps, expected, [3, 2, 3]):
        assert h.score == pytest.approx(score, abs=1e-5)
        assert h.length == length
        assert h.normalized_score == pytest.approx(score / ((5 + length) / 6), abs=1e-5)
        assert h.attention is None


def test_finished_rows_leave_the_batch():
    model = hand_model()
    src, valid = sources([10, 11, 12], [3, 2, 4])
    greedy_search(model, src, valid, torch.tensor([5, 5, 3]))
    # step 1: all three rows; key 11 ends at step 2; keys 10 and 12 end at step 3 (<eos> / limit).
    assert model.step_rows == [3, 3, 2]


def test_runs_in_eval_mode_and_restores_training_mode():
    model = hand_model().train()
    src, valid = sources([10], [3])
    greedy_search(model, src, valid, 5)
    assert model.training_seen and not any(model.training_seen)
    assert model.training
    model.eval()
    greedy_search(model, src, valid, 5)
    assert not model.training


def test_max_len_is_per_row_and_counts_the_eos_step():
    model = hand_model()
    src, valid = sources([10, 10, 10, 12], [3, 3, 3, 3])
    hyps = greedy_search(model, src, valid, torch.tensor([1, 2, 3, 1]))
    assert [(h.tokens, h.finished) for h in hyps] == [
        ([A], False),
        ([A, C], False),
        ([A, C], True),
        ([A], False),
    ]
    assert hyps[0].score == pytest.approx(math.log(0.45), abs=1e-6)


def test_banned_tokens_never_emitted_even_when_most_probable():
    table = {}

    def default(key, prefix):  # <unk> always likeliest, then <pad>/<bos>; <eos> only after 3 tokens
        return dist(unk=0.5, pad=0.2, bos=0.1, eos=0.15 if len(prefix) >= 3 else 0.0)

    model = PrefixModel(table, default)
    src, valid = sources([1, 2], [3, 5])
    for h in greedy_search(model, src, valid, 8):
        assert not set(h.tokens) & set(BANNED_IDS)
        assert EOS not in h.tokens
        assert h.finished and len(h.tokens) == 3
    assert set(BANNED_IDS) == {PAD, BOS, UNK}


def test_batched_equals_one_at_a_time():
    model = hashed_model()
    keys, lens = [3, 17, 5, 8, 42, 9], [2, 6, 3, 7, 4, 5]
    src, valid = sources(keys, lens)
    limits = max_lengths(valid, 1.0, 2)
    batched = greedy_search(model, src, valid, limits)
    for i, h in enumerate(batched):
        one = greedy_search(model, src[i : i + 1, : lens[i]], valid[i : i + 1], limits[i : i + 1])[0]
        assert (one.tokens, one.finished) == (h.tokens, h.finished)
        assert one.score == pytest.approx(h.score, abs=1e-6)
    assert any(not h.finished for h in batched) and any(h.finished for h in batched)


def test_attention_rows_follow_each_hypothesis():
    model = hashed_model()
    keys, lens = [3, 17, 5, 8], [2, 6, 3, 7]
    src, valid = sources(keys, lens)
    hyps = greedy_search(model, src, valid, 6, need_weights=True)
    for h, n in zip(hyps, lens):
        t_out = h.length
        cross, dec_self = h.attention["cross"], h.attention["dec_self"]
        assert cross.shape == (1, 1, t_out, src.shape[1])  # (L, H, T_out, S)
        assert dec_self.shape == (1, 2, t_out, t_out)  # (L, H, T_out, T_out): padded on the right
        for t in range(t_out):  # the query producing output t saw the prefix tokens[:t]
            assert int(cross[0, 0, t].argmax()) == sum(h.tokens[:t]) % n
            assert torch.allclose(dec_self[0, :, t, : t + 1], torch.full((2, t + 1), 1.0 / (t + 1)))
            assert float(dec_self[0, :, t, t + 1 :].abs().sum()) == 0.0


def test_max_lengths_helper():
    valid = torch.tensor([1, 4, 10])
    assert max_lengths(valid, 1.5, 10).tolist() == [11, 16, 25]
    assert max_lengths(valid, 1.5, 10, cap=20).tolist() == [11, 16, 20]
    assert max_lengths(valid, 0.0, 0).tolist() == [1, 1, 1]  # at least one step
    assert max_lengths(valid, 0.5, 1).dtype == torch.int64
    with pytest.raises(ValueError, match="max_len_a"):
        max_lengths(valid, -1.0, 1)
    with pytest.raises(ValueError, match="cap"):
        max_lengths(valid, 1.0, 1, cap=0)


def test_bad_limits_are_refused_and_empty_batch_is_fine():
    model = hand_model()
    src, valid = sources([10, 11], [3, 2])
    with pytest.raises(ValueError, match=">= 1"):
        greedy_search(model, src, valid, 0)
    with pytest.raises(ValueError, match="one limit per row"):
        greedy_search(model, src, valid, torch.tensor([3, 3, 3]))
    assert greedy_search(model, src[:0], valid[:0], 5) == []


def test_hypothesis_and_length_penalty():
    h = Hypothesis([A, B], -1.0, -1.0, finished=True)
    assert h.length == 3
    assert Hypothesis([A, B], -1.0, -1.0, finished=False).length == 2
    assert gnmt_length_penalty(1, 1.0) == pytest.approx(1.0)
    assert gnmt_length_penalty(7, 0.6) == pytest.approx(2.0**0.6)
    assert gnmt_length_penalty(9, 0.0) == 1.0
    assert torch.allclose(
        gnmt_length_penalty(torch.tensor([1, 7]), 1.0), torch.tensor([1.0, 2.0], dtype=torch.float64)
    )
