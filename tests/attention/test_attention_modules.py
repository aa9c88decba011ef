"""Our attention == PyTorch's: dot-product vs SDPA, MultiHeadAttention vs nn.MultiheadAttention,
explicit path == fused path, KV-cached == uncached; additive attention's precomputed keys."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnlab.attention import (
    AdditiveAttention,
    DotProductAttention,
    KVCache,
    MultiHeadAttention,
    causal_mask,
    padding_mask,
)

B, Q, K, D, H = 3, 5, 7, 16, 4
TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _twins(bias: bool = True) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    ours = MultiHeadAttention(D, H, dropout=0.0, bias=bias).eval()
    ref = nn.MultiheadAttention(D, H, dropout=0.0, bias=bias, batch_first=True).eval()
    with torch.no_grad():
        ours.in_proj.weight.copy_(ref.in_proj_weight)
        ours.out_proj.weight.copy_(ref.out_proj.weight)
        if bias:
            ref.in_proj_bias.normal_()  # PyTorch initialises biases to 0: make the test see them
            ref.out_proj.bias.normal_()
            ours.in_proj.bias.copy_(ref.in_proj_bias)
            ours.out_proj.bias.copy_(ref.out_proj.bias)
    return ours, ref


def test_dot_product_matches_sdpa_with_mask():
    q, k, v = torch.randn(B, 2, Q, 8), torch.randn(B, 2, K, 8), torch.randn(B, 2, K, 6)
    mask = padding_mask(torch.tensor([7, 3, 1]), K)[:, None, None, :]  # (B, 1, 1, K)
    out, w = DotProductAttention()(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **TOL)
    assert w.shape == (B, 2, Q, K) and torch.all(w[2, :, :, 1:] == 0)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_self_attention_equals_torch_with_key_padding_and_causal_masks(bias, need_weights):
    ours, ref = _twins(bias)
    x = torch.randn(B, Q, D)
    valid = torch.tensor([5, 2, 4])
    pad = padding_mask(valid, Q)
    causal = causal_mask(Q)
    out, w = ours(x, mask=pad[:, None, :] & causal, need_weights=need_weights)
    ref_out, ref_w = ref(
        x, x, x, key_padding_mask=~pad, attn_mask=~causal, need_weights=True, average_attn_weights=False
    )
    torch.testing.assert_close(out, ref_out, **TOL)
    if need_weights:
        assert w.shape == (B, H, Q, Q)
        torch.testing.assert_close(w, ref_w, **TOL)
    else:
        assert w is None
    # is_causal=True is the same as passing the causal mask
    out2, _ = ours(x, mask=pad[:, None, :], is_causal=True, need_weights=need_weights)
    torch.testing.assert_close(out2, ref_out, **TOL)


@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_cross_attention_equals_torch(need_weights):
    ours, ref = _twins()
    x, mem = torch.randn(B, Q, D), torch.randn(B, K, D)
    pad = padding_mask(torch.tensor([7, 1, 4]), K)
    out, w = ours(x, mem, mask=pad[:, None, :], need_weights=need_weights)
    ref_out, ref_w = ref(x, mem, mem, key_padding_mask=~pad, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, **TOL)
    if need_weights:
        torch.testing.assert_close(w, ref_w, **TOL)
    # distinct key and value tensors take the unfused projections
    val = torch.randn(B, K, D)
    out3, _ = ours(x, mem, val, mask=pad[:, None, :], need_weights=need_weights)
    torch.testing.assert_close(out3, ref(x, mem, val, key_padding_mask=~pad)[0], **TOL)


def test_mha_explicit_path_equals_fast_path_and_weights_are_valid():
    mha = MultiHeadAttention(D, H, dropout=0.3).eval()  # eval: dropout off in both paths
    x = torch.randn(B, Q, D)
    pad = padding_mask(torch.tensor([5, 1, 3]), Q)[:, None, :]
    slow, w = mha(x, mask=pad, is_causal=True, need_weights=True)
    fast, _ = mha(x, mask=pad, is_causal=True)
    torch.testing.assert_close(slow, fast, **TOL)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, H, Q), **TOL)
    assert torch.all(w.triu(1) == 0)  # causal: nothing above the diagonal
    assert torch.all(w[1, :, :, 1:] == 0)  # key padding: exact zeros


def test_mha_fast_path_has_no_nan_on_fully_masked_rows():
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(2, 3, D)
    mask = padding_mask(torch.tensor([3, 0]), 3)[:, None, :]
    for need_weights in (True, False):
        out, _ = mha(x, mask=mask, need_weights=need_weights)
        assert torch.isfinite(out).all()


def test_mha_training_with_dropout_backpropagates():
    mha = MultiHeadAttention(D, H, dropout=0.5).train()
    x = torch.randn(B, Q, D, requires_grad=True)
    out, _ = mha(x, is_causal=True)
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("need_weights", [True, False])
def test_kv_cached_self_attention_equals_full_causal_pass(need_weights):
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(B, Q, D)
    full, full_w = mha(x, is_causal=True, need_weights=True)
    cache = KVCache()
    outs = []
    for t in range(Q):
        o, w = mha(x[:, t : t + 1], is_causal=True, cache=cache, need_weights=need_weights)
        outs.append(o)
        if need_weights:
            torch.testing.assert_close(w[:, :, 0], full_w[:, :, t, : t + 1], **TOL)
    assert len(cache) == Q and cache.k.shape == (B, H, Q, D // H)
    torch.testing.assert_close(torch.cat(outs, 1), full, **TOL)


def test_static_cross_cache_equals_recomputing_the_memory():
    mha = MultiHeadAttention(D, H).eval()
    x, mem = torch.randn(B, Q, D), torch.randn(B, K, D)
    pad = padding_mask(torch.tensor([7, 2, 5]), K)[:, None, :]
    cache = mha.project_memory(mem)
    assert cache.static and cache.k.shape == (B, H, K, D // H)
    torch.testing.assert_close(mha(x, None, mask=pad, cache=cache)[0], mha(x, mem, mask=pad)[0], **TOL)
    with pytest.raises(RuntimeError, match="static"):
        cache.append(cache.k, cache.v)


def test_kv_cache_select_gathers_rows_without_touching_the_original():
    c = KVCache()
    k, v = torch.randn(3, 2, 4, 5), torch.randn(3, 2, 4, 5)
    c.append(k, v)
    s = c.select(torch.tensor([2, 2, 0]))
    assert torch.equal(s.k[0], k[2]) and torch.equal(s.v[2], v[0]) and s.k.shape[0] == 3
    s.append(torch.zeros(3, 2, 1, 5), torch.zeros(3, 2, 1, 5))
    assert len(s) == 5 and len(c) == 4
    assert len(KVCache().select(torch.tensor([0]))) == 0


def test_mha_rejects_indivisible_heads():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)


def test_additive_attention_formula_and_precomputed_keys():
    att = AdditiveAttention(key_size=6, query_size=5, num_hiddens=8).eval()
    q, k, v = torch.randn(B, 2, 5), torch.randn(B, K, 6), torch.randn(B, K, 3)
    mask = padding_mask(torch.tensor([7, 4, 1]), K)[:, None, :]
    ctx, w = att(q, k, v, mask)
    # v·tanh(W_q q + W_k k) written out for one query
    scores = torch.stack(
        [att.w_v(torch.tanh(att.W_q(q[1, 0]) + att.W_k(k[1, j]))) for j in range(4)]
    ).squeeze(-1)
    torch.testing.assert_close(w[1, 0, :4], torch.softmax(scores, -1), **TOL)
    assert torch.all(w[1, 0, 4:] == 0) and torch.all(w[2, :, 1:] == 0)
    torch.testing.assert_close(ctx, w @ v, **TOL)
    ctx2, w2 = att(q, None, v, mask, projected_keys=att.project_keys(k))
    torch.testing.assert_close(ctx2, ctx, **TOL)
    torch.testing.assert_close(w2, w, **TOL)
    with pytest.raises(ValueError):
        att(q, None, v, mask)


def test_additive_attention_ignores_padding_content():
    att = AdditiveAttention(4, 4, 8).eval()
    q, k = torch.randn(1, 1, 4), torch.randn(1, 5, 4)
    mask = padding_mask(torch.tensor([3]), 5)[:, None, :]
    k2 = k.clone()
    k2[:, 3:] = 100.0
    torch.testing.assert_close(att(q, k, k, mask)[0], att(q[:, :, :], k[:, :3], k[:, :3])[0], **TOL)
    torch.testing.assert_close(att(q, k2, k2, mask)[0], att(q, k, k, mask)[0], **TOL)
