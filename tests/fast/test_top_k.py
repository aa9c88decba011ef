"""The block top-k of decoding (attnlab.fast.top_k) against its plain twin, Tensor.topk."""

import pytest
import torch

from attnlab.fast.top_k import top_k_rows


@pytest.mark.parametrize("vocab", [5, 64 * 6, 64 * 5 + 3, 8000])
@pytest.mark.parametrize("k", [1, 4, 5])
def test_blocked_top_k_equals_torch_topk(vocab, k):
    """top_k_rows (blocks of 64 columns) returns torch.topk's values and, without ties, its indices."""
    torch.manual_seed(vocab + k)
    x = torch.randn(29, vocab).log_softmax(-1)
    x[:, :3] = float("-inf")  # banned tokens
    x[3] = float("-inf")  # a row with nothing finite
    x[4, 100 % vocab] = 5.0  # one dominant block
    got, want = top_k_rows(x, min(k, vocab)), x.topk(min(k, vocab), dim=-1)
    torch.testing.assert_close(got[0], want[0])
    finite = torch.isfinite(want[0])
    assert torch.equal(got[1][finite], want[1][finite])
    ties = torch.randint(-3, 1, (17, vocab)).float()  # few distinct values: ties everywhere
    got = top_k_rows(ties, min(k, vocab))
    torch.testing.assert_close(got[0], ties.topk(min(k, vocab), dim=-1).values)
    assert torch.equal(ties.gather(1, got[1]), got[0])  # the indices point at the values
