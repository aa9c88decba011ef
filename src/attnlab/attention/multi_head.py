"""Multi-head attention (notes §11; D2L §10.5; Vaswani et al. 2017 §3.2.2).

Each head h projects queries, keys and values with its own matrices W_q^(h), W_k^(h), W_v^(h)
(D → Dh), attends with scaled dot products, and the H head outputs are concatenated and mixed by
W_o (D → D). The per-head matrices are stored stacked, as the row blocks of one fused ``in_proj``
weight ``[W_q; W_k; W_v]`` of shape ``(3D, D)`` (rows ``h*Dh:(h+1)*Dh`` of W_q are head h's
W_q^(h)) — the same layout as ``torch.nn.MultiheadAttention``, so weights copy over one to one and
one matmul projects all heads at once (no Python loop over heads).

Two paths compute the same function:
- explicit (``need_weights=True``): scores, :func:`masked_softmax`, weights @ values — readable and
  returns the weights ``(B, H, Q, K)`` for the attention maps (notes §23–25);
- fast (default): ``torch.nn.functional.scaled_dot_product_attention`` (fused kernels), used for
  training and decoding when nobody looks at the weights.

Dimension key: B batch, Q queries, K keys, D model dim (num_hiddens), H heads, Dh = D / H.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.attention.dot_product import DotProductAttention
from attnlab.attention.kv_cache import KVCache
from attnlab.attention.masks import causal_mask, combine


class MultiHeadAttention(nn.Module):
    """Self- or cross-attention with H heads, fused projections and an optional KV cache.

    Parameters: ``in_proj`` (``nn.Linear(D, 3D)``: W_q, W_k, W_v of every head) and ``out_proj``
    (``nn.Linear(D, D)``: W_o). To silence head h (head-importance analysis, notes §28), zero the
    slice ``[..., h*Dh:(h+1)*Dh]`` of ``out_proj``'s input with a forward pre-hook.
    """

    def __init__(self, num_hiddens: int, num_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if num_hiddens % num_heads != 0:
            raise ValueError(f"num_hiddens={num_hiddens} must be divisible by num_heads={num_heads}")
        self.num_hiddens = num_hiddens
        self.num_heads = num_heads
        self.head_size = num_hiddens // num_heads
        self.dropout_p = dropout
        self.in_proj = nn.Linear(num_hiddens, 3 * num_hiddens, bias=bias)  # [W_q; W_k; W_v]
        self.out_proj = nn.Linear(num_hiddens, num_hiddens, bias=bias)  # W_o
        self.attention = DotProductAttention(dropout)

    # -- projections -----------------------------------------------------------------------------
    def _heads(self, x: Tensor, n: int) -> Tensor:
        """``(B, L, n*D)`` → ``(n, B, H, L, Dh)``: split the fused projection into n tensors of heads."""
        B, L, _ = x.shape
        return x.view(B, L, n, self.num_heads, self.head_size).permute(2, 0, 3, 1, 4)  # (n, B, H, L, Dh)

    def _project(self, x: Tensor, rows: slice) -> Tensor:
        bias = None if self.in_proj.bias is None else self.in_proj.bias[rows]
        return F.linear(x, self.in_proj.weight[rows], bias)

    def project_memory(self, memory: Tensor) -> KVCache:
        """Keys and values of a fixed memory (the encoder output), computed once per sentence.

        ``memory``: ``(B, K, D)``. Returns a static :class:`KVCache` with ``k, v`` of shape
        ``(B, H, K, Dh)``, to pass as ``cache`` at every decoding step of a cross-attention layer.
        """
        D = self.num_hiddens
        k, v = self._heads(self._project(memory, slice(D, 3 * D)), 2)  # (B, H, K, Dh) each
        return KVCache(k, v, static=True)

    # -- attention -------------------------------------------------------------------------------
    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        mask: Tensor | None = None,
        *,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """
        Args:
            query: ``(B, Q, D)``.
            key, value: ``(B, K, D)`` for cross-attention; ``key=None`` means self-attention on
                ``query`` (one fused QKV matmul). ``value=None`` with a ``key`` uses ``key`` (fused KV).
            mask: bool broadcastable to ``(B, Q, K)`` — e.g. ``(B, 1, K)`` key padding or ``(Q, K)`` —
                True = may attend. It must cover the cached keys too when a cache is used.
            is_causal: also forbid attending to later keys (:func:`causal_mask`, aligned so the last
                query sees the last key, which is what cached decoding needs).
            need_weights: take the explicit path and return the weights.
            cache: self-attention: a :class:`KVCache` the new ``k, v`` are appended to, attention then
                runs over all cached keys. Cross-attention: a static cache from :meth:`project_memory`
                whose ``k, v`` are used as they are (``key`` and ``value`` are then ignored).
        Returns:
            ``(output (B, Q, D), attention_weights (B, H, Q, K) or None)``.
        """
        B, Q, D = query.shape
        if cache is not None and cache.static:
            q = self._heads(self._project(query, slice(0, D)), 1)[0]  # (B, H, Q, Dh)
            k, v = cache.k, cache.v
        elif key is None:
            q, k, v = self._heads(self.in_proj(query), 3)  # fused QKV: (B, H, Q, Dh) each
        else:
            q = self._heads(self._project(query, slice(0, D)), 1)[0]  # (B, H, Q, Dh)
            if value is None or value is key:
                k, v = self._heads(self._project(key, slice(D, 3 * D)), 2)  # fused KV: (B, H, K, Dh)
            else:
                k = self._heads(self._project(key, slice(D, 2 * D)), 1)[0]  # (B, H, K, Dh)
                v = self._heads(self._project(value, slice(2 * D, 3 * D)), 1)[0]
        if cache is not None and not cache.static:
            k, v = cache.append(k, v)  # (B, H, T, Dh): every step so far
        assert k is not None and v is not None
        K = k.shape[-2]
        if mask is not None:
            mask = mask.unsqueeze(-3)  # (B, 1, Q, K) or (1, Q, K): broadcast over heads
        if is_causal and Q == 1:
            is_causal = False  # one new query after its cached past: nothing lies in its future

        if need_weights:
            if is_causal:
                mask = combine(mask, causal_mask(Q, K, query.device))
            out, weights = self.attention(q, k, v, mask)  # (B, H, Q, Dh), (B, H, Q, K)
        else:
            weights = None
            dropout_p = self.dropout_p if self.training else 0.0
            if is_causal and mask is None and Q == K:
                out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
            else:
                if is_causal:
                    mask = combine(mask, causal_mask(Q, K, query.device))
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        out = out.transpose(1, 2).reshape(B, Q, D)  # concatenate the heads: (B, Q, H*Dh)
        return self.out_proj(out), weights
