"""Beam search through the model protocol, batched over sentences (notes §22).

Dimension key: B batch (sentences still decoding), K beam size, V vocab, L layers, H heads,
T_out generated steps. The decoder runs on ``B * K`` rows: row ``i * K + j`` is beam ``j`` of
sentence ``i``.

The search, at every step and for every sentence:

1. extends each live beam by every token: candidate score = beam score + ``log p(token)``
   (``<pad> <bos> <unk>`` banned, see :mod:`attnlab.decoding.hypothesis`); only each beam's ``K``
   best tokens can be among the sentence's ``K`` best candidates, so only those are ranked (each
   row's ``topk``; :func:`attnlab.fast.top_k_rows` with the fast kernels, see :mod:`attnlab.fast`);
2. keeps the ``K`` best candidates by raw score. Those ending in ``<eos>`` are set aside as finished
   hypotheses (ranked by GNMT's length-normalised score, only the ``nbest`` best are kept); their
   slots are dead for one step (score ``-inf``), and the next step refills all ``K`` slots from the
   live beams' extensions;
3. stops the sentence — removing its ``K`` rows from the batch with ``DecoderState.select`` — when
   it reaches its length limit, when no beam is live, or when no live beam can still beat the worst
   kept finished hypothesis. The test is exact, so stopping early never changes the result
   (docs/explanations/beam-search.md).

With ``K = 1`` step 2 keeps the argmax, and an ``<eos>`` leaves no live beam, so beam search returns
exactly greedy search's tokens and scores (a test checks it).
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
    gnmt_length_penalty,
    normalize,
    stack_attention,
    step_log_probs,
)

__all__ = ["beam_search"]


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
    no_repeat_ngram_size: int = 0,
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
        no_repeat_ngram_size: ``n > 0`` bans a token that would repeat an n-gram of its beam's output
            (:func:`attnlab.decoding.hypothesis.ban_repeated_ngrams_`).

    Returns:
        For each sentence, in input order, up to ``nbest`` hypotheses: finished ones (ending in
        ``<eos>``) by normalised score, then — only if fewer than ``nbest`` finished — the best ones
        that reached the length limit without ``<eos>`` (``finished=False``).

    Raises:
        ValueError: on ``beam_size < 1``, ``nbest`` outside ``[1, beam_size]``, ``length_penalty < 0``,
            a length limit below 1 or a ``max_len`` tensor not shaped ``(B,)``.
    """
    _check_arguments(beam_size, nbest, length_penalty)
    batch_size, device, K = src.shape[0], src.device, beam_size
    limits = as_length_tensor(max_len, batch_size, device)
    if batch_size == 0:
        return []
    top_k = fast.top_k_rows if fast.enabled(model, device) else torch.topk  # the same values, best first
    kept = _Kept(batch_size, nbest)
    was_training = model.training
    model.eval()  # dropout off: decoding must be deterministic
    try:
        state = model.init_state(model.encode(src, src_valid_lens), src_valid_lens)
        state = state.select(torch.arange(batch_size, device=device).repeat_interleave(K))  # (B*K) rows
        beams = _Beams.start(batch_size, K, device, need_weights)
        step = 0
        while True:
            step += 1
            out = model.step(beams.tokens, state, need_weights=need_weights)
            log_probs = step_log_probs(out.logits)  # (B*K, V)
            if no_repeat_ngram_size:
                ban_repeated_ngrams_(log_probs, beams.history, no_repeat_ngram_size)
            cand = _best_extensions(beams.scores, log_probs, top_k)
            at_limit = limits[beams.sent] <= step  # (B,)
            step_attn: dict[str, Tensor] = {}
            if need_weights:  # (B*K, L, H, 1, keys) -> (B*K, L, H, keys)
                step_attn = {name: w[:, :, :, -1] for name, w in (out.attention or {}).items()}
            _set_aside(cand, at_limit, beams, kept, step, length_penalty, step_attn)

            scores = cand.scores.masked_fill(~cand.cont, float("-inf"))  # (B, K): finished slots die a step
            # The best normalised score any future hypothesis of the sentence can reach (see the module doc).
            bound = scores.max(dim=1).values / gnmt_length_penalty(limits[beams.sent], length_penalty)  # (B,)
            done = at_limit | (bound <= beams.threshold)  # all beams dead gives bound = -inf: done too
            keep = (~done).nonzero().flatten()  # (B',)
            if keep.numel() == 0:
                break
            rows = cand.parent_rows[keep].flatten()  # (B'*K,) parent row of every surviving slot
            state = out.state.select(rows)
            beams = beams.advance(keep, rows, cand.tokens[keep].flatten(), scores[keep], step_attn)
    finally:
        model.train(was_training)
    return kept.results()


def _check_arguments(beam_size: int, nbest: int, length_penalty: float) -> None:
    if beam_size < 1:
        raise ValueError(f"beam_size={beam_size} must be >= 1")
    if not 1 <= nbest <= beam_size:
        raise ValueError(f"nbest={nbest} must lie between 1 and beam_size={beam_size}")
    if length_penalty < 0:
        raise ValueError(f"length_penalty={length_penalty} must be >= 0")


@dataclass
class _Candidates:
    """Each sentence's ``K`` best one-token extensions of its beams at one step, best first."""

    scores: Tensor  # (B, K) float64: beam score + log p(token); -inf where no live beam gave one
    tokens: Tensor  # (B, K)
    parent_rows: Tensor  # (B, K) the decoder row each extends, numbered as this step's B*K rows
    ended: Tensor  # (B, K) bool: a live candidate ending in <eos>
    cont: Tensor  # (B, K) bool: a live candidate that stays in the beam


def _best_extensions(scores: Tensor, log_probs: Tensor, top_k) -> _Candidates:
    """Steps 1 and 2 of the module doc: rank each sentence's candidates, keep its ``K`` best.

    ``scores (B, K)`` are the beam scores (``-inf``: a dead slot), ``log_probs (B*K, V)`` this step's;
    ``top_k(x, k)`` is ``torch.topk`` or :func:`attnlab.fast.top_k_rows`.
    """
    n_active, K = scores.shape
    # The K best of a sentence's K*V candidates are among the K best tokens of each beam (a
    # candidate outside its beam's top K has K better ones beside it), so rank K*K, not K*V:
    # no float64 copy of the (B*K, V) log-probabilities, and a K-wide top-k per beam row.
    k_tok = min(K, log_probs.shape[-1])
    beam_lp, beam_tok = top_k(log_probs, k_tok)  # (B*K, k_tok) each, best first
    cand = scores.unsqueeze(-1) + beam_lp.to(torch.float64).view(n_active, K, k_tok)  # (B, K, k_tok)
    top_scores, top_idx = cand.view(n_active, K * k_tok).topk(K, dim=1)  # (B, K), best first
    parent = torch.div(top_idx, k_tok, rounding_mode="floor")  # (B, K) beam each candidate extends
    top_tokens = beam_tok.view(n_active, K * k_tok).gather(1, top_idx)  # (B, K)
    parent_rows = torch.arange(n_active, device=scores.device)[:, None] * K + parent  # (B, K)
    live = torch.isfinite(top_scores)
    ended = live & (top_tokens == EOS)
    return _Candidates(top_scores, top_tokens, parent_rows, ended, live & ~ended)


def _set_aside(cand: _Candidates, at_limit: Tensor, beams: _Beams, kept: _Kept, step: int,
               length_penalty: float, step_attn: dict[str, Tensor]) -> None:
    """Keep the hypotheses this step settles, and raise each sentence's threshold once it has ``nbest``.

    They are the ``<eos>`` candidates (finished) and the continuing candidates of sentences at their
    length limit ``at_limit (B,)`` (unfinished). Few per step: a Python loop is fine.
    """
    settled = cand.ended | (cand.cont & at_limit[:, None])  # (B, K)
    for i, j in settled.nonzero().tolist():
        token = None if bool(cand.ended[i, j]) else int(cand.tokens[i, j])
        hyp = beams.hypothesis(int(cand.parent_rows[i, j]), token, float(cand.scores[i, j]), step,
                               length_penalty, step_attn)
        worst = kept.add(int(beams.sent[i]), hyp)
        if worst is not None:
            beams.threshold[i] = worst


@dataclass
class _Beams:
    """The beams of the sentences still decoding; sentence ``i``'s beam ``j`` is decoder row ``i * K + j``."""

    sent: Tensor  # (B,) the sentence's position in the caller's batch
    tokens: Tensor  # (B*K,) the last token fed back (first <bos>)
    scores: Tensor  # (B, K) float64 beam scores; -inf: a dead slot
    history: Tensor  # (B*K, t) generated ids
    # The nbest-th best normalised finished score of each sentence; -inf until nbest are kept,
    # so only a sentence with no live beam (bound -inf) can stop before that.
    threshold: Tensor  # (B,) float64
    attention: dict[str, list[Tensor]] | None  # name -> per step (B*K, L, H, keys_t), rows as `history`

    @classmethod
    def start(cls, batch_size: int, K: int, device: torch.device, need_weights: bool) -> _Beams:
        # All K beams start as the same empty prefix: only beam 0 is live, or the first step would
        # fill the beam with K copies of the best token.
        scores = torch.full((batch_size, K), float("-inf"), dtype=torch.float64, device=device)
        scores[:, 0] = 0.0
        return cls(
            sent=torch.arange(batch_size, device=device),
            tokens=torch.full((batch_size * K,), BOS, dtype=torch.int64, device=device),
            scores=scores,
            history=torch.empty((batch_size * K, 0), dtype=torch.int64, device=device),
            threshold=torch.full((batch_size,), float("-inf"), dtype=torch.float64, device=device),
            attention={} if need_weights else None,
        )

    def hypothesis(self, row: int, token: int | None, score: float, step: int, length_penalty: float,
                   step_attn: dict[str, Tensor]) -> Hypothesis:
        """Row ``row``'s prefix extended by ``token`` (``None``: by ``<eos>``, finished), scored ``score``."""
        finished = token is None
        ids = self.history[row].tolist() + ([] if finished else [token])
        attention = None
        if self.attention is not None:
            attention = {
                name: stack_attention([s[row] for s in self.attention.get(name, [])] + [w[row]])
                for name, w in step_attn.items()
            }
        return Hypothesis(ids, score, normalize(score, step, length_penalty), finished, attention)

    def advance(self, keep: Tensor, rows: Tensor, tokens: Tensor, scores: Tensor,
                step_attn: dict[str, Tensor]) -> _Beams:
        """The next step's beams: sentences ``keep (B',)``, slot ``r`` = row ``rows[r]`` + ``tokens[r]``."""
        attention = self.attention
        if attention is not None:
            attention = {
                name: [s[rows] for s in attention.get(name, [])] + [w[rows]] for name, w in step_attn.items()
            }
        history = torch.cat([self.history[rows], tokens[:, None]], dim=1)  # (B'*K, t)
        return _Beams(self.sent[keep], tokens, scores, history, self.threshold[keep], attention)


class _Kept:
    """Each sentence's best hypotheses so far: finished ones, and those cut at the length limit."""

    def __init__(self, batch_size: int, nbest: int) -> None:
        self.finished: list[list[Hypothesis]] = [[] for _ in range(batch_size)]
        self.unfinished: list[list[Hypothesis]] = [[] for _ in range(batch_size)]
        self.nbest = nbest

    def add(self, b: int, hyp: Hypothesis) -> float | None:
        """Keep ``hyp`` if it is among sentence ``b``'s ``nbest``; once ``nbest`` finished ones are kept,
        return the worst one's normalised score (the sentence's new threshold), else ``None``."""
        kept = (self.finished if hyp.finished else self.unfinished)[b]
        kept.append(hyp)
        kept.sort(key=lambda h: -h.normalized_score)  # stable: among equals the earlier (shorter) stays first
        del kept[self.nbest :]
        return kept[-1].normalized_score if hyp.finished and len(kept) == self.nbest else None

    def results(self) -> list[list[Hypothesis]]:
        """Per sentence, finished hypotheses first (best first), then unfinished ones; ``nbest`` at most."""
        return [(f + u)[: self.nbest] for f, u in zip(self.finished, self.unfinished)]
