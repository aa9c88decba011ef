"""The one mask convention: padding/causal masks and masked_softmax (exact zeros, no NaN)."""

from __future__ import annotations

import pytest
import torch

from attnlab.attention.masks import causal_mask, combine, masked_softmax, padding_mask


def test_padding_mask_marks_real_tokens():
    m = padding_mask(torch.tensor([3, 1, 0]), 4)
    assert m.dtype == torch.bool
    assert m.tolist() == [[True, True, True, False], [True, False, False, False], [False] * 4]


def test_causal_mask_is_lower_triangular_and_offset_for_cached_queries():
    assert torch.equal(causal_mask(4), torch.ones(4, 4, dtype=torch.bool).tril())
    # two new queries after three cached keys: the last query sees every key
    assert causal_mask(2, 5).tolist() == [[True, True, True, True, False], [True] * 5]
    with pytest.raises(ValueError, match="k_len"):
        causal_mask(3, 2)


def test_combine_is_and_and_skips_none():
    a = torch.tensor([[True, False, True]])
    b = torch.tensor([[True], [False]])
    assert combine(None, None) is None
    assert combine(None, a) is a
    assert combine(a, b).tolist() == [[True, False, True], [False, False, False]]


def test_masked_softmax_rows_sum_to_one_masked_entries_exactly_zero():
    torch.manual_seed(0)
    scores = torch.randn(2, 3, 5) * 10
    mask = padding_mask(torch.tensor([2, 5]), 5)[:, None, :] & causal_mask(3, 5)  # (2, 3, 5)
    w = masked_softmax(scores, mask)
    assert torch.all(w[~mask.expand_as(w)] == 0)  # exact zeros, not 1e-30
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3), atol=1e-6, rtol=0)
    # equal to a plain softmax over the allowed keys only
    ref = torch.softmax(scores[0, 0, :2], -1)
    torch.testing.assert_close(w[0, 0, :2], ref, atol=1e-6, rtol=0)


def test_masked_softmax_fully_masked_row_gives_zeros_and_finite_gradients():
    scores = torch.randn(2, 4, requires_grad=True)
    mask = torch.tensor([[True, True, False, False], [False] * 4])
    w = masked_softmax(scores, mask)
    assert torch.equal(w[1], torch.zeros(4))
    assert not torch.isnan(w).any()
    (w * torch.arange(4.0)).sum().backward()
    assert torch.isfinite(scores.grad).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_masked_softmax_keeps_dtype_and_huge_scores_finite(dtype):
    scores = torch.tensor([[1e4, -1e4, 3.0]], dtype=dtype)
    w = masked_softmax(scores, torch.tensor([[False, True, True]]))
    assert w.dtype == dtype and torch.isfinite(w).all() and w[0, 0] == 0
    assert abs(w.sum().item() - 1) < 1e-2


def test_masked_softmax_without_mask_is_softmax():
    s = torch.randn(3, 4)
    torch.testing.assert_close(masked_softmax(s, None), torch.softmax(s, -1))
