import itertools
import math

import pytest
import torch

from attnlab.data.vocab import EOS
from attnlab.decoding import BANNED_IDS, beam_search, greedy_search, max_lengths
from tests.decoding.decoding_fakes import A, B, C, PrefixModel, dist, hand_model, hashed_model, sources


def lp(length: int, alpha: float) -> float:
    return ((5 + length) / 6) ** alpha


def reference_beam(model: PrefixModel, key: int, limit: int, k: int, alpha: float, nbest: int):
    """The documented algorithm for one sentence, in plain Python: keep the K best extensions by raw
    score; <eos> ones retire; stop at the limit, with no live beam, or when no live beam can beat the
    nbest-th finished hypothesis. Returns [(tokens, score, finished)]."""
    beams = [((), 0.0)]
    finished, unfinished = [], []
    for step in range(1, limit + 1):
        cands = []
        for prefix, score in beams:
            for tok, p in enumerate(model.probs(key, prefix)):
                if tok not in BANNED_IDS and p > 0:
                    cands.append((score + math.log(p), prefix, tok))
        cands.sort(key=lambda c: -c[0])
        beams = []
        for score, prefix, tok in cands[:k]:
            if tok == EOS:
                finished.append((list(prefix), score, True))
            elif step == limit:
                unfinished.append((list(prefix) + [tok], score, False))
            else:
                beams.append((prefix + (tok,), score))
        finished.sort(key=lambda h: -h[1] / lp(len(h[0]) + 1, alpha))
        if not beams:
            break
        if len(finished) >= nbest and max(s for _, s in beams) / lp(limit, alpha) <= finished[nbest - 1][
            1
        ] / lp(len(finished[nbest - 1][0]) + 1, alpha):
            break
    unfinished.sort(key=lambda h: -h[1])
    return (finished[:nbest] + unfinished)[:nbest]


def exhaustive(model: PrefixModel, key: int, limit: int, alpha: float, nbest: int):
    """Every output up to the limit, ranked: finished by normalised score, then unfinished."""
    words = [t for t in range(model.vocab) if t not in BANNED_IDS and t != EOS]
    finished, unfinished = [], []
    for n in range(limit + 1):
        for seq in itertools.product(words, repeat=n):
            score = sum(model.log_prob(key, seq[:i], seq[i]) for i in range(n))
            if n < limit:
                s = score + model.log_prob(key, seq, EOS)
                finished.append((list(seq), s, True))
            elif n == limit:
                unfinished.append((list(seq), score, False))
    finished.sort(key=lambda h: -h[1] / lp(len(h[0]) + 1, alpha))
    unfinished.sort(key=lambda h: -h[1])
    return (finished + unfinished)[:nbest]


def as_tuples(hyps):
    return [(h.tokens, h.score, h.finished) for h in hyps]


def assert_same(got, want, tol=1e-4):
    assert [(t, f) for t, _, f in as_tuples(got)] == [(t, f) for t, _, f in want]
    for (_, s1, _), (_, s2, _) in zip(as_tuples(got), want):
        assert s1 == pytest.approx(s2, abs=tol)


def test_beam_finds_the_likelier_output_greedy_misses():
    model = hand_model()
    src, valid = sources([10], [3])
    assert greedy_search(model, src, valid, 5)[0].tokens == [A, C]
    (best,) = beam_search(model, src, valid, beam_size=2, max_len=5, length_penalty=0.0)[0]
    assert best.tokens == [B] and best.finished
    assert best.score == pytest.approx(math.log(0.35 * 0.9), abs=1e-5)
    two = beam_search(model, src, valid, beam_size=2, max_len=5, length_penalty=0.0, nbest=2)[0]
    assert [h.tokens for h in two] == [[B], [A, C]]


def test_length_penalty_can_prefer_the_longer_output():
    table = {(20, ()): dist(eos=0.40, a=0.45), (20, (A,)): dist(eos=0.8)}
    model = PrefixModel(table, lambda key, prefix: dist(eos=0.5))
    src, valid = sources([20], [2])
    short = beam_search(model, src, valid, 2, 5, length_penalty=0.0)[0][0]
    long = beam_search(model, src, valid, 2, 5, length_penalty=1.0)[0][0]
    assert short.tokens == [] and short.finished  # log .4 = -0.92 beats log .36 = -1.02
    assert long.tokens == [A]  # -1.02 / (7/6) = -0.88 beats -0.92 / 1
    assert long.normalized_score == pytest.approx(math.log(0.36) / (7 / 6), abs=1e-5)


def test_early_stop_waits_for_beams_that_may_still_win_after_normalisation():
    # "<eos>" at once has p = .5; "a a a a a a <eos>" has p = .3 * .97**6 = .249, but with alpha = 2 its
    # normalised score -1.39 / ((5 + 7) / 6)**2 = -0.35 beats -0.69. After step 1 the live beam "a" (-1.20)
    # looks hopeless against the finished -0.69 unless the bound uses the longest possible length.
    def default(key, prefix):
        return dist(eos=0.97) if len(prefix) == 6 else dist(a=0.97, eos=0.02)

    model = PrefixModel({(30, ()): dist(eos=0.5, a=0.3)}, default)
    src, valid = sources([30], [3])
    assert greedy_search(model, src, valid, 10)[0].tokens == []
    assert beam_search(model, src, valid, 2, 10, length_penalty=0.0)[0][0].tokens == []
    best = beam_search(model, src, valid, 2, 10, length_penalty=2.0)[0][0]
    assert best.tokens == [A] * 6 and best.finished
    assert best.normalized_score == pytest.approx(math.log(0.3 * 0.97**6) / 4, abs=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 2.0])
def test_beam_size_one_is_exactly_greedy(alpha):
    model = hashed_model()
    keys, lens = list(range(30, 46)), [2, 5, 3, 7, 4, 6, 1, 8] * 2
    src, valid = sources(keys, lens)
    limits = max_lengths(valid, 0.5, 2)
    greedy = greedy_search(model, src, valid, limits, length_penalty=alpha)
    beam = beam_search(model, src, valid, 1, limits, length_penalty=alpha)
    assert any(not h.finished for h in greedy)
    for g, (b,) in zip(greedy, beam):
        assert (b.tokens, b.finished, b.score, b.normalized_score) == (
            g.tokens,
            g.finished,
            g.score,
            g.normalized_score,
        )


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 2.0])
def test_wide_beam_equals_exhaustive_search(alpha):
    # V = 7: three words + <eos> allowed; with limit 4 no step has more than 4 * 3**2 = 36 candidates,
    # so a beam of 40 prunes nothing and must return the true n-best (early stopping included).
    model = hashed_model(vocab=7, scale=1.0)
    keys = [1, 2, 3, 4, 5, 6]
    src, valid = sources(keys, [3] * len(keys))
    got = beam_search(model, src, valid, beam_size=40, max_len=4, length_penalty=alpha, nbest=3)
    for key, hyps in zip(keys, got):
        assert_same(hyps, exhaustive(model, key, 4, alpha, 3))


@pytest.mark.parametrize(("k", "nbest", "alpha"), [(2, 1, 1.0), (3, 2, 0.6), (4, 4, 0.0), (5, 2, 2.0)])
def test_batched_beam_follows_the_reference_algorithm(k, nbest, alpha):
    model = hashed_model(vocab=8)
    keys, lens = [11, 12, 13, 14, 15, 16, 17], [2, 5, 3, 6, 1, 4, 7]
    src, valid = sources(keys, lens)
    limits = max_lengths(valid, 1.0, 1)
    got = beam_search(model, src, valid, k, limits, length_penalty=alpha, nbest=nbest)
    for key, limit, hyps in zip(keys, limits.tolist(), got):
        assert_same(hyps, reference_beam(model, key, limit, k, alpha, nbest))


def test_batched_equals_one_at_a_time():
    model = hashed_model()
    keys, lens = [3, 17, 5, 8, 42], [2, 6, 3, 7, 4]
    src, valid = sources(keys, lens)
    batched = beam_search(model, src, valid, 3, 6, length_penalty=0.6, nbest=2)
    for i, hyps in enumerate(batched):
        one = beam_search(
            model, src[i : i + 1, : lens[i]], valid[i : i + 1], 3, 6, length_penalty=0.6, nbest=2
        )[0]
        assert_same(hyps, as_tuples(one), tol=1e-6)


def test_done_sentences_leave_the_batch():
    model = hand_model()
    src, valid = sources([10, 12], [3, 3])
    beam_search(model, src, valid, 2, torch.tensor([8, 8]), length_penalty=0.0)
    # key 10 is settled at step 2: "b <eos>" (.315) beats its only live beam "a c" (.1575), which can
    # only lose probability; key 12 (no likely <eos>) runs to its limit alone, on K = 2 rows.
    assert model.step_rows == [4, 4] + [2] * 6


def test_unfinished_hypotheses_when_nothing_ends():
    model = hand_model()
    src, valid = sources([12], [3])
    hyps = beam_search(model, src, valid, 3, 3, nbest=2)[0]
    assert [h.finished for h in hyps] == [False, False]
    assert hyps[0].tokens == [A, A, A]
    assert hyps[0].score == pytest.approx(3 * math.log(0.7), abs=1e-5)
    assert hyps[0].normalized_score >= hyps[1].normalized_score


def test_finished_outrank_unfinished_and_banned_never_emitted():
    def default(key, prefix):  # <unk>, <pad>, <bos> likeliest; only "a" is likely to be followed by <eos>
        if prefix == (A,):
            return dist(unk=0.3, pad=0.1, eos=0.3)
        return dist(unk=0.5, pad=0.2, bos=0.1, eos=0.001)

    model = PrefixModel({}, default)
    src, valid = sources([1, 2], [3, 4])
    for hyps in beam_search(model, src, valid, 4, 3, length_penalty=1.0, nbest=4):
        assert hyps[0].finished and hyps[0].tokens == [A]  # the only likely <eos>
        assert [len(h.tokens) for h in hyps[1:]] == [3, 3, 3]
        for h in hyps:
            assert not set(h.tokens) & set(BANNED_IDS) and EOS not in h.tokens
        ranks = [h.normalized_score for h in hyps if h.finished]
        assert ranks == sorted(ranks, reverse=True)
        seen = [h.finished for h in hyps]
        assert seen == sorted(seen, reverse=True)  # finished first


def test_attention_follows_reordered_beams():
    model = hashed_model()
    keys, lens = [3, 17, 5], [2, 6, 3]
    src, valid = sources(keys, lens)
    for hyps, n in zip(beam_search(model, src, valid, 3, 5, nbest=3, need_weights=True), lens):
        for h in hyps:
            cross, dec_self = h.attention["cross"], h.attention["dec_self"]
            assert cross.shape == (1, 1, h.length, src.shape[1])
            assert dec_self.shape == (1, 2, h.length, h.length)
            for t in range(h.length):
                assert int(cross[0, 0, t].argmax()) == sum(h.tokens[:t]) % n
                assert float(dec_self[0, 0, t, t]) == pytest.approx(1.0 / (t + 1))
    assert beam_search(model, src, valid, 2, 5)[0][0].attention is None


def test_arguments_are_checked():
    model = hand_model()
    src, valid = sources([10], [3])
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, valid, 0, 5)
    with pytest.raises(ValueError, match="nbest"):
        beam_search(model, src, valid, 2, 5, nbest=3)
    with pytest.raises(ValueError, match="length_penalty"):
        beam_search(model, src, valid, 2, 5, length_penalty=-1.0)
    with pytest.raises(ValueError, match=">= 1"):
        beam_search(model, src, valid, 2, torch.tensor([0]))
    assert beam_search(model, src[:0], valid[:0], 2, 5) == []
    model.train()
    beam_search(model, src, valid, 2, 5)
    assert model.training and not any(model.training_seen)
