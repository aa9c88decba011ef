"""Every decode.* option changes the output the way its definition says, on a tiny trained run:
GNMT's length penalty lengthens beam outputs, the length limit caps them, no n-gram repeats under
no_repeat_ngram_size, sampling is reproducible from its seed (top-1 sampling is greedy search), and
batches by tokens hold at most decode.max_tokens source tokens without changing a translation."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attnlab.config import ConfigError, DecodeConfig
from attnlab.decoding.hypothesis import ban_repeated_ngrams_
from attnlab.translator import Translator, decode_batches

SENTENCES = ["twenty one", "three hundred and five", "seven", "one thousand two hundred", "forty four",
             "ninety nine", "eleven", "six hundred"]


@pytest.fixture(scope="module")
def tr(tiny_runs):
    return Translator.from_run(tiny_runs("transformer"), "last")


def decode(tr, **changes):
    saved = tr.cfg.decode
    try:
        tr.set_decode(dataclasses.replace(saved, **changes))
        return [r[0] for r in tr.translate_full(SENTENCES, nbest=changes.get("nbest", 1))]
    finally:
        tr.set_decode(saved)


def repeats(tokens: list[str], n: int) -> bool:
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


def test_a_larger_length_penalty_never_shortens_a_beam_output(tr):
    # GNMT's alpha: ranking by score / ((5 + len) / 6) ** alpha favours longer finished hypotheses as alpha grows
    short, long = decode(tr, beam_size=4, length_penalty=0.0), decode(tr, beam_size=4, length_penalty=5.0)
    assert all(len(b.tokens) >= len(a.tokens) for a, b in zip(short, long))
    assert sum(len(b.tokens) for b in long) > sum(len(a.tokens) for a in short)
    assert all(a.normalized_score == a.score for a in short)  # alpha 0: the raw log-probability


@pytest.mark.parametrize("beam", [1, 4])
def test_the_length_limit_caps_every_output(tr, beam):
    for t in decode(tr, beam_size=beam, length_penalty=5.0, max_len_a=0.0, max_len_b=3):
        assert len(t.tokens) + t.finished <= 3  # b decoding steps, <eos> included


def test_no_repeat_ngram_size_bans_repeated_ngrams(tr):
    free = decode(tr, beam_size=4, length_penalty=5.0)
    assert any(repeats(t.tokens, 2) for t in free)  # the tiny model does repeat itself
    for n in (1, 2):
        assert not any(repeats(t.tokens, n) for t in decode(tr, beam_size=4, length_penalty=5.0,
                                                              no_repeat_ngram_size=n))
    assert not any(repeats(t.tokens, 2) for t in decode(tr, no_repeat_ngram_size=2, sampling=True, temperature=3.0))


def test_ban_repeated_ngrams_bans_what_would_complete_a_seen_ngram():
    history = torch.tensor([[5, 6, 5, 7, 5], [5, 6, 7, 8, 9]])
    lp = ban_repeated_ngrams_(torch.zeros(2, 10), history, 2)
    assert torch.isinf(lp[0]).nonzero().flatten().tolist() == [6, 7]  # 5 was followed by 6 and 7
    assert not torch.isinf(lp[1]).any()  # 9 never came before
    lp = ban_repeated_ngrams_(torch.zeros(2, 10), history, 1)
    assert torch.isinf(lp[1]).nonzero().flatten().tolist() == [5, 6, 7, 8, 9]


def test_sampling_is_reproducible_from_its_seed_and_top1_is_greedy(tr):
    a, b = decode(tr, sampling=True, temperature=2.0, seed=1), decode(tr, sampling=True, temperature=2.0, seed=1)
    assert [t.tokens for t in a] == [t.tokens for t in b]
    assert [t.tokens for t in a] != [t.tokens for t in decode(tr, sampling=True, temperature=2.0, seed=2)]
    greedy = decode(tr)
    assert [t.tokens for t in decode(tr, sampling=True, sampling_topk=1, temperature=3.0)] == [t.tokens for t in greedy]


def test_sampled_nbest_is_ranked_by_normalized_score(tr):
    saved = tr.cfg.decode
    tr.set_decode(dataclasses.replace(saved, sampling=True, temperature=2.0, nbest=3))
    try:
        lists = tr.translate_full(SENTENCES, nbest=3)
    finally:
        tr.set_decode(saved)
    for hyps in lists:
        assert len(hyps) == 3
        scores = [h.normalized_score for h in hyps]
        assert scores == sorted(scores, reverse=True)


def test_batches_by_tokens_hold_at_most_max_tokens_and_change_nothing(tr):
    seqs = [tr.encode_source(s)[0] for s in SENTENCES]
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    batches = decode_batches(order, seqs, 100, 12)
    assert sorted(i for b in batches for i in b) == list(range(len(seqs))) and len(batches) > 1
    assert all(len(b) == 1 or len(b) * max(len(seqs[i]) + 1 for i in b) <= 12 for b in batches)
    assert [t.tokens for t in decode(tr, max_tokens=12)] == [t.tokens for t in decode(tr)]


def test_sampling_options_without_sampling_are_refused():
    with pytest.raises(ConfigError, match="decode.sampling=true"):
        DecodeConfig(temperature=0.5)
    with pytest.raises(ConfigError, match="beam_size=1"):
        DecodeConfig(sampling=True, beam_size=4)
