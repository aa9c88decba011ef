"""Greedy decoding through the model protocol (notes §22: at test time the decoder feeds back its own
previous output, one token at a time, instead of the teacher-forced reference).

Dimension key: B batch (rows still decoding), S source len, V vocab, L layers, H heads,
T_out generated steps.

One implementation serves every model (docs/DESIGN.md, The main contracts): it only calls ``model.encode``,
``model.init_state``, ``model.step`` and ``DecoderState.select``. Rows are decoded together; a row
that emits ``<eos>`` or reaches its length limit is finished and removed from the batch (its state
rows dropped with ``select``), so long outputs do not keep short ones' compute alive. The next token is
each row's argmax (:func:`attnlab.fast.top_k_rows` with the fast kernels, see :mod:`attnlab.fast`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab import fast
from attnlab.data.vocab import BOS, EOS
from attnlab.decoding.hypothesis import (
    Hypothesis,
    as_length_tensor,
    ban_repeated_ngrams_,
    max_lengths,
    normalize,
    stack_attention,
    step_log_probs,
)
from attnlab.decoding.sampling import Sampler

__all__ = ["greedy_search", "max_lengths"]


@torch.inference_mode()
def greedy_search(
    model: nn.Module,
    src: Tensor,
    src_valid_lens: Tensor,
    max_len: int | Tensor,
    need_weights: bool = False,
    length_penalty: float = 1.0,
    no_repeat_ngram_size: int = 0,
    sampler: Sampler | None = None,
) -> list[Hypothesis]:
    """Decode each source sentence by taking the most probable allowed token at every step.

    Args:
        model: any attnlab model (``encode`` / ``init_state`` / ``step``); it is put in eval mode for
            the call and its previous mode is restored afterwards.
        src: ``(B, S)`` source ids (with ``<eos>``, padded).
        src_valid_lens: ``(B,)`` source lengths.
        max_len: the most decoding steps per row, ``<eos>`` step included: an int for all rows or a
            ``(B,)`` tensor (see :func:`max_lengths`).
        need_weights: also return each hypothesis' attention weights (see :class:`Hypothesis`).
        length_penalty: GNMT ``alpha`` used only to fill ``normalized_score`` (it does not change the
            greedy choice), so greedy and beam scores are comparable.
        no_repeat_ngram_size: ``n > 0`` bans a token that would repeat an n-gram of the row's output
            (:func:`attnlab.decoding.hypothesis.ban_repeated_ngrams_`).
        sampler: draw each token (:class:`~attnlab.decoding.sampling.Sampler`) instead of the argmax.

    Returns:
        ``B`` hypotheses in input order. ``<pad> <bos> <unk>`` are never emitted (see
        :mod:`attnlab.decoding.hypothesis`); a row that reaches ``max_len`` without ``<eos>`` comes back
        with ``finished=False``.

    Raises:
        ValueError: if a length limit is below 1 or ``max_len``'s shape is not ``(B,)``.
    """
    batch_size, device = src.shape[0], src.device
    limits = as_length_tensor(max_len, batch_size, device)
    if batch_size == 0:
        return []
    best_token = _best_token_fast if fast.enabled(model, device) else _best_token
    if sampler is not None:
        best_token = sampler.draw
    results: list[Hypothesis | None] = [None] * batch_size
    was_training = model.training
    model.eval()  # dropout off: decoding must be deterministic
    try:
        state = model.init_state(model.encode(src, src_valid_lens), src_valid_lens)
        rows = _Rows.start(batch_size, device, need_weights)
        step = 0
        while True:
            step += 1
            out = model.step(rows.tokens, state, need_weights=need_weights)
            log_probs = step_log_probs(out.logits)  # (B, V)
            if no_repeat_ngram_size:
                ban_repeated_ngrams_(log_probs, rows.history, no_repeat_ngram_size)
            best, tokens = best_token(log_probs)  # (B,) each
            rows.extend(best, tokens, out.attention)
            ended = tokens == EOS
            done = ended | (limits[rows.index] <= step)
            if not bool(done.any()):
                state = out.state
                continue
            for j in done.nonzero().flatten().tolist():
                results[int(rows.index[j])] = rows.hypothesis(j, bool(ended[j]), step, length_penalty)
            keep = (~done).nonzero().flatten()  # (B',)
            if keep.numel() == 0:
                break
            # Finished rows leave the batch, and their decoder state with them.
            state, rows = out.state.select(keep), rows.select(keep)
    finally:
        model.train(was_training)
    assert all(h is not None for h in results)  # every row ends by <eos> or by its limit
    return results  # type: ignore[return-value]


def _best_token(log_probs: Tensor) -> tuple[Tensor, Tensor]:
    """``(B, V)`` → each row's largest log-probability and its token (the argmax), ``(B,)`` each."""
    best, tokens = log_probs.max(dim=-1)
    return best, tokens


def _best_token_fast(log_probs: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`_best_token` by :func:`attnlab.fast.top_k_rows` (the CPU's ``max(dim)`` selects per row in scalar code)."""
    best, tokens = fast.top_k_rows(log_probs, 1)  # (B, 1) each
    return best[:, 0], tokens[:, 0]


@dataclass
class _Rows:
    """The rows still decoding; row ``j`` of every field is the same sentence."""

    index: Tensor  # (B,) the row's position in the caller's batch
    tokens: Tensor  # (B,) the last token fed back (first <bos>)
    scores: Tensor  # (B,) float64 sum of the generated tokens' log-probabilities
    history: Tensor  # (B, t) generated ids
    attention: dict[str, list[Tensor]] | None  # name -> per step (B, L, H, keys_t); None: not wanted

    @classmethod
    def start(cls, batch_size: int, device: torch.device, need_weights: bool) -> _Rows:
        return cls(
            index=torch.arange(batch_size, device=device),
            tokens=torch.full((batch_size,), BOS, dtype=torch.int64, device=device),
            scores=torch.zeros(batch_size, dtype=torch.float64, device=device),
            history=torch.empty((batch_size, 0), dtype=torch.int64, device=device),
            attention={} if need_weights else None,
        )

    def extend(self, best: Tensor, tokens: Tensor, attention: dict[str, Tensor] | None) -> None:
        """Append this step's ``tokens (B,)``, their log-probabilities ``best (B,)`` and attention rows."""
        self.tokens = tokens
        self.scores = self.scores + best.to(torch.float64)
        # Outputs are stored without <eos>; an <eos> is always the last token, so it needs no slot.
        self.history = torch.cat([self.history, tokens[:, None]], dim=1)  # (B, t)
        if self.attention is not None:
            for name, w in (attention or {}).items():  # w: (B, L, H, 1, keys)
                self.attention.setdefault(name, []).append(w[:, :, :, -1])  # (B, L, H, keys)

    def hypothesis(self, j: int, finished: bool, step: int, length_penalty: float) -> Hypothesis:
        """Row ``j`` as a :class:`Hypothesis` after ``step`` steps (``finished``: it just chose ``<eos>``)."""
        ids = self.history[j].tolist()
        if finished:
            ids = ids[:-1]
        score = float(self.scores[j])
        attention = None
        if self.attention is not None:
            attention = {name: stack_attention([s[j] for s in rows]) for name, rows in self.attention.items()}
        return Hypothesis(ids, score, normalize(score, step, length_penalty), finished, attention)

    def select(self, keep: Tensor) -> _Rows:
        """The rows ``keep (B',)``, in that order."""
        attention = self.attention
        if attention is not None:
            attention = {name: [s[keep] for s in rows] for name, rows in attention.items()}
        return _Rows(self.index[keep], self.tokens[keep], self.scores[keep], self.history[keep], attention)
