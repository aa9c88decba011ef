"""GRU models: a from-scratch GRU, the fixed-context seq2seq baseline and Bahdanau attention.

- :class:`GRUCell` / :class:`ScratchGRU`: the GRU written out (notes §6–7) so the update gate z,
  reset gate r and candidate state h̃ of every step can be inspected; numerically equal to
  ``nn.GRU`` (same parameter names, so state dicts load either way).
- :class:`Seq2Seq`: D2L §9.7 — the decoder sees one fixed context vector, the encoder's last
  top-layer state, concatenated to its input at every step (notes §1, the baseline).
- :class:`Bahdanau`: D2L §10.4 — at each step the previous decoder top state s(t'-1) queries all
  encoder states with additive attention; the decoder input is embedding ⊕ context (notes §1–3).
  With ``model.attention_query="current"`` (Luong et al. 2015) the state after the step s(t') queries
  and the output layer reads ``tanh(W_c [s(t'); c(t')])``.

Both use ``nn.GRU`` with packed sequences (fast path; padding never changes results) or
:class:`ScratchGRU` when ``model.scratch_gru`` is set.

Dimension key: B batch, S source len, T target len (or time steps), E embed size,
D hidden size (num_hiddens), L layers, V vocab, I input size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnlab.attention.additive import AdditiveAttention
from attnlab.attention.masks import padding_mask
from attnlab.config import ConfigError, ModelConfig
from attnlab.i18n import _
from attnlab.models.outputs import EncoderOutput, ModelOutput, StepOutput
from attnlab.models.protocol import DecoderState
from attnlab.models.traits import ModelTraits

# ----------------------------------------------------------------------------------------------
# The GRU from scratch (notes §7)


@dataclass
class GRUGates:
    """Gate values: ``z`` update gate, ``r`` reset gate, ``h_tilde`` candidate state.

    Shapes: ``(B, D)`` from :class:`GRUCell`; ``(B, L·dirs, T, D)`` from :class:`ScratchGRU`
    (zeros at padded steps when ``valid_lens`` is given).
    """

    z: Tensor
    r: Tensor
    h_tilde: Tensor


def gru_step(x_proj: Tensor, h: Tensor, weight_hh: Tensor, bias_hh: Tensor | None) -> tuple[Tensor, GRUGates]:
    """One GRU step in PyTorch's (cuDNN's) formulation, given ``x_proj = W_i x + b_i`` ``(B, 3D)``.

    ``r = σ(W_ir x + b_ir + W_hr h + b_hr)``, ``z = σ(W_iz x + b_iz + W_hz h + b_hz)``,
    ``h̃ = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))``, ``h' = z ⊙ h + (1 − z) ⊙ h̃`` (notes §7).
    The only difference from the notes' candidate ``tanh(W_xh x + W_hh (r ⊙ h) + b_h)`` is that the
    reset gate multiplies *after* the matmul — the variant ``nn.GRU`` implements, kept so the two agree.
    Gate order in the stacked weights is r, z, n (as in ``nn.GRU``).
    """
    h_proj = nn.functional.linear(h, weight_hh, bias_hh)  # (B, 3D)
    x_r, x_z, x_n = x_proj.chunk(3, dim=-1)  # (B, D) each
    h_r, h_z, h_n = h_proj.chunk(3, dim=-1)
    r = torch.sigmoid(x_r + h_r)
    z = torch.sigmoid(x_z + h_z)
    h_tilde = torch.tanh(x_n + r * h_n)
    h_new = z * h + (1 - z) * h_tilde  # z keeps old information, 1 - z lets the candidate in
    return h_new, GRUGates(z, r, h_tilde)


def _init_uniform(module: nn.Module, hidden_size: int) -> None:
    bound = 1.0 / math.sqrt(hidden_size)  # nn.GRU's initialisation
    for p in module.parameters():
        nn.init.uniform_(p, -bound, bound)


class GRUCell(nn.Module):
    """A single GRU cell; parameters named like ``nn.GRUCell`` (``weight_ih (3D, I)``, ...)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight_ih = nn.Parameter(torch.empty(3 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(3 * hidden_size, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(3 * hidden_size)) if bias else None
        self.bias_hh = nn.Parameter(torch.empty(3 * hidden_size)) if bias else None
        _init_uniform(self, hidden_size)

    def forward(self, x: Tensor, h: Tensor | None = None) -> tuple[Tensor, GRUGates]:
        """``x (B, I)``, ``h (B, D)`` (zeros if None) → ``(h' (B, D), GRUGates of (B, D))``."""
        if h is None:
            h = x.new_zeros(x.shape[0], self.hidden_size)
        x_proj = nn.functional.linear(x, self.weight_ih, self.bias_ih)  # (B, 3D)
        return gru_step(x_proj, h, self.weight_hh, self.bias_hh)


class ScratchGRU(nn.Module):
    """Multi-layer, batch-first GRU built from :func:`gru_step`; a drop-in for ``nn.GRU``.

    Parameters are named exactly like ``nn.GRU``'s (``weight_ih_l0``, ``bias_hh_l1``, ...), so a
    model trained with ``nn.GRU`` loads with ``scratch_gru=True`` to inspect its gates.
    Dropout is applied between layers, as ``nn.GRU`` does.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        bias: bool = True,
        bidirectional: bool = False,
    ) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers, self.bias = (
            input_size,
            hidden_size,
            num_layers,
            bias,
        )
        self.bidirectional = bidirectional
        self.dropout = nn.Dropout(dropout)
        dirs = self.suffixes()
        for k in range(num_layers):
            in_size = input_size if k == 0 else hidden_size * len(dirs)
            for sfx in dirs:
                self.register_parameter(
                    f"weight_ih_l{k}{sfx}", nn.Parameter(torch.empty(3 * hidden_size, in_size))
                )
                self.register_parameter(
                    f"weight_hh_l{k}{sfx}", nn.Parameter(torch.empty(3 * hidden_size, hidden_size))
                )
                if bias:
                    self.register_parameter(f"bias_ih_l{k}{sfx}", nn.Parameter(torch.empty(3 * hidden_size)))
                    self.register_parameter(f"bias_hh_l{k}{sfx}", nn.Parameter(torch.empty(3 * hidden_size)))
        _init_uniform(self, hidden_size)

    def suffixes(self) -> tuple[str, ...]:
        """Parameter-name suffix of each direction, as ``nn.GRU`` names them."""
        return ("", "_reverse") if self.bidirectional else ("",)

    def forward(
        self,
        x: Tensor,
        h0: Tensor | None = None,
        valid_lens: Tensor | None = None,
        return_gates: bool = False,
    ) -> tuple[Tensor, Tensor] | tuple[Tensor, Tensor, GRUGates]:
        """
        Args:
            x: ``(B, T, I)``; h0: ``(L·dirs, B, D)`` or None (zeros), ``dirs`` = 2 when bidirectional.
            valid_lens: ``(B,)``: steps ``t >= valid_lens[b]`` leave the state unchanged and output
                zeros — the same result as ``nn.GRU`` on a packed sequence (the backward direction
                starts at each row's last valid step, as packing makes it).
            return_gates: also return :class:`GRUGates` of shape ``(B, L·dirs, T, D)`` (layer-major,
                forward then backward, like ``h_n``; backward gates are given at their source position).
        Returns:
            ``(outputs (B, T, D·dirs) of the top layer, h_n (L·dirs, B, D)[, gates])``.
        """
        B, T, _ = x.shape
        dirs = self.suffixes()
        h_all = x.new_zeros(self.num_layers * len(dirs), B, self.hidden_size) if h0 is None else h0
        alive = None
        if valid_lens is not None:
            steps = torch.arange(T, device=x.device)
            alive = (steps[None, :] < valid_lens[:, None]).unsqueeze(-1)  # (B, T, 1)
        layer_input, finals, gates = x, [], []
        for k in range(self.num_layers):
            if k > 0:
                layer_input = self.dropout(layer_input)
            outs = []
            for d, sfx in enumerate(dirs):
                seq = layer_input if d == 0 else reverse_padded(layer_input, valid_lens)
                out, h, g = self._direction(seq, h_all[k * len(dirs) + d], k, sfx, alive, return_gates)
                if d == 1:  # back to source order
                    out = reverse_padded(out, valid_lens)
                    g = tuple(reverse_padded(t, valid_lens) for t in g) if return_gates else g
                outs.append(out)
                finals.append(h)
                if return_gates:
                    gates.append(g)
            layer_input = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)  # (B, T, D·dirs)
        h_n = torch.stack(finals, dim=0)  # (L·dirs, B, D)
        if not return_gates:
            return layer_input, h_n
        z, r, c = (torch.stack([g[i] for g in gates], dim=1) for i in range(3))  # (B, L·dirs, T, D) each
        return layer_input, h_n, GRUGates(z, r, c)

    def _direction(self, seq: Tensor, h: Tensor, k: int, sfx: str, alive: Tensor | None, return_gates: bool):
        """One layer, one direction over ``seq (B, T, I)`` from ``h (B, D)``: ``(outputs (B, T, D), h_T, gates)``."""
        w_ih, w_hh = getattr(self, f"weight_ih_l{k}{sfx}"), getattr(self, f"weight_hh_l{k}{sfx}")
        b_ih = getattr(self, f"bias_ih_l{k}{sfx}") if self.bias else None
        b_hh = getattr(self, f"bias_hh_l{k}{sfx}") if self.bias else None
        # The input projection does not depend on h: do it for all steps in one matmul.
        x_proj = nn.functional.linear(seq, w_ih, b_ih).unbind(1)  # T × (B, 3D)
        outs, zs, rs, cands = [], [], [], []
        for t in range(len(x_proj)):
            h_new, g = gru_step(x_proj[t], h, w_hh, b_hh)
            if alive is not None:
                h_new = torch.where(alive[:, t], h_new, h)  # padded steps keep the state
                out_t = h_new * alive[:, t]
            else:
                out_t = h_new
            h = h_new
            outs.append(out_t)
            if return_gates:
                keep = 1.0 if alive is None else alive[:, t]
                zs.append(g.z * keep), rs.append(g.r * keep), cands.append(g.h_tilde * keep)
        gates = (torch.stack(zs, 1), torch.stack(rs, 1), torch.stack(cands, 1)) if return_gates else ()
        return torch.stack(outs, dim=1), h, gates


def reverse_padded(x: Tensor, valid_lens: Tensor | None) -> Tensor:
    """Reverse each row's first ``valid_lens[b]`` steps of ``x (B, T, …)``; padding stays in place.

    Its own inverse. This is the order in which a packed backward GRU reads a padded batch.
    """
    if valid_lens is None:
        return x.flip(1)
    T = x.shape[1]
    t = torch.arange(T, device=x.device)
    idx = valid_lens[:, None].to(t.device) - 1 - t[None, :]  # (B, T)
    idx = torch.where(idx >= 0, idx, t[None, :])
    idx = idx.reshape(*idx.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, idx)


def _make_rnn(cfg: ModelConfig, input_size: int, bidirectional: bool = False) -> nn.Module:
    if cfg.scratch_gru:
        return ScratchGRU(input_size, cfg.num_hiddens, cfg.num_layers, dropout=cfg.dropout,
                          bidirectional=bidirectional)
    dropout = cfg.dropout if cfg.num_layers > 1 else 0.0  # nn.GRU warns on dropout with one layer
    return nn.GRU(input_size, cfg.num_hiddens, cfg.num_layers, dropout=dropout, batch_first=True,
                  bidirectional=bidirectional)


# ----------------------------------------------------------------------------------------------
# Encoder shared by both models


class GRUEncoder(nn.Module):
    """Embedding (notes §5) + multi-layer GRU over the source; padding never reaches the state.

    With ``model.bidirectional`` a second GRU reads the source backwards (Bahdanau et al. 2014): each
    output is ``[h→_t; h←_t]`` (2D), so every key sees the whole sentence, and the decoder's first
    state is ``tanh(W_bridge [h→_last; h←_first])`` per layer (``bridge``), back to D.
    """

    def __init__(self, cfg: ModelConfig, vocab_size: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, cfg.embed_size)
        self.rnn = _make_rnn(cfg, cfg.embed_size, bidirectional=cfg.bidirectional)
        self.bridge = nn.Linear(2 * cfg.num_hiddens, cfg.num_hiddens) if cfg.bidirectional else None
        self.output_size = cfg.num_hiddens * (2 if cfg.bidirectional else 1)

    def forward(self, src: Tensor, src_valid_lens: Tensor) -> tuple[Tensor, Tensor]:
        """``src (B, S)`` → ``(outputs (B, S, D·dirs), zeros at pads; state (L, B, D) after each row's
        last valid step)``."""
        S = src.shape[1]
        emb = self.embedding(src)  # (B, S, E)
        if isinstance(self.rnn, ScratchGRU):
            outputs, state = self.rnn(emb, None, src_valid_lens)
        else:
            # Packing makes nn.GRU stop at each row's valid length, so the final state is the state
            # after <eos>, not after a run of <pad> inputs (D2L's version reads the pads too).
            packed = pack_padded_sequence(emb, src_valid_lens.cpu(), batch_first=True, enforce_sorted=False)
            outputs, state = self.rnn(packed)
            outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=S)  # (B, S, D·dirs)
        if self.bridge is not None:
            L2, B, D = state.shape
            both = state.view(L2 // 2, 2, B, D).permute(0, 2, 1, 3).reshape(L2 // 2, B, 2 * D)  # (L, B, 2D)
            state = torch.tanh(self.bridge(both))  # (L, B, D)
        return outputs, state


def _output_layer(cfg: ModelConfig, embedding: nn.Embedding, vocab_size: int) -> nn.Linear:
    """The notes' W_o (V×D), b_o (§8); shares its weight with the target embedding when tied."""
    output = nn.Linear(cfg.num_hiddens, vocab_size)
    if cfg.tie_embeddings:
        if cfg.embed_size != cfg.num_hiddens:
            raise ConfigError(
                _("model.tie_embeddings=true needs model.embed_size == model.num_hiddens for {kind} "
                  "(got {embed} and {hidden}); make them equal or set model.tie_embeddings=false").format(
                    kind=cfg.kind, embed=cfg.embed_size, hidden=cfg.num_hiddens)
            )
        output.weight = embedding.weight
    return output


# ----------------------------------------------------------------------------------------------
# Seq2seq with a fixed context vector (D2L §9.7)


@dataclass
class Seq2SeqState(DecoderState):
    hidden: Tensor  # (L, B, D) decoder GRU state
    context: Tensor  # (B, D) fixed context: the encoder's final top-layer state
    batch_dim1 = ("hidden",)


class Seq2Seq(nn.Module):
    """GRU encoder–decoder whose decoder input is ``embedding(y_{t-1}) ⊕ c`` with one fixed ``c``."""

    @staticmethod
    def traits(cfg: ModelConfig) -> ModelTraits:
        return ModelTraits(recurrent=True, embeddings=("encoder.embedding", "tgt_embedding"))

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = GRUEncoder(cfg, src_vocab_size)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, cfg.embed_size)
        self.decoder = _make_rnn(cfg, cfg.embed_size + cfg.num_hiddens)
        self.output = _output_layer(cfg, self.tgt_embedding, tgt_vocab_size)

    def encode(self, src: Tensor, src_valid_lens: Tensor, need_weights: bool = False) -> EncoderOutput:
        outputs, state = self.encoder(src, src_valid_lens)
        return EncoderOutput(memory=outputs, extra=state)

    def init_state(self, enc: EncoderOutput, src_valid_lens: Tensor) -> Seq2SeqState:
        state = enc.extra  # (L, B, D): the decoder starts from the encoder's final state
        return Seq2SeqState(hidden=state, context=state[-1])

    def forward(
        self,
        src: Tensor,
        src_valid_lens: Tensor,
        tgt_in: Tensor,
        need_weights: bool = False,
        compute_logits: bool = True,
    ) -> ModelOutput:
        state = self.init_state(self.encode(src, src_valid_lens), src_valid_lens)
        B, T = tgt_in.shape
        emb = self.tgt_embedding(tgt_in)  # (B, T, E)
        context = state.context[:, None, :].expand(B, T, state.context.shape[-1])  # (B, T, D)
        # The context is the same at every step, so the whole target runs in one GRU call.
        hidden, _ = self.decoder(torch.cat([emb, context], dim=-1), state.hidden)  # (B, T, D)
        return ModelOutput(self.output(hidden) if compute_logits else None, hidden)

    def step(self, tokens: Tensor, state: Seq2SeqState, need_weights: bool = False) -> StepOutput:
        x = torch.cat([self.tgt_embedding(tokens), state.context], dim=-1)[:, None, :]  # (B, 1, E + D)
        out, hidden = self.decoder(x, state.hidden)  # (B, 1, D), (L, B, D)
        return StepOutput(self.output(out[:, 0]), Seq2SeqState(hidden=hidden, context=state.context))


# ----------------------------------------------------------------------------------------------
# Bahdanau attention (D2L §10.4)


@dataclass
class BahdanauState(DecoderState):
    hidden: Tensor  # (L, B, D) decoder GRU state; hidden[-1] is the next query s(t'-1) under "previous"
    memory: Tensor  # (B, S, M) encoder states: keys = values (notes §2); M = D, or 2D if bidirectional
    projected_keys: Tensor  # (B, S, D) W_k h_t, computed once per sentence
    mask: Tensor  # (B, 1, S) True = real source token
    batch_dim1 = ("hidden",)


class Bahdanau(nn.Module):
    """GRU encoder, GRU decoder with additive attention over all encoder states.

    ``model.attention_query="previous"``, D2L §10.4 as written: at step t' the query is the previous decoder
    top state s(t'-1), keys = values = encoder states h_t, context c(t') = Σ α h_t; the decoder GRU reads
    ``embedding(y_{t'-1}) ⊕ c(t')`` and W_o reads its new state. The decoder starts from the encoder's final
    state.

    ``model.attention_query="current"`` (the Bahdanau preset's) orders the step as Luong et al. 2015 (§3.1,
    global attention, here with the same additive score): the decoder GRU reads ``embedding(y_{t'-1})`` alone,
    its new top state s(t') is the query, and W_o reads the attentional state ``s̃(t') = tanh(W_c [s(t');
    c(t')])`` (``combine``) instead of s(t'). The context then bears on the word it is computed for (with
    s(t'-1) it reaches the output only through the next GRU step), and since the GRU no longer waits for the
    context, it runs over the whole target in one call when training. The score, the keys, the values and
    the context are the notes' (§1–2) either way.

    How soon the rows of this map move from word to word, and what was tried to make them align on the
    notes' example, is measured in docs/experiments/ (bahdanau-movement.md, bahdanau-alignment.md).
    """

    @staticmethod
    def traits(cfg: ModelConfig) -> ModelTraits:
        # One additive attention shared by every recurrent layer: one map.
        return ModelTraits({"cross": 1}, recurrent=True, embeddings=("encoder.embedding", "tgt_embedding"))

    @staticmethod
    def sizes(cfg: ModelConfig) -> tuple[int, int]:
        """``(key_size, query_size)`` of the attention: keys = values = encoder states (D, or 2D when the
        encoder reads both ways), query = the decoder state, s(t'-1) or s(t') (D)."""
        return cfg.num_hiddens * (2 if cfg.bidirectional else 1), cfg.num_hiddens

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int,
                 attention: Callable[[int, int, int, float], nn.Module] = AdditiveAttention) -> None:
        """``attention``: the score module's class, built here as ``attention(key_size, query_size,
        num_hiddens, dropout)`` (the builder passes the one ``model.attention_score`` names; default: the
        notes' additive ``vᵀ tanh(W_q q + W_k k)``). Built in place, after the encoder, so that a seed gives
        the same initial weights whichever score is chosen."""
        super().__init__()
        self.config = cfg
        self.encoder = GRUEncoder(cfg, src_vocab_size)
        M, D = self.sizes(cfg)  # M = D, or 2D with a bidirectional encoder
        self.attention = attention(M, D, D, cfg.dropout)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, cfg.embed_size)
        self.after_step = cfg.attention_query == "current"  # Luong et al. 2015's order
        # W_c of the attentional state tanh(W_c [s; c]) that W_o reads when the query is s(t')
        self.combine = nn.Linear(D + M, D) if self.after_step else None
        self.decoder = _make_rnn(cfg, cfg.embed_size + (0 if self.after_step else M))
        self.output = _output_layer(cfg, self.tgt_embedding, tgt_vocab_size)

    def encode(self, src: Tensor, src_valid_lens: Tensor, need_weights: bool = False) -> EncoderOutput:
        outputs, state = self.encoder(src, src_valid_lens)
        return EncoderOutput(memory=outputs, extra=state)

    def init_state(self, enc: EncoderOutput, src_valid_lens: Tensor) -> BahdanauState:
        memory = enc.memory
        mask = padding_mask(src_valid_lens, memory.shape[1])[:, None, :]  # (B, 1, S)
        return BahdanauState(enc.extra, memory, self.attention.project_keys(memory), mask)

    def _decode_step(self, emb: Tensor, state: BahdanauState) -> tuple[Tensor, Tensor, BahdanauState]:
        """``emb (B, 1, E)`` → ``(out (B, 1, D): what W_o reads, weights (B, 1, S), next state)``."""
        if self.after_step:  # Luong et al. 2015: step, then attend with the new state s(t')
            states, hidden = self.decoder(emb, state.hidden)  # (B, 1, D), (L, B, D)
            out, weights = self._attentional(states, state)
            return out, weights, BahdanauState(hidden, state.memory, state.projected_keys, state.mask)
        query = state.hidden[-1][:, None, :]  # (B, 1, D): s(t'-1)
        # context (B, 1, D), weights (B, 1, S)
        context, weights = self.attention(query, None, state.memory, state.mask, state.projected_keys)
        out, hidden = self.decoder(torch.cat([emb, context], dim=-1), state.hidden)  # (B, 1, D), (L, B, D)
        return out, weights, BahdanauState(hidden, state.memory, state.projected_keys, state.mask)

    def _attentional(self, states: Tensor, state: BahdanauState) -> tuple[Tensor, Tensor]:
        """Decoder states ``(B, T, D)`` as queries → ``(tanh(W_c [s; c]) (B, T, D), weights (B, T, S))``."""
        context, weights = self.attention(states, None, state.memory, state.mask, state.projected_keys)  # (B, T, M)
        return torch.tanh(self.combine(torch.cat([states, context], dim=-1))), weights

    def forward(
        self,
        src: Tensor,
        src_valid_lens: Tensor,
        tgt_in: Tensor,
        need_weights: bool = False,
        compute_logits: bool = True,
    ) -> ModelOutput:
        state = self.init_state(self.encode(src, src_valid_lens), src_valid_lens)
        if self.after_step:  # the GRU does not read the context: the whole target in one call, then every query
            states, _ = self.decoder(self.tgt_embedding(tgt_in), state.hidden)  # (B, T, D)
            hidden, w = self._attentional(states, state)  # (B, T, D), (B, T, S)
            attention = {"cross": w[:, None, None]} if need_weights else {}  # (B, 1, 1, T, S)
            return ModelOutput(self.output(hidden) if compute_logits else None, hidden, attention)
        # (B, 1, E) per step. unbind, not emb[:, t]: the backward of T slices would build T zero-filled
        # (B, T, E) gradients; unbind's backward stacks the T step gradients once.
        embs = self.tgt_embedding(tgt_in)[:, :, None].unbind(1)
        outs, weights = [], []
        # Sequential by nature: step t' needs s(t'-1) (notes §26: the Transformer removes this loop).
        for t in range(tgt_in.shape[1]):
            out, w, state = self._decode_step(embs[t], state)
            outs.append(out)
            weights.append(w)
        hidden = torch.cat(outs, dim=1)  # (B, T, D)
        attention = {}
        if need_weights:
            attention["cross"] = torch.cat(weights, dim=1)[:, None, None]  # (B, 1, 1, T, S)
        return ModelOutput(self.output(hidden) if compute_logits else None, hidden, attention)

    def step(self, tokens: Tensor, state: BahdanauState, need_weights: bool = False) -> StepOutput:
        out, w, state = self._decode_step(self.tgt_embedding(tokens)[:, None, :], state)
        attention = {"cross": w[:, None, None]} if need_weights else {}  # (B, 1, 1, 1, S)
        return StepOutput(self.output(out[:, 0]), state, attention)
