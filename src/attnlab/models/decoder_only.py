"""A GPT-style decoder-only translation model (notes §28).

It reads one sequence ``source <eos> <bos> target`` (the batch's source already ends in
``<eos>``; ``tgt_in`` starts with ``<bos>``) through a stack of self-attention blocks under a causal
mask — the very mask of the Transformer decoder's masked self-attention (notes §18, §28.3) — and
is trained on the target part only: it returns logits for the target positions.

Details that keep it exact under padding:
- separate source and target embedding tables, so each language keeps its own vocabulary;
- source padding sits between the source and the target; it is masked as keys, and target
  positions continue from each example's *valid* source length (``position = src_valid_len + t``),
  so padding never changes a real token's position or what it sees;
- incremental decoding runs the source once (``encode`` fills a KV cache per layer) and then
  appends one target token per ``step``.

Dimension key: B batch, S source len, T target len, N = S + T, D model dim, H heads, L layers,
V target vocab.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.attention.kv_cache import KVCache
from attnlab.attention.masks import padding_mask
from attnlab.attention.positional import check_positions
from attnlab.config import ModelConfig
from attnlab.models.outputs import EncoderOutput, ModelOutput, StepOutput
from attnlab.models.protocol import DecoderState
from attnlab.models.traits import ModelTraits
from attnlab.models.transformer import (
    EncoderBlock,
    init_blocks,
    make_embedding,
    make_positional,
    stack_weights,
)


@dataclass
class DecoderOnlyState(DecoderState):
    caches: list[KVCache]  # per layer, (B, H, S + t, Dh): keys/values of the source and past targets
    key_mask: Tensor  # (B, S + t) True = a key that may be attended (source pads are False)
    positions: Tensor  # (B,) position of the next target token: src_valid_len + t
    length: int  # S + t: cached keys so far (a host int, to check max_positions without a sync)


class DecoderOnly(nn.Module):
    """Causal Transformer over ``source <eos> <bos> target`` obeying the attnlab model protocol."""

    @staticmethod
    def traits(cfg: ModelConfig) -> ModelTraits:
        return ModelTraits({"self": cfg.num_layers}, heads=cfg.num_heads,
                           embeddings=("src_embedding", "tgt_embedding"), one_sequence=True,
                           attention_modules={"self": "blocks.*.attention"})

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> None:
        super().__init__()
        self.config = cfg
        D = cfg.num_hiddens
        self.src_embedding = make_embedding(src_vocab_size, D)
        self.tgt_embedding = make_embedding(tgt_vocab_size, D)
        self.positional = make_positional(cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        # GPT's block is the encoder block (self-attention + FFN) run under a causal mask.
        self.blocks = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.num_layers))
        init_blocks(self.blocks)
        self.norm = nn.LayerNorm(D) if cfg.norm_first else nn.Identity()
        self.output = nn.Linear(D, tgt_vocab_size)  # the notes' W_o, b_o (§8)
        if cfg.tie_embeddings:
            self.output.weight = self.tgt_embedding.weight
        self.scale = math.sqrt(D)

    def _embed(self, table: nn.Embedding, tokens: Tensor, positions: Tensor) -> Tensor:
        return table(tokens) * self.scale + self.positional(positions)  # (B, T, D)

    def _source(self, src: Tensor) -> Tensor:
        S = src.shape[1]
        return self._embed(self.src_embedding, src, torch.arange(S, device=src.device))  # (B, S, D)

    def _target_positions(self, src_valid_lens: Tensor, T: int) -> Tensor:
        return src_valid_lens[:, None] + torch.arange(T, device=src_valid_lens.device)  # (B, T)

    def forward(
        self,
        src: Tensor,
        src_valid_lens: Tensor,
        tgt_in: Tensor,
        need_weights: bool = False,
        compute_logits: bool = True,
    ) -> ModelOutput:
        """Teacher-forced pass; ``hidden``/``logits`` cover the target part only ``(B, T, ·)``.

        ``attention["self"]``: ``(B, L, H, S + T, S + T)`` over the concatenated (padded) sequence.
        """
        (B, S), T = src.shape, tgt_in.shape[1]
        check_positions(S + T, self.config.max_positions)
        tgt = self._embed(self.tgt_embedding, tgt_in, self._target_positions(src_valid_lens, T))
        x = self.dropout(torch.cat([self._source(src), tgt], dim=1))  # (B, N, D)
        key_mask = torch.cat(
            [padding_mask(src_valid_lens, S), src_valid_lens.new_ones(B, T, dtype=torch.bool)], dim=1
        )  # (B, N): source pads may never be attended
        weights = []
        for block in self.blocks:
            x, w = block(x, key_mask[:, None, :], is_causal=True, need_weights=need_weights)
            weights.append(w)
        hidden = self.norm(x[:, S:])  # (B, T, D): only the target part is predicted
        attention = {"self": stack_weights(weights)} if need_weights else {}
        return ModelOutput(self.output(hidden) if compute_logits else None, hidden, attention)

    def encode(self, src: Tensor, src_valid_lens: Tensor, need_weights: bool = False) -> EncoderOutput:
        """Run the source prefix once; ``extra`` holds each layer's KV cache of it.

        ``memory (B, S, D)``: the prefix states; ``attention["self"]``: ``(B, L, H, S, S)`` if asked.
        """
        S = src.shape[1]
        check_positions(S, self.config.max_positions)
        x = self.dropout(self._source(src))
        mask = padding_mask(src_valid_lens, S)[:, None, :]  # (B, 1, S)
        caches, weights = [], []
        for block in self.blocks:
            cache = KVCache()
            x, w = block(x, mask, is_causal=True, need_weights=need_weights, cache=cache)
            caches.append(cache)
            weights.append(w)
        attention = {"self": stack_weights(weights)} if need_weights else {}
        return EncoderOutput(memory=self.norm(x), extra=caches, attention=attention)

    def init_state(self, enc: EncoderOutput, src_valid_lens: Tensor) -> DecoderOnlyState:
        S = enc.memory.shape[1]
        caches = [KVCache(c.k, c.v) for c in enc.extra]  # fresh objects: decoding never alters `enc`
        return DecoderOnlyState(caches, padding_mask(src_valid_lens, S), src_valid_lens.clone(), S)

    def step(self, tokens: Tensor, state: DecoderOnlyState, need_weights: bool = False) -> StepOutput:
        """Feed ``tokens (B,)`` at ``state.positions``; return next-token logits ``(B, V)``.

        ``attention["self"]``: ``(B, L, H, 1, S + t + 1)``. The input state is not modified.
        """
        check_positions(state.length + 1, self.config.max_positions)
        x = self._embed(self.tgt_embedding, tokens[:, None], state.positions[:, None])  # (B, 1, D)
        key_mask = torch.cat([state.key_mask, state.key_mask.new_ones(tokens.shape[0], 1)], dim=1)  # (B, K)
        caches = [KVCache(c.k, c.v) for c in state.caches]
        weights = []
        for block, cache in zip(self.blocks, caches):
            x, w = block(x, key_mask[:, None, :], need_weights=need_weights, cache=cache)
            weights.append(w)
        logits = self.output(self.norm(x)[:, 0])  # (B, V)
        attention = {"self": stack_weights(weights)} if need_weights else {}
        new_state = DecoderOnlyState(caches, key_mask, state.positions + 1, state.length + 1)
        return StepOutput(logits, new_state, attention)
