"""Scaled dot-product attention (notes §12; D2L 10.3.3 zh / 11.3.3 en): ``softmax(q·kᵀ/√d) v``.

Dimension key: B batch (any leading dims), Q queries, K keys, Dh query/key size, Dv value size.
"""

from __future__ import annotations

import math

from torch import Tensor, nn

from attnlab.attention.masks import masked_softmax


class DotProductAttention(nn.Module):
    """``softmax(Q Kᵀ / √d) V`` with the attnlab mask convention and dropout on the weights.

    The returned weights are the softmax output *before* dropout, so every row sums to 1 (or is all
    zeros when fully masked) even in training mode; dropout only affects the output.
    """

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, queries: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """
        Args:
            queries: ``(..., Q, Dh)``; keys: ``(..., K, Dh)``; values: ``(..., K, Dv)``.
            mask: bool broadcastable to ``(..., Q, K)``, True = may attend; ``None`` = all keys.
        Returns:
            ``(output (..., Q, Dv), attention_weights (..., Q, K))``.
        """
        # Dividing by √d keeps the score variance near 1 whatever the head size, so the softmax
        # does not saturate (Vaswani et al. 2017, §3.2.1).
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])  # (..., Q, K)
        attention_weights = masked_softmax(scores, mask)
        return self.dropout(attention_weights) @ values, attention_weights  # (..., Q, Dv)
