"""What greedy and beam search return, and the rules both searches share.

Dimension key: B batch (rows being decoded), S source len, V vocab, L layers, H heads,
T_out generated steps (including the final ``<eos>`` step when there is one).

Shared rules (notes §22, test-time autoregressive decoding):

- Scores are sums of the model's log-probabilities (``log_softmax`` of the logits, *before*
  banning tokens, so a score is the model's own probability of the output and not a
  renormalised one).
- ``<pad>``, ``<bos>`` and ``<unk>`` are never emitted: their log-probabilities are set to
  ``-inf`` at every step. ``<pad>`` and ``<bos>`` are never valid outputs; ``<unk>`` is a valid
  training label, but a translation containing ``<unk>`` is useless to a reader, so both searches
  take the best *known* word instead (as Marian/OpenNMT's ``--ban-unk`` options do).
- The length of a hypothesis counts the generated tokens *including* its ``<eos>``; a hypothesis
  that reaches its maximum length without ``<eos>`` is returned as is, with ``finished=False``.
- Ranking uses GNMT's length penalty (Wu et al. 2016, eq. 14):
  ``normalized_score = score / ((5 + len) / 6) ** alpha``; ``alpha = 0`` ranks by raw score.
- ``no_repeat_ngram_size = n > 0`` (fairseq's option of that name): a token that would repeat an
  n-gram already in the output is banned like the specials (:func:`ban_repeated_ngrams_`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.data.vocab import BOS, PAD, UNK
from attnlab.models import traits

BANNED_IDS: tuple[int, ...] = (PAD, BOS, UNK)


@dataclass
class Hypothesis:
    """One decoded output sequence.

    Attributes:
        tokens: generated target ids, without ``<bos>`` and without the final ``<eos>``.
        score: sum of the log-probabilities of every generated token (the ``<eos>`` included).
        normalized_score: ``score / gnmt_length_penalty(len, alpha)`` with ``len = len(tokens) + finished``.
        finished: True when the hypothesis ended with ``<eos>``; False when it hit its maximum length.
        attention: with ``need_weights``, ``{name: (L, H, T_out, keys)}`` — row ``t`` is the attention
            of the query that produced output token ``t`` (the ``<eos>`` step included). Keys are laid
            out as the model gives them for the batch (e.g. ``cross`` has the batch's padded source
            length ``S``; padding columns hold zero weight); rows of growing self-attention are padded
            on the right with zeros (future positions, which a causal query never sees). ``None``
            without ``need_weights``.
    """

    tokens: list[int]
    score: float
    normalized_score: float
    finished: bool
    attention: dict[str, Tensor] | None = None

    @property
    def length(self) -> int:
        """Generated steps, counting the final ``<eos>`` when there is one."""
        return len(self.tokens) + int(self.finished)


def gnmt_length_penalty(length: int | float | Tensor, alpha: float) -> float | Tensor:
    """GNMT's ``((5 + length) / 6) ** alpha``; divides a log-probability score to compare lengths fairly."""
    if isinstance(length, Tensor):
        return ((5.0 + length.to(torch.float64)) / 6.0) ** alpha
    return ((5.0 + float(length)) / 6.0) ** alpha


def normalize(score: float, length: int, alpha: float) -> float:
    """``score / gnmt_length_penalty(length, alpha)`` (``-inf`` stays ``-inf``)."""
    return score / gnmt_length_penalty(length, alpha) if math.isfinite(score) else score


def ban_tokens_(log_probs: Tensor) -> Tensor:
    """Set the log-probabilities of ``<pad> <bos> <unk>`` to ``-inf`` in place; ``(..., V)`` → same tensor."""
    log_probs[..., list(BANNED_IDS)] = float("-inf")
    return log_probs


def step_log_probs(logits: Tensor) -> Tensor:
    """``(B, V)`` logits (any float dtype) → ``(B, V)`` float32 log-probabilities with banned tokens at ``-inf``."""
    return ban_tokens_(torch.log_softmax(logits.float(), dim=-1))


def ban_repeated_ngrams_(log_probs: Tensor, history: Tensor, n: int) -> Tensor:
    """Ban, in place, every token that would complete an ``n``-gram already in a row's output.

    ``log_probs (R, V)`` and ``history (R, t)`` (the row's generated ids, no ``<bos>``): where the last
    ``n - 1`` ids occurred before, the id that followed them then gets ``-inf`` now (``n = 1``: no id
    twice). ``<eos>`` never ends up banned: it is never part of a live row's history.
    """
    rows, t = history.shape
    if n <= 0 or rows == 0 or t < n:  # no n-gram complete yet: nothing to repeat
        return log_probs
    if n == 1:
        return log_probs.scatter_(1, history, float("-inf"))
    grams = history.unfold(1, n, 1)  # (R, t - n + 1, n) every n-gram so far
    tail = history[:, t - n + 1 :]  # (R, n - 1) the prefix the next token would extend
    match = (grams[:, :, : n - 1] == tail[:, None, :]).all(dim=-1)  # (R, t - n + 1)
    r, g = match.nonzero(as_tuple=True)
    log_probs[r, grams[r, g, n - 1]] = float("-inf")
    return log_probs


def length_cap(model: nn.Module, src_len: int = 0) -> int:
    """Most output tokens ``model``'s position table allows (a decoder-only model: after its ``src_len``
    source positions, which share the table); a recurrent model has no table and allows its configured
    ``max_positions``."""
    cfg = model.config
    return traits(cfg).max_target_len(int(cfg.max_positions), src_len)


def max_lengths(src_valid_lens: Tensor, a: float, b: int, cap: int | None = None) -> Tensor:
    """Per-sentence output length limits ``floor(a * src_len + b)``, clamped to ``[1, cap]``.

    Args:
        src_valid_lens: ``(B,)`` source lengths (counting the source ``<eos>`` that batching appends).
        a, b: the limit's slope and offset (``decode.max_len_a``, ``decode.max_len_b``); ``a >= 0``.
        cap: largest allowed limit (e.g. the model's positional table size); ``None`` for no cap.

    Returns:
        ``(B,)`` int64 tensor on ``src_valid_lens``' device: the most decoding steps per sentence,
        the final ``<eos>`` step included.

    Raises:
        ValueError: if ``a < 0`` or ``cap < 1``.
    """
    if a < 0:
        raise ValueError(f"max_len_a={a} must be >= 0")
    if cap is not None and cap < 1:
        raise ValueError(f"cap={cap} must be >= 1")
    limits = torch.floor(src_valid_lens.to(torch.float64) * a + b).to(torch.int64)
    return limits.clamp(min=1, max=cap) if cap is not None else limits.clamp(min=1)


def as_length_tensor(max_len: int | Tensor, batch_size: int, device: torch.device) -> Tensor:
    """Normalise ``max_len`` (an int for every row, or a ``(B,)`` tensor) to a ``(B,)`` int64 tensor.

    Raises:
        ValueError: if a limit is below 1 or the tensor's shape is not ``(B,)``.
    """
    if isinstance(max_len, Tensor):
        if max_len.shape != (batch_size,):
            raise ValueError(
                f"max_len has shape {tuple(max_len.shape)}; expected ({batch_size},), one limit per row"
            )
        limits = max_len.to(device=device, dtype=torch.int64)
    else:
        limits = torch.full((batch_size,), int(max_len), dtype=torch.int64, device=device)
    if batch_size and int(limits.min()) < 1:
        raise ValueError(f"max_len must be >= 1 for every row, got {int(limits.min())}")
    return limits


def stack_attention(rows: list[Tensor]) -> Tensor:
    """Stack one hypothesis' per-step attention rows ``[(L, H, keys_t)] * T_out`` into ``(L, H, T_out, keys)``.

    ``keys_t`` may grow with ``t`` (decoder self-attention over a cache); shorter rows are padded on the
    right with zeros, the weight of positions that did not exist yet at that step.
    """
    keys = max(r.shape[-1] for r in rows)
    padded = [torch.nn.functional.pad(r, (0, keys - r.shape[-1])) for r in rows]
    return torch.stack(padded, dim=-2)  # (L, H, T_out, keys)
