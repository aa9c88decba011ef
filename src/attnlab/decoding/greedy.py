"""Greedy decoding through the model protocol (notes §22: at test time the decoder feeds back its own
previous output, one token at a time, instead of the teacher-forced reference).

Dimension key: B batch (rows still decoding), S source len, V vocab, L layers, H heads,
T_out generated steps.

One implementation serves every model (STYLE.md habit 6): it only calls ``model.encode``,
``model.init_state``, ``model.step`` and ``DecoderState.select``. Rows are decoded together; a row
that emits ``<eos>`` or reaches its length limit is finished and removed from the batch (its state
rows dropped with ``select``), so long outputs do not keep short ones' compute alive.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.data.vocab import BOS, EOS
from attnlab.decoding.hypothesis import (
    Hypothesis,
    as_length_tensor,
    max_lengths,
    normalize,
    stack_attention,
    step_log_probs,
    top_k_rows,
)

__all__ = ["greedy_search", "max_lengths"]


@torch.inference_mode()
def greedy_search(
    model: nn.Module,
    src: Tensor,
    src_valid_lens: Tensor,
    max_len: int | Tensor,
    need_weights: bool = False,
    length_penalty: float = 1.0,
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

    Returns:
        ``B`` hypotheses in input order. ``<pad> <bos> <unk>`` are never emitted (see
        :mod:`attnlab.decoding.hypothesis`); a row that reaches ``max_len`` without ``<eos>`` comes back
        with ``finished=False``.

    Raises:
        ValueError: if a length limit is below 1 or ``max_len``'s shape is not ``(B,)``.
    """
    batch_size, device = src.shape[0], src.device
    limits = as_length_tensor(max_len, batch_size, device)
    results: list[Hypothesis | None] = [None] * batch_size
    if batch_size == 0:
        return []
    was_training = model.training
    model.eval()  # dropout off: decoding must be deterministic
    try:
        enc = model.encode(src, src_valid_lens)
        state = model.init_state(enc, src_valid_lens)
        rows = torch.arange(batch_size, device=device)  # original position of each active row
        tokens = torch.full((batch_size,), BOS, dtype=torch.int64, device=device)
        scores = torch.zeros(batch_size, dtype=torch.float64, device=device)
        history = torch.empty((batch_size, 0), dtype=torch.int64, device=device)  # (B, t) generated ids
        attn_steps: dict[
            str, list[Tensor]
        ] = {}  # name -> per step (B_t, L, H, keys_t), rows aligned with `rows`
        step = 0
        while rows.numel() > 0:
            step += 1
            out = model.step(tokens, state, need_weights=need_weights)
            log_probs = step_log_probs(out.logits)  # (B, V)
            best, tokens = (t[:, 0] for t in top_k_rows(log_probs, 1))  # (B,) each; max(dim) is 3x slower
            scores = scores + best.to(torch.float64)
            if need_weights:
                for name, w in (out.attention or {}).items():  # w: (B, L, H, 1, keys)
                    attn_steps.setdefault(name, []).append(w[:, :, :, -1])  # (B, L, H, keys)
            ended = tokens == EOS
            done = ended | (limits[rows] <= step)
            # Outputs are stored without <eos>; an <eos> is always the last token, so it needs no slot.
            history = torch.cat([history, tokens[:, None]], dim=1)  # (B, t)
            if bool(done.any()):
                for j in done.nonzero().flatten().tolist():
                    finished = bool(ended[j])
                    ids = history[j].tolist()
                    if finished:
                        ids = ids[:-1]
                    score = float(scores[j])
                    attention = None
                    if need_weights:
                        attention = {
                            name: stack_attention([s[j] for s in steps]) for name, steps in attn_steps.items()
                        }
                    results[int(rows[j])] = Hypothesis(
                        ids, score, normalize(score, step, length_penalty), finished, attention
                    )
                keep = (~done).nonzero().flatten()  # (B',)
                if keep.numel() == 0:
                    break
                state = out.state.select(keep)
                rows, tokens, scores, history = rows[keep], tokens[keep], scores[keep], history[keep]
                attn_steps = {name: [s[keep] for s in steps] for name, steps in attn_steps.items()}
            else:
                state = out.state
    finally:
        model.train(was_training)
    assert all(h is not None for h in results)  # every row ends by <eos> or by its limit
    return results  # type: ignore[return-value]
