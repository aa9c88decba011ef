"""The Transformer encoder–decoder (notes §17–22; D2L §10.7; Vaswani et al. 2017).

Encoder layer: multi-head self-attention, Add&Norm, position-wise FFN, Add&Norm (notes §17).
Decoder layer: masked self-attention, Add&Norm, encoder–decoder attention, Add&Norm, FFN,
Add&Norm (notes §18). ``norm_first=False`` is the notes' post-norm ``LayerNorm(X + Dropout(Sublayer(X)))``
(§20); ``norm_first=True`` (pre-norm, ``X + Dropout(Sublayer(LayerNorm(X)))`` with a final
LayerNorm per stack) trains more stably without long warm-up (Xiong et al. 2020).

Embeddings are multiplied by √D before the positional encoding is added (D2L, Vaswani §3.4);
the target embedding and the output layer W_o share their weight when ``tie_embeddings`` is set.

Dimension key: B batch, S source len, T target len, D model dim (num_hiddens), F FFN hidden size,
H heads, L layers, V vocab.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.attention.kv_cache import KVCache
from attnlab.attention.masks import padding_mask
from attnlab.attention.multi_head import MultiHeadAttention
from attnlab.attention.positional import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
    check_positions,
)
from attnlab.config import ModelConfig
from attnlab.models.outputs import EncoderOutput, ModelOutput, StepOutput
from attnlab.models.protocol import DecoderState
from attnlab.models.traits import ModelTraits


class PositionWiseFFN(nn.Module):
    """``Dense2(ReLU(Dense1(X)))`` applied to every position alone, shared across positions (notes §19)."""

    def __init__(self, num_hiddens: int, ffn_num_hiddens: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.dense1 = nn.Linear(num_hiddens, ffn_num_hiddens)
        self.dense2 = nn.Linear(ffn_num_hiddens, num_hiddens)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dense2(self.dropout(torch.relu(self.dense1(x))))  # (B, T, D)


class EncoderBlock(nn.Module):
    """Self-attention + FFN, each wrapped in a residual connection and LayerNorm (notes §17, §20).

    Also the block of the decoder-only model, run under a causal mask (notes §28: GPT's causal
    mask is the decoder's masked self-attention).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        D = cfg.num_hiddens
        self.norm_first = cfg.norm_first
        self.attention = MultiHeadAttention(D, cfg.num_heads, cfg.attention_dropout_rate)
        self.norm1 = nn.LayerNorm(D)
        self.ffn = PositionWiseFFN(D, cfg.ffn_num_hiddens, cfg.dropout)
        self.norm2 = nn.LayerNorm(D)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        *,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``x (B, Q, D)``, ``mask`` bool broadcastable to ``(B, Q, K)`` → ``(x (B, Q, D), weights (B, H, Q, K) | None)``."""
        if self.norm_first:
            a, w = self.attention(
                self.norm1(x), mask=mask, is_causal=is_causal, need_weights=need_weights, cache=cache
            )
            x = x + self.dropout(a)
            x = x + self.dropout(self.ffn(self.norm2(x)))
        else:
            a, w = self.attention(x, mask=mask, is_causal=is_causal, need_weights=need_weights, cache=cache)
            x = self.norm1(x + self.dropout(a))  # Add & Norm
            x = self.norm2(x + self.dropout(self.ffn(x)))
        return x, w


class DecoderBlock(nn.Module):
    """Masked self-attention, encoder–decoder attention, FFN; each with Add&Norm (notes §18)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        D = cfg.num_hiddens
        self.norm_first = cfg.norm_first
        self.self_attention = MultiHeadAttention(D, cfg.num_heads, cfg.attention_dropout_rate)
        self.norm1 = nn.LayerNorm(D)
        self.cross_attention = MultiHeadAttention(D, cfg.num_heads, cfg.attention_dropout_rate)
        self.norm2 = nn.LayerNorm(D)
        self.ffn = PositionWiseFFN(D, cfg.ffn_num_hiddens, cfg.dropout)
        self.norm3 = nn.LayerNorm(D)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        memory_mask: Tensor,
        *,
        need_weights: bool = False,
        self_cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """
        ``x (B, T, D)`` target states; ``memory (B, S, D)`` encoder output (may be None when
        ``cross_cache`` holds its projections); ``memory_mask (B, 1, S)`` True = real source token.
        Returns ``(x (B, T, D), self weights (B, H, T, T') | None, cross weights (B, H, T, S) | None)``.
        The self-attention is causal: target position t never sees t' > t (notes §18, §24).
        """
        # Target padding needs no mask here: pads come after every real token, so the causal mask
        # already hides them from real queries (and lets SDPA use its is_causal kernel).
        if self.norm_first:
            a, w_self = self.self_attention(
                self.norm1(x), is_causal=True, need_weights=need_weights, cache=self_cache
            )
            x = x + self.dropout(a)
            a, w_cross = self.cross_attention(
                self.norm2(x), memory, mask=memory_mask, need_weights=need_weights, cache=cross_cache
            )
            x = x + self.dropout(a)
            x = x + self.dropout(self.ffn(self.norm3(x)))
        else:
            a, w_self = self.self_attention(x, is_causal=True, need_weights=need_weights, cache=self_cache)
            x = self.norm1(x + self.dropout(a))
            a, w_cross = self.cross_attention(
                x, memory, mask=memory_mask, need_weights=need_weights, cache=cross_cache
            )
            x = self.norm2(x + self.dropout(a))
            x = self.norm3(x + self.dropout(self.ffn(x)))
        return x, w_self, w_cross


def make_positional(cfg: ModelConfig) -> nn.Module:
    if cfg.positional == "learned":
        return LearnedPositionalEncoding(cfg.num_hiddens, cfg.max_positions)
    return SinusoidalPositionalEncoding(cfg.num_hiddens, cfg.max_positions)


def make_embedding(vocab_size: int, num_hiddens: int) -> nn.Embedding:
    """Token table ``(V, D)`` with std D^-1/2, so that after the √D scaling token vectors have unit
    scale — comparable to the positional encoding — and a tied W_o gives unit-scale logits."""
    emb = nn.Embedding(vocab_size, num_hiddens)
    nn.init.normal_(emb.weight, std=num_hiddens**-0.5)
    return emb


def init_blocks(blocks: nn.Module) -> None:
    """Xavier-uniform for every matrix of the attention/FFN blocks (Annotated Transformer)."""
    for p in blocks.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)


def stack_weights(weights: list[Tensor | None]) -> Tensor:
    """Per-layer ``(B, H, Q, K)`` weights → ``(B, L, H, Q, K)``."""
    return torch.stack(weights, dim=1)  # type: ignore[arg-type]


def run_encoder(blocks: nn.ModuleList, x: Tensor, mask: Tensor, need_weights: bool) -> tuple[Tensor, dict[str, Tensor]]:
    """The encoder stack (§17): ``x (B, S, D)`` through every block under ``mask (B, 1, S)``; returns the
    states and, if asked, ``{"enc_self": (B, L, H, S, S)}`` (also the encoder-only model's stack)."""
    weights = []
    for block in blocks:
        x, w = block(x, mask, need_weights=need_weights)
        weights.append(w)
    return x, ({"enc_self": stack_weights(weights)} if need_weights else {})


@dataclass
class TransformerState(DecoderState):
    self_caches: list[KVCache]  # per layer, (B, H, t, Dh): the target steps decoded so far
    cross_caches: list[KVCache]  # per layer, static (B, H, S, Dh): memory keys/values, once per sentence
    src_mask: Tensor  # (B, 1, S) True = real source token
    t: int = 0  # target steps taken (the next token's position); the same for every row


class Transformer(nn.Module):
    """Encoder–decoder Transformer obeying the attnlab model protocol (see ``models/protocol.py``)."""

    @staticmethod
    def traits(cfg: ModelConfig) -> ModelTraits:
        L = cfg.num_layers
        return ModelTraits({"enc_self": L, "dec_self": L, "cross": L}, heads=cfg.num_heads,
                           embeddings=("src_embedding", "tgt_embedding"),
                           attention_modules={"enc_self": "encoder_blocks.*.attention",
                                              "dec_self": "decoder_blocks.*.self_attention",
                                              "cross": "decoder_blocks.*.cross_attention"})

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> None:
        super().__init__()
        self.config = cfg
        D = cfg.num_hiddens
        self.src_embedding = make_embedding(src_vocab_size, D)
        self.tgt_embedding = make_embedding(tgt_vocab_size, D)
        self.positional = make_positional(cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.encoder_blocks = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.num_layers))
        self.decoder_blocks = nn.ModuleList(DecoderBlock(cfg) for _ in range(cfg.num_layers))
        init_blocks(self.encoder_blocks)
        init_blocks(self.decoder_blocks)
        # Pre-norm leaves the residual stream un-normalised: a final LayerNorm per stack fixes it.
        self.encoder_norm = nn.LayerNorm(D) if cfg.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(D) if cfg.norm_first else nn.Identity()
        self.output = nn.Linear(D, tgt_vocab_size)  # the notes' W_o, b_o (§8)
        if cfg.tie_embeddings:
            self.output.weight = self.tgt_embedding.weight
        self.scale = math.sqrt(D)

    def _embed(self, table: nn.Embedding, tokens: Tensor, positions: Tensor) -> Tensor:
        return self.dropout(table(tokens) * self.scale + self.positional(positions))  # (B, T, D)

    # -- encoder -----------------------------------------------------------------------------------
    def encode(self, src: Tensor, src_valid_lens: Tensor, need_weights: bool = False) -> EncoderOutput:
        """``src (B, S)`` → memory ``(B, S, D)``; ``enc_self`` weights ``(B, L, H, S, S)`` if asked."""
        S = src.shape[1]
        check_positions(S, self.config.max_positions)
        x = self._embed(self.src_embedding, src, torch.arange(S, device=src.device))
        mask = padding_mask(src_valid_lens, S)[:, None, :]  # (B, 1, S): padding columns stay empty (§23)
        x, attention = run_encoder(self.encoder_blocks, x, mask, need_weights)
        return EncoderOutput(memory=self.encoder_norm(x), attention=attention)

    # -- teacher-forced pass -----------------------------------------------------------------------
    def forward(
        self,
        src: Tensor,
        src_valid_lens: Tensor,
        tgt_in: Tensor,
        need_weights: bool = False,
        compute_logits: bool = True,
    ) -> ModelOutput:
        enc = self.encode(src, src_valid_lens, need_weights)
        T = tgt_in.shape[1]
        check_positions(T, self.config.max_positions)
        src_mask = padding_mask(src_valid_lens, src.shape[1])[:, None, :]  # (B, 1, S)
        x = self._embed(self.tgt_embedding, tgt_in, torch.arange(T, device=tgt_in.device))
        w_self, w_cross = [], []
        for block in self.decoder_blocks:
            x, ws, wc = block(x, enc.memory, src_mask, need_weights=need_weights)
            w_self.append(ws)
            w_cross.append(wc)
        hidden = self.decoder_norm(x)  # (B, T, D)
        attention = dict(enc.attention)
        if need_weights:
            attention["dec_self"] = stack_weights(w_self)  # (B, L, H, T, T), lower-triangular
            attention["cross"] = stack_weights(w_cross)  # (B, L, H, T, S)
        return ModelOutput(self.output(hidden) if compute_logits else None, hidden, attention)

    # -- incremental decoding ----------------------------------------------------------------------
    def init_state(self, enc: EncoderOutput, src_valid_lens: Tensor) -> TransformerState:
        """Project the memory into every layer's cross-attention K/V once per sentence."""
        cross = [block.cross_attention.project_memory(enc.memory) for block in self.decoder_blocks]
        src_mask = padding_mask(src_valid_lens, enc.memory.shape[1])[:, None, :]  # (B, 1, S)
        return TransformerState([KVCache() for _ in self.decoder_blocks], cross, src_mask, 0)

    def step(self, tokens: Tensor, state: TransformerState, need_weights: bool = False) -> StepOutput:
        """Feed ``tokens (B,)`` at position ``state.t``; return next-token logits ``(B, V)``.

        The input state is not modified (new cache objects hold the grown keys/values).
        """
        check_positions(state.t + 1, self.config.max_positions)
        positions = torch.arange(state.t, state.t + 1, device=tokens.device)  # (1,)
        x = self._embed(self.tgt_embedding, tokens[:, None], positions)  # (B, 1, D)
        caches = [KVCache(c.k, c.v) for c in state.self_caches]
        w_self, w_cross = [], []
        for block, cache, cross in zip(self.decoder_blocks, caches, state.cross_caches):
            x, ws, wc = block(
                x, None, state.src_mask, need_weights=need_weights, self_cache=cache, cross_cache=cross
            )
            w_self.append(ws)
            w_cross.append(wc)
        logits = self.output(self.decoder_norm(x)[:, 0])  # (B, V)
        attention = {}
        if need_weights:
            attention = {
                "dec_self": stack_weights(w_self),
                "cross": stack_weights(w_cross),
            }  # (B, L, H, 1, ·)
        new_state = TransformerState(caches, state.cross_caches, state.src_mask, state.t + 1)
        return StepOutput(logits, new_state, attention)
