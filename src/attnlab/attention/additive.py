"""Additive (Bahdanau) attention (notes §1–3; D2L 10.3.2 zh / 11.3.4 en): ``score(q, k) = vᵀ tanh(W_q q + W_k k)``.

In the Bahdanau decoder the query is the previous decoder state s(t'-1) and the keys = values are
the encoder states h_t; the output is the context vector c(t') = Σ_t α(s(t'-1), h_t) h_t (notes §1).

Dimension key: B batch, Q queries, K keys, A attention hidden size.
"""

from __future__ import annotations

from torch import Tensor, nn

from attnlab.attention.masks import masked_softmax


class AdditiveAttention(nn.Module):
    """``vᵀ tanh(W_q q + W_k k)`` scores, masked softmax, weighted sum of the values.

    ``W_k k`` does not depend on the decoding step, so :meth:`project_keys` computes it once per
    sentence and :meth:`forward` accepts it through ``projected_keys`` (a large saving when decoding
    step by step: only the query is projected at each step).
    """

    def __init__(self, key_size: int, query_size: int, num_hiddens: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def project_keys(self, keys: Tensor) -> Tensor:
        """``W_k k`` for all keys: ``(B, K, key_size)`` → ``(B, K, A)``."""
        return self.W_k(keys)

    def forward(
        self,
        queries: Tensor,
        keys: Tensor | None,
        values: Tensor,
        mask: Tensor | None = None,
        projected_keys: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """
        Args:
            queries: ``(B, Q, query_size)``; keys: ``(B, K, key_size)`` (may be ``None`` when
                ``projected_keys`` is given); values: ``(B, K, Dv)``.
            mask: bool broadcastable to ``(B, Q, K)``, True = may attend (e.g. ``padding_mask(...)[:, None]``).
            projected_keys: ``(B, K, A)`` from :meth:`project_keys`, to skip recomputing ``W_k k``.
        Returns:
            ``(context (B, Q, Dv), attention_weights (B, Q, K))``.
        Raises:
            ValueError: if neither ``keys`` nor ``projected_keys`` is given.
        """
        if projected_keys is None:
            if keys is None:
                raise ValueError("AdditiveAttention needs keys or projected_keys")
            projected_keys = self.W_k(keys)
        q = self.W_q(queries)  # (B, Q, A)
        features = q.unsqueeze(2) + projected_keys.unsqueeze(1)  # (B, Q, K, A) by broadcasting
        scores = self.w_v(features.tanh()).squeeze(-1)  # (B, Q, K)
        attention_weights = masked_softmax(scores, mask)
        return self.dropout(attention_weights) @ values, attention_weights  # (B, Q, Dv)
