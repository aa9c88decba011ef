"""Attention mechanisms: one mask convention, additive, dot-product and multi-head attention,
positional encodings and the KV cache (notes §1–3, §11–16)."""

from attnlab.attention.additive import AdditiveAttention
from attnlab.attention.dot_product import DotProductAttention
from attnlab.attention.kv_cache import KVCache
from attnlab.attention.masks import causal_mask, combine, masked_softmax, padding_mask
from attnlab.attention.multi_head import MultiHeadAttention
from attnlab.attention.positional import (
    LearnedPositionalEncoding,
    SequenceTooLongError,
    SinusoidalPositionalEncoding,
    rotation_error,
    sinusoidal_table,
)

__all__ = [
    "AdditiveAttention",
    "DotProductAttention",
    "KVCache",
    "LearnedPositionalEncoding",
    "MultiHeadAttention",
    "SequenceTooLongError",
    "SinusoidalPositionalEncoding",
    "causal_mask",
    "combine",
    "masked_softmax",
    "padding_mask",
    "rotation_error",
    "sinusoidal_table",
]
