"""The one mask convention of attnlab: boolean, ``True`` = this query may attend to this key.

Every attention module takes masks built here. Masked scores are filled with
``torch.finfo(dtype).min`` (never a scattered ``-1e6``), and :func:`masked_softmax` multiplies the
result by the mask so masked keys get *exact* zeros and a fully masked row gives zeros, never NaN.

Dimension key: B batch, Q queries, K keys.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(valid_lens: Tensor, num_keys: int) -> Tensor:
    """Keys that are real tokens: ``mask[b, k] = k < valid_lens[b]``.

    Args:
        valid_lens: ``(B,)`` integer tensor, the number of non-pad tokens per row (D2L's ``valid_lens``).
        num_keys: ``K``, the padded length.
    Returns:
        ``(B, K)`` bool, True where the key may be attended to. Add a query axis with
        ``mask[:, None, :]`` to broadcast over queries.
    """
    keys = torch.arange(num_keys, device=valid_lens.device)
    return keys[None, :] < valid_lens[:, None]  # (B, K)


def causal_mask(q_len: int, k_len: int | None = None, device: torch.device | str | None = None) -> Tensor:
    """No look-ahead: query ``i`` may attend to key ``j`` iff ``j <= i + (k_len - q_len)``.

    The offset aligns the *last* query with the *last* key, so the same mask serves the full
    teacher-forced pass (``q_len == k_len``: lower-triangular, notes §18/§24) and cached decoding,
    where ``q_len`` new queries follow ``k_len - q_len`` cached keys.

    Returns:
        ``(Q, K)`` bool, True = may attend.
    Raises:
        ValueError: if ``k_len < q_len`` (queries without any past key).
    """
    k_len = q_len if k_len is None else k_len
    if k_len < q_len:
        raise ValueError(f"causal_mask: k_len={k_len} < q_len={q_len}; cached keys must include every query")
    q = torch.arange(q_len, device=device)[:, None]
    k = torch.arange(k_len, device=device)[None, :]
    return k <= q + (k_len - q_len)  # (Q, K)


def combine(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of broadcastable boolean masks; ``None`` entries mean "no restriction".

    Returns ``None`` when every argument is ``None`` (so the fast attention path can skip masking).
    """
    out: Tensor | None = None
    for m in masks:
        if m is None:
            continue
        out = m if out is None else out & m
    return out


def masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Softmax over the last axis (keys) that ignores masked keys (D2L's ``masked_softmax``).

    Args:
        scores: ``(..., Q, K)`` attention scores.
        mask: bool broadcastable to ``scores``, True = may attend; ``None`` = plain softmax.
    Returns:
        weights with the shape of ``scores``: each row sums to 1 over its allowed keys, masked
        entries are exactly 0, and a row with no allowed key is all zeros (not NaN).
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    # finfo.min rather than -inf: a fully masked row stays finite (uniform) instead of NaN, and
    # multiplying by the mask afterwards turns it into zeros and makes masked entries exactly 0.
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(filled, dim=-1) * mask
