"""Has cross-attention formed? Whether the decoder looks somewhere else at each step (notes §1–3).

Bahdanau's point (§1) is that the context vector ``c_t' = Σ_t α(s_t'−1, h_t) h_t`` changes with the
decoding step t'. A model that puts the same weights on the source at every step has, in effect, a
fixed context again, however sharp those weights are. Two numbers say which of the two a map shows:

- **movement**: the mean total-variation distance between consecutive rows,
  ``½ Σ_t |α_t',t − α_t'−1,t|`` averaged over t' (0 = the same row at every step, 1 = each step
  looks at keys the previous step gave no weight);
- **uniformity**: the mean row entropy over ``ln S`` (1 = every row uniform over the S source keys).

:func:`formation_note` turns them into the one line ``attnlab attention`` and ``attnlab explain``
print when attention has not formed. Masked (padding) keys — columns that are exactly 0 in every
row — are left out, so ``--pad`` does not change either number.

Dimension key: T queries (decoder steps), S keys (source positions).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["FORMED_MOVEMENT", "UNIFORM_SHARE", "attention_movement", "attention_uniformity", "formation_note"]

#: Mean TV distance between consecutive rows above which attention has "formed" (checked on the probe
#: sentences). An untrained Bahdanau model measures ≈ 0.002.
FORMED_MOVEMENT = 0.2

#: Rows whose entropy is above this share of ``ln S`` are treated as near-uniform.
UNIFORM_SHARE = 0.9


def _rows(weights: Tensor) -> Tensor:
    """``weights (…, T, S)`` as float ``(N, T, S')``: leading dims flattened, all-zero (masked) columns dropped."""
    if weights.dim() < 2:
        raise ValueError(f"attention weights need (…, queries, keys), got shape {tuple(weights.shape)}")
    w = weights.detach().float().cpu().reshape(-1, *weights.shape[-2:])  # (N, T, S)
    keep = w.sum(dim=(0, 1)) > 0  # a masked key gets exactly 0 from the masked softmax in every row
    return w[..., keep] if bool(keep.any()) else w


def attention_movement(weights: Tensor) -> float:
    """Mean total-variation distance between consecutive rows of ``weights (…, T, S)``.

    ``TV(α_t', α_t'−1) = ½ Σ_s |α_t',s − α_t'−1,s|``, averaged over the ``T − 1`` pairs of each map and
    over the leading dims (layers, heads). Rows should each sum to 1 (softmax outputs). Returns NaN
    when there are fewer than two rows (one decoding step cannot move). Raises ValueError on a
    tensor with fewer than 2 dims.
    """
    w = _rows(weights)
    if w.shape[1] < 2:
        return math.nan
    return float(0.5 * (w[:, 1:] - w[:, :-1]).abs().sum(-1).mean())


def attention_uniformity(weights: Tensor) -> float:
    """Mean row entropy of ``weights (…, T, S)`` divided by ``ln S`` (1 = uniform rows, 0 = one-hot);
    NaN with a single key (every row is then both)."""
    w = _rows(weights)
    S = w.shape[-1]
    if S < 2:
        return math.nan
    entropy = -(w * torch.log(w.clamp_min(1e-12))).sum(-1)  # (N, T)
    return float(entropy.mean() / math.log(S))


def shown(movement: float) -> float:
    """``movement`` cut (not rounded) to two decimals for display, so that a value under the
    :data:`FORMED_MOVEMENT` bar never reads as the bar itself (0.196 → 0.19, not "0.20, below 0.2")."""
    return math.floor(movement * 100) / 100


def formation_note(weights: Tensor, label: str = "cross-attention") -> str | None:
    """One line saying that ``weights (…, T, S)`` has not formed, or None when it has.

    Not formed: near-uniform rows (:data:`UNIFORM_SHARE`), or rows that barely move from step to step
    (movement below :data:`FORMED_MOVEMENT`). With one decoding step there is nothing to judge: None.
    """
    move, unif = attention_movement(weights), attention_uniformity(weights)
    if math.isnan(move):
        return None
    if not math.isnan(unif) and unif > UNIFORM_SHARE:
        return (f"note: {label} has not formed: its rows are near-uniform (entropy {unif:.0%} of the uniform "
                f"row's), so each context vector is close to the plain mean of the encoder states (§1)")
    if move < FORMED_MOVEMENT:
        return (f"note: {label} has not formed: consecutive steps' weights differ by a mean total variation "
                f"of {shown(move):.2f} (below {FORMED_MOVEMENT}), so the context vector barely changes from step to "
                f"step — a fixed context again (§1); train longer or see `attnlab doctor`")
    return None
