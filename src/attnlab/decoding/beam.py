"""Beam search through the model protocol, batched over sentences (notes §22).

Dimension key: B batch (sentences still decoding), K beam size, V vocab, L layers, H heads,
T_out generated steps. The decoder runs on ``B * K`` rows: row ``i * K + j`` is beam ``j`` of
sentence ``i``.

The search, at every step and for every sentence:

1. extends each live beam by every token: candidate score = beam score + ``log p(token)``
   (``<pad> <bos> <unk>`` banned, see :mod:`attnlab.decoding.hypothesis`); only each beam's ``K``
   best tokens can be among the sentence's ``K`` best candidates, so only those are ranked;
2. keeps the ``K`` best candidates by raw score. Those ending in ``<eos>`` are set aside as finished
   hypotheses (ranked by GNMT's length-normalised score, only the ``nbest`` best are kept); their
   slots are dead for one step (score ``-inf``), and the next step refills all ``K`` slots from the
   live beams' extensions;
3. stops the sentence — removing its ``K`` rows from the batch with ``DecoderState.select`` — when
   it reaches its length limit, when no beam is live, or when no live beam can still beat the worst
   kept finished hypothesis. That test is exact, not a heuristic: a future hypothesis descends from a
   live beam, so its raw score is at most the beam's (log-probabilities are <= 0) and its length at
   most the limit, hence its normalised score is at most ``best live score / lp(limit)``. Stopping
   early therefore never changes the result.

With ``K = 1`` step 2 keeps the argmax, and an ``<eos>`` leaves no live beam, so beam search returns
exactly greedy search's tokens and scores (a test checks it).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.data.vocab import BOS, EOS
from attnlab.decoding.hypothesis import (
    Hypothesis,
    as_length_tensor,
    gnmt_length_penalty,
    normalize,
    stack_attention,
    step_log_probs,
    top_k_rows,
)

__all__ = ["beam_search"]


def _insert(kept: list[Hypothesis], hyp: Hypothesis, nbest: int) -> None:
    """Add ``hyp`` to the list sorted by normalised score (best first, ties: earlier first); keep ``nbest``."""
    kept.append(hyp)
    kept.sort(key=lambda h: -h.normalized_score)  # stable: among equals, the earlier (shorter) stays first
    del kept[nbest:]


@torch.inference_mode()
def beam_search(
    model: nn.Module,
    src: Tensor,
    src_valid_lens: Tensor,
    beam_size: int,
    max_len: int | Tensor,
    length_penalty: float = 1.0,
    nbest: int = 1,
    need_weights: bool = False,
) -> list[list[Hypothesis]]:
    """Beam search for each source sentence; returns its ``nbest`` best hypotheses, best first.

    Args:
        model: any attnlab model (``encode`` / ``init_state`` / ``step``); put in eval mode for the call,
            its previous mode restored afterwards.
        src: ``(B, S)`` source ids (with ``<eos>``, padded).
        src_valid_lens: ``(B,)`` source lengths.
        beam_size: ``K >= 1`` live hypotheses per sentence.
        max_len: the most decoding steps per sentence, ``<eos>`` step included: an int, or a ``(B,)``
            tensor (see :func:`attnlab.decoding.greedy.max_lengths`).
        length_penalty: GNMT ``alpha >= 0``; hypotheses are ranked by ``score / ((5 + len) / 6) ** alpha``.
        nbest: how many hypotheses to return per sentence, ``1 <= nbest <= beam_size``.
        need_weights: also return each hypothesis' attention weights (see :class:`Hypothesis`).

    Returns:
        For each sentence, in input order, up to ``nbest`` hypotheses: finished ones (ending in
        ``<eos>``) by normalised score, then — only if fewer than ``nbest`` finished — the best ones
        that reached the length limit without ``<eos>`` (``finished=False``).

    Raises:
        ValueError: on ``beam_size < 1``, ``nbest`` outside ``[1, beam_size]``, ``length_penalty < 0``,
            a length limit below 1 or a ``max_len`` tensor not shaped ``(B,)``.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size={beam_size} must be >= 1")
    if not 1 <= nbest <= beam_size:
        raise ValueError(f"nbest={nbest} must lie between 1 and beam_size={beam_size}")
    if length_penalty < 0:
        raise ValueError(f"length_penalty={length_penalty} must be >= 0")
    batch_size, device, K = src.shape[0], src.device, beam_size
    limits = as_length_tensor(max_len, batch_size, device)
    if batch_size == 0:
        return []
    finished: list[list[Hypothesis]] = [[] for _ in range(batch_size)]
    unfinished: list[list[Hypothesis]] = [[] for _ in range(batch_size)]
    was_training = model.training
    model.eval()  # dropout off: decoding must be deterministic
    try:
        enc = model.encode(src, src_valid_lens)
        state = model.init_state(enc, src_valid_lens)
        state = state.select(torch.arange(batch_size, device=device).repeat_interleave(K))  # (B*K) rows
        sent = torch.arange(batch_size, device=device)  # (B,) original index of each active sentence
        tokens = torch.full((batch_size * K,), BOS, dtype=torch.int64, device=device)
        # All K beams start as the same empty prefix: only beam 0 is live, or the first step would
        # fill the beam with K copies of the best token.
        scores = torch.full((batch_size, K), float("-inf"), dtype=torch.float64, device=device)
        scores[:, 0] = 0.0
        history = torch.empty((batch_size * K, 0), dtype=torch.int64, device=device)  # (B*K, t) generated ids
        # The nbest-th best normalised finished score of each active sentence; -inf until nbest are kept,
        # so only a sentence with no live beam (bound -inf) can stop before that.
        threshold = torch.full((batch_size,), float("-inf"), dtype=torch.float64, device=device)
        attn_steps: dict[str, list[Tensor]] = {}  # name -> per step (B*K, L, H, keys_t), rows as `history`
        step = 0
        while sent.numel() > 0:
            step += 1
            n_active = sent.numel()
            out = model.step(tokens, state, need_weights=need_weights)
            log_probs = step_log_probs(out.logits)  # (B*K, V) float32
            # The K best of a sentence's K*V candidates are among the K best tokens of each beam (a
            # candidate outside its beam's top K has K better ones beside it), so rank K*K, not K*V:
            # no float64 copy of the (B*K, V) log-probabilities, and a K-wide top-k per beam row.
            k_tok = min(K, log_probs.shape[-1])
            beam_lp, beam_tok = top_k_rows(log_probs, k_tok)  # (B*K, k_tok) each, best first
            cand = scores.unsqueeze(-1) + beam_lp.to(torch.float64).view(n_active, K, k_tok)
            top_scores, top_idx = cand.view(n_active, K * k_tok).topk(K, dim=1)  # (B, K), best first
            parent = torch.div(top_idx, k_tok, rounding_mode="floor")  # (B, K) beam each candidate extends
            top_tokens = beam_tok.view(n_active, K * k_tok).gather(1, top_idx)  # (B, K)
            # (B, K) the row (in this step's numbering) each candidate extends
            parent_rows = torch.arange(n_active, device=device)[:, None] * K + parent
            live = torch.isfinite(top_scores)
            ended = live & (top_tokens == EOS)
            cont = live & ~ended  # candidates that stay in the beam
            at_limit = limits[sent] <= step  # (B,)
            step_attn: dict[str, Tensor] = {}
            if need_weights:
                # (B*K, L, H, 1, keys) -> (B*K, L, H, keys)
                step_attn = {name: w[:, :, :, -1] for name, w in (out.attention or {}).items()}

            # Set aside the hypotheses this step settles: <eos> candidates (finished), and the continuing
            # candidates of sentences at their limit (unfinished). Few per step: a Python loop is fine.
            settled = ended | (cont & at_limit[:, None])  # (B, K)
            for i, j in settled.nonzero().tolist():
                is_finished = bool(ended[i, j])
                row = int(parent_rows[i, j])
                ids = history[row].tolist() + ([] if is_finished else [int(top_tokens[i, j])])
                score = float(top_scores[i, j])
                attention = None
                if need_weights:
                    attention = {
                        name: stack_attention([s[row] for s in attn_steps.get(name, [])] + [w[row]])
                        for name, w in step_attn.items()
                    }
                hyp = Hypothesis(ids, score, normalize(score, step, length_penalty), is_finished, attention)
                kept = (finished if is_finished else unfinished)[int(sent[i])]
                _insert(kept, hyp, nbest)
                if is_finished and len(kept) == nbest:
                    threshold[i] = kept[-1].normalized_score

            scores = top_scores.masked_fill(~cont, float("-inf"))  # (B, K) finished slots die for a step
            best_live = scores.max(dim=1).values  # (B,)
            # The best normalised score any future hypothesis of the sentence can reach (see the module doc).
            bound = best_live / gnmt_length_penalty(limits[sent], length_penalty)
            done = at_limit | (bound <= threshold)  # all beams dead gives bound = -inf: done too
            keep = (~done).nonzero().flatten()  # (B',)
            if keep.numel() == 0:
                break
            rows = parent_rows[keep].flatten()  # (B'*K,) parent row of every surviving slot
            state = out.state.select(rows)
            tokens = top_tokens[keep].flatten()  # (B'*K,)
            history = torch.cat([history[rows], tokens[:, None]], dim=1)  # (B'*K, t)
            scores, sent, threshold = scores[keep], sent[keep], threshold[keep]
            if need_weights:
                attn_steps = {
                    name: [s[rows] for s in attn_steps.get(name, [])] + [w[rows]]
                    for name, w in step_attn.items()
                }
    finally:
        model.train(was_training)
    return [(finished[b] + unfinished[b])[:nbest] for b in range(batch_size)]
