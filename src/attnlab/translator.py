"""One inference object shared by the CLI, the web server and notebooks (STYLE.md habit 13).

>>> tr = Translator.from_run("runs/transformer")          # doctest: +SKIP
>>> tr.translate(["i'm home ."])                           # doctest: +SKIP
['je suis chez moi.']

Sentences are preprocessed as in training (D2L §4), sorted by length into batches (padding is
wasted work), decoded greedily or with beam search through the model protocol, detokenised, and
returned in the caller's order. An empty line gives an empty translation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab import runs
from attnlab.config import AUTO_DECODE_ROWS, Config, DecodeConfig
from attnlab.data.batching import collate
from attnlab.data.vocab import load_tokenizer
from attnlab.decoding.beam import beam_search
from attnlab.decoding.greedy import greedy_search, max_lengths
from attnlab.device import pick_device
from attnlab.models import build_model


def decode_many(
    model: nn.Module,
    src_seqs: list[list[int]],
    dcfg: DecodeConfig,
    device: torch.device,
    beam_size: int | None = None,
    nbest: int = 1,
    need_weights: bool = False,
    batch_size: int | None = None,
    max_len: int | None = None,
) -> list[list[Any]]:
    """Translate id sequences (no ``<eos>``); returns, per input and in input order, a list of hypotheses.

    Inputs are sorted by length so each batch holds similar lengths (less padding), then restored.
    ``max_len`` caps the decoding steps per sentence (the final ``<eos>`` included) below what
    ``decode.max_len_a/b`` and the model's position table allow (the web server's output limit).
    """
    beam = beam_size or dcfg.beam_size
    bs = batch_size or dcfg.batch_size or max(1, AUTO_DECODE_ROWS // beam)  # auto: a fixed number of rows
    order = sorted(range(len(src_seqs)), key=lambda i: len(src_seqs[i]))
    results: list[list[Any]] = [[] for _ in src_seqs]
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(order), bs):
            idx = order[start : start + bs]
            batch = collate([src_seqs[i] for i in idx], [[] for _ in idx], idx)
            src = batch.src.to(device)
            valid = batch.src_valid_lens.to(device)
            cap = _length_cap(model, src.shape[1])
            if max_len is not None:
                cap = max(1, min(cap, int(max_len)))
            limit = max_lengths(valid, dcfg.max_len_a, dcfg.max_len_b, cap=cap)
            if beam == 1 and nbest == 1:
                hyps = [[h] for h in greedy_search(model, src, valid, limit, need_weights=need_weights)]
            else:
                hyps = beam_search(
                    model,
                    src,
                    valid,
                    beam,
                    limit,
                    dcfg.length_penalty,
                    nbest=nbest,
                    need_weights=need_weights,
                )
            for i, h in zip(idx, hyps):
                results[i] = h
    model.train(was_training)
    return results


def _length_cap(model: nn.Module, src_len: int = 0) -> int:
    """Most output tokens the model's position table allows (decoder-only: after the source)."""
    cfg = getattr(model, "config", None)
    max_pos = int(getattr(cfg, "max_positions", 1024))
    if getattr(cfg, "kind", "") == "decoder-only":
        return max(1, max_pos - src_len - 1)
    return max_pos


@dataclass
class Translation:
    """One hypothesis. ``truncated``: the source was longer than :attr:`Translator.max_src_tokens` and
    only its first ``max_src_tokens`` tokens were translated (the caller should say so)."""

    text: str
    tokens: list[str]
    score: float
    finished: bool
    truncated: bool = False


@dataclass
class AttentionResult:
    """Everything needed to draw one sentence's attention maps."""

    source: str
    translation: str
    src_tokens: list[str]  # keys of enc_self / cross (with <eos>)
    tgt_tokens: list[str]  # generated tokens (with the final <eos> when finished)
    tgt_inputs: list[str]  # decoder inputs: <bos> y1 … (queries of dec_self / cross)
    attention: dict[str, Tensor] = field(default_factory=dict)  # kind -> (layers, heads, queries, keys)
    truncated: bool = False


class Translator:
    def __init__(
        self,
        model: nn.Module,
        src_tok,
        tgt_tok,
        cfg: Config,
        device: torch.device | None = None,
        run_dir: Path | None = None,
        checkpoint: Path | None = None,
    ) -> None:
        self.model = model.eval()
        self.src_tok, self.tgt_tok, self.cfg = src_tok, tgt_tok, cfg
        self.device = device or next(model.parameters()).device
        self.run_dir, self.checkpoint = run_dir, checkpoint
        # Longest source accepted: what the positional table and the output bound allow.
        cap = _length_cap(model, 0)
        a, b = cfg.decode.max_len_a, cfg.decode.max_len_b
        self.max_src_tokens = max(
            1, min(512, int((cap - b - 2) / (1 + a)) if cfg.model.kind == "decoder-only" else cap - 2)
        )

    @classmethod
    def from_run(cls, run_dir: str | Path, which: str = "best", device: str = "cpu") -> Translator:
        run_dir = Path(run_dir)
        files = runs.read_run(run_dir)
        path = runs.resolve_checkpoint(run_dir, which)
        src_tok = load_tokenizer(files.tokenizers["src"])
        tgt_tok = load_tokenizer(files.tokenizers["tgt"])
        model = build_model(files.config.model, len(src_tok), len(tgt_tok))
        runs.load_weights(path, model)
        dev = pick_device(device)
        return cls(model.to(dev), src_tok, tgt_tok, files.config, dev, run_dir, path)

    def encode_source(self, sentence: str) -> tuple[list[int], bool]:
        ids = self.src_tok.encode(sentence)
        truncated = len(ids) > self.max_src_tokens
        return ids[: self.max_src_tokens], truncated

    def translate(
        self,
        sentences: list[str],
        beam_size: int | None = None,
        nbest: int = 1,
        length_penalty: float | None = None,
    ) -> list[list[Translation]]:
        """Translate each sentence; returns ``nbest`` translations per sentence, best first.

        Never raises on text: any ``str`` (emoji, CJK, control characters, lone surrogates) is
        preprocessed (unknown words become ``<unk>``); a sentence with no tokens left gets one empty
        translation; a source over :attr:`max_src_tokens` is cut and flagged ``truncated``.
        """
        dcfg = self.cfg.decode
        if length_penalty is not None:
            dcfg = DecodeConfig(**{**dcfg.__dict__, "length_penalty": length_penalty})
        beam = beam_size or dcfg.beam_size
        nbest = min(nbest, beam)
        out: list[list[Translation]] = [[] for _ in sentences]
        encoded = [self.encode_source(s) for s in sentences]
        todo = [(i, ids) for i, (ids, _) in enumerate(encoded) if ids]
        hyps = decode_many(
            self.model, [ids for _, ids in todo], dcfg, self.device, beam_size=beam, nbest=nbest
        )
        for (i, _), hs in zip(todo, hyps):
            out[i] = [
                Translation(
                    self.tgt_tok.decode(h.tokens),
                    [self.tgt_tok.id_to_token(t) for t in h.tokens],
                    float(h.score),
                    bool(h.finished),
                    encoded[i][1],
                )
                for h in hs
            ]
        for i, _s in enumerate(sentences):
            if not out[i]:
                out[i] = [Translation("", [], 0.0, True)]
        return out

    def translate_text(self, sentences: list[str], beam_size: int | None = None) -> list[str]:
        return [t[0].text for t in self.translate(sentences, beam_size=beam_size)]

    def attention(self, sentence: str, beam_size: int = 1, max_len: int | None = None) -> AttentionResult:
        """Translate one sentence and return every attention map along the way.

        The maps are recomputed by one teacher-forced forward pass over the chosen output, so
        each kind comes with all its layers and heads, shaped (layers, heads, queries, keys).
        ``max_len``: at most this many output tokens (the final ``<eos>`` included), see :func:`decode_many`.
        """
        from attnlab.data.vocab import BOS

        ids, truncated = self.encode_source(sentence)
        hyp = (
            decode_many(self.model, [ids], self.cfg.decode, self.device, beam_size=beam_size, max_len=max_len)[0][0]
            if ids
            else None
        )
        hyp_tokens = list(hyp.tokens) if hyp is not None else []
        finished = bool(hyp.finished) if hyp is not None else True
        batch = collate([ids], [hyp_tokens], [0])
        with torch.inference_mode():
            out = self.model(
                batch.src.to(self.device),
                batch.src_valid_lens.to(self.device),
                batch.tgt_in.to(self.device),
                need_weights=True,
            )
        maps = {k: v[0].float().cpu() for k, v in (out.attention or {}).items()}  # (layers, heads, Q, K)
        src_tokens = [self.src_tok.id_to_token(i) for i in ids] + ["<eos>"]
        tgt_tokens = [self.tgt_tok.id_to_token(i) for i in hyp_tokens] + (["<eos>"] if finished else [])
        tgt_inputs = [self.tgt_tok.id_to_token(BOS)] + [self.tgt_tok.id_to_token(i) for i in hyp_tokens]
        if not finished:  # no <eos> was produced: the last decoder input predicts nothing we kept
            n = len(tgt_tokens)
            tgt_inputs = tgt_inputs[:n]
            if "cross" in maps:
                maps["cross"] = maps["cross"][..., :n, :]  # (L, H, n, S)
            if "dec_self" in maps:
                maps["dec_self"] = maps["dec_self"][..., :n, :n]  # (L, H, n, n)
            if "self" in maps:  # decoder-only: source + <bos> y1..yn, the last input predicts nothing kept
                maps["self"] = maps["self"][..., :-1, :-1]  # (L, H, S+n, S+n)
        return AttentionResult(
            sentence, self.tgt_tok.decode(hyp_tokens), src_tokens, tgt_tokens, tgt_inputs, maps, truncated
        )
