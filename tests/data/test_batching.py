"""Teacher-forcing tensors (the notes' §3, §4, §22) and the token-budget batch sampler."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.data.batching import Batch, TokenBatchSampler, collate
from attnlab.data.text import tokenize
from attnlab.data.vocab import BOS, EOS, PAD, Vocab


def test_teacher_forcing_tensors_for_the_notes_example():
    src_vocab = Vocab.build([tokenize("I'm home.")], lang="en")
    tgt_vocab = Vocab.build([tokenize("Je suis chez moi.")], lang="fr")
    x = src_vocab.encode("I'm home.")  # i'm home .
    y = tgt_vocab.encode("Je suis chez moi.")  # je suis chez moi .
    longer = tgt_vocab.encode("Je suis chez moi. Je suis chez moi.")
    batch = collate([x, x[:1]], [y, longer], index=[7, 9])
    je, suis, chez, moi, dot = y
    # source: "i'm home . <eos>" then padding (the notes' §4: [37, 86, 4, 3, 1, 1, ...])
    assert batch.src.tolist() == [[*x, EOS], [x[0], EOS, PAD, PAD]]
    assert batch.src_valid_lens.tolist() == [4, 2]
    # decoder input "<bos> je suis chez moi ." / labels "je suis chez moi . <eos>"
    assert batch.tgt_in[0].tolist() == [BOS, je, suis, chez, moi, dot] + [PAD] * 5
    assert batch.tgt_out[0].tolist() == [je, suis, chez, moi, dot, EOS] + [PAD] * 5
    assert batch.tgt_valid_lens.tolist() == [6, 11]
    assert batch.index.tolist() == [7, 9]
    assert batch.num_tgt_tokens == 17 == int((batch.tgt_out != PAD).sum())
    # labels are the decoder input shifted left by one (y1..yn), plus <eos> at tgt_valid_lens - 1
    shifted = batch.tgt_in[:, 1:] != PAD
    assert torch.equal(batch.tgt_in[:, 1:][shifted], batch.tgt_out[:, :-1][shifted])
    assert batch.tgt_out[torch.arange(2), batch.tgt_valid_lens - 1].tolist() == [EOS, EOS]
    for t in (
        batch.src,
        batch.src_valid_lens,
        batch.tgt_in,
        batch.tgt_out,
        batch.tgt_valid_lens,
        batch.index,
    ):
        assert t.dtype == torch.long


def test_collate_pad_to_and_errors():
    b = collate([[5]], [[6, 7]], pad_to=8)
    assert b.src.shape == (1, 8) and b.tgt_in.shape == (1, 8)
    assert b.src.tolist() == [[5, EOS] + [PAD] * 6]
    with pytest.raises(ValueError):
        collate([], [])
    with pytest.raises(ValueError):
        collate([[1]], [[1], [2]])
    empty = collate([[]], [[]])  # empty sentences still get <eos> / <bos>
    assert (
        empty.src.tolist() == [[EOS]]
        and empty.tgt_in.tolist() == [[BOS]]
        and empty.tgt_out.tolist() == [[EOS]]
    )


def test_batch_to_keeps_fields_and_token_count():
    b = collate([[5, 6], [7]], [[8], [9, 10, 11]])
    moved = b.to("cpu", non_blocking=True)
    assert isinstance(moved, Batch) and moved.num_tgt_tokens == b.num_tgt_tokens == 6
    assert all(torch.equal(getattr(moved, k), getattr(b, k)) for k in ("src", "tgt_in", "tgt_out", "index"))
    built = Batch(b.src, b.src_valid_lens, b.tgt_in, b.tgt_out, b.tgt_valid_lens, b.index)
    assert built.num_tgt_tokens == 6 and built.batch_size == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs a CUDA device")
def test_batch_pin_memory():
    b = collate([[5, 6]], [[8]]).pin_memory()
    assert b.src.is_pinned() and b.num_tgt_tokens == 2


# ----------------------------------------------------------------------------------------------
# TokenBatchSampler

LENGTHS = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=300)


def check_epoch(batches: list[list[int]], src, tgt, budget, cap):
    for batch in batches:
        assert 1 <= len(batch) <= cap
        s = max(src[i] for i in batch) + 1
        t = max(tgt[i] for i in batch) + 1
        assert len(batch) * max(s, t) <= budget
        # the sampler's arithmetic is exactly the shape collate() builds
        built = collate([[4] * src[i] for i in batch], [[4] * tgt[i] for i in batch], batch)
        assert built.src.numel() <= budget and built.tgt_in.numel() <= budget


@settings(max_examples=60, deadline=None)
@given(LENGTHS, st.integers(41, 400), st.integers(1, 64), st.booleans(), st.integers(0, 5), st.integers(0, 3))
def test_batches_respect_budget_and_cover_every_pair_once(lengths, budget, cap, shuffle, seed, epoch):
    src = [a for a, _ in lengths]
    tgt = [b for _, b in lengths]
    sampler = TokenBatchSampler(src, tgt, budget, cap, shuffle=shuffle, seed=seed)
    batches = sampler.epoch(epoch)
    check_epoch(batches, src, tgt, budget, cap)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert sampler.epoch(epoch) == batches  # deterministic in (seed, epoch)


def test_length_bucketing_sorts_and_shuffle_varies_by_epoch():
    src = [k % 23 for k in range(2000)]
    tgt = [(k * 7) % 19 for k in range(2000)]
    fixed = TokenBatchSampler(src, tgt, 512, 128, shuffle=False, seed=0)
    order = [i for b in fixed.epoch(0) for i in b]
    assert [(src[i], tgt[i]) for i in order] == sorted((src[i], tgt[i]) for i in range(2000))
    assert fixed.epoch(0) == fixed.epoch(5)  # nothing random without shuffle
    shuf = TokenBatchSampler(src, tgt, 512, 128, shuffle=True, seed=0)
    assert shuf.epoch(0) != shuf.epoch(1)
    assert shuf.epoch(1) == TokenBatchSampler(src, tgt, 512, 128, shuffle=True, seed=0).epoch(1)
    assert shuf.epoch(1) != TokenBatchSampler(src, tgt, 512, 128, shuffle=True, seed=1).epoch(1)
    # bucketing keeps padding low: most cells of a padded batch hold real tokens
    real = sum(src[i] + 1 for b in shuf.epoch(0) for i in b)
    padded = sum(len(b) * (max(src[i] for i in b) + 1) for b in shuf.epoch(0))
    assert real / padded > 0.9


def test_sampler_rejects_a_pair_over_budget():
    with pytest.raises(ValueError, match="pair 1 needs 51 tokens per row"):
        TokenBatchSampler([3, 50], [3, 4], 40, 8, shuffle=False, seed=0)
    assert TokenBatchSampler([], [], 40, 8, shuffle=True, seed=0).epoch(0) == []
