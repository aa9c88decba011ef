"""Reference implementations the throughput benchmark races attnlab against (bench/throughput.py).

Each one is what a careful engineer writes without attnlab, computing the same maths as the attnlab
model it is compared with:

- :class:`ReferenceTransformer` + :func:`reference_transformer_loss`: ``torch.nn.Transformer`` with
  ``nn.Embedding`` × √D + sinusoidal positions and a linear output layer (tied to the target embedding
  when attnlab's is), pre-norm when attnlab's is; cross-entropy with ``ignore_index=<pad>`` over every
  position of the padded ``(B, T, V)`` logits. It is fed the same length-bucketed token batches as
  attnlab (the strong baseline: bucketing alone halves the padding of D2L's fixed-length batches).
- :class:`D2LBahdanau` + :func:`d2l_masked_ce`: D2L §10.4 written plainly — an unpacked GRU encoder,
  additive attention that projects the keys at every decoder step (D2L's ``AdditiveAttention``),
  ``masked_softmax`` with a ``-1e6`` fill, a dense layer over every padded position, and D2L's
  ``MaskedSoftmaxCELoss`` (unreduced cross-entropy times a 0/1 mask).
- :func:`greedy_uncached` / :func:`beam_uncached`: decode one sentence at a time and, at every
  step, run the decoder over the whole prefix again (no KV cache; the encoder runs once per
  sentence, as in the Annotated Transformer's ``greedy_decode``), with the same search rules as
  ``attnlab.decoding`` (banned specials, GNMT length penalty, exact early stop) so both return the
  same hypotheses. The rules themselves (``step_log_probs``, ``gnmt_length_penalty``) are imported
  from ``attnlab.decoding.hypothesis``; the searches around them are written here.

attnlab's own plain path (``nn.Dropout``, ``F.cross_entropy``, ``argmax``/``topk``: ``train.kernels =
"plain"``) is not raced here; ``bench/kernels.py`` races each of its kernels against the fast one.

Dimension key: B batch, S source len, T target len, D model dim, V target vocab, K beam size.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.attention.positional import sinusoidal_table
from attnlab.data.vocab import BOS, EOS, PAD
from attnlab.decoding.hypothesis import gnmt_length_penalty, step_log_probs

# ----------------------------------------------------------------------------------------------
# Transformer: nn.Transformer with embeddings, sinusoidal positions, linear output


class ReferenceTransformer(nn.Module):
    """``nn.Embedding`` + sinusoidal positions → ``nn.Transformer`` (batch-first) → ``nn.Linear``."""

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        d_model: int = 256,
        nhead: int = 4,
        num_layers: int = 2,
        dim_feedforward: int = 1024,
        dropout: float = 0.1,
        norm_first: bool = True,
        tie: bool = True,
        max_len: int = 1024,
    ) -> None:
        super().__init__()
        self.src_emb = nn.Embedding(src_vocab, d_model)
        self.tgt_emb = nn.Embedding(tgt_vocab, d_model)
        nn.init.normal_(self.src_emb.weight, std=d_model**-0.5)
        nn.init.normal_(self.tgt_emb.weight, std=d_model**-0.5)
        self.register_buffer("pe", sinusoidal_table(max_len, d_model, torch.float32), persistent=False)
        self.drop = nn.Dropout(dropout)
        self.transformer = nn.Transformer(
            d_model,
            nhead,
            num_layers,
            num_layers,
            dim_feedforward,
            dropout,
            batch_first=True,
            norm_first=norm_first,
        )
        self.out = nn.Linear(d_model, tgt_vocab)
        if tie:
            self.out.weight = self.tgt_emb.weight
        self.scale = math.sqrt(d_model)

    def embed(self, table: nn.Embedding, tokens: Tensor) -> Tensor:
        return self.drop(table(tokens) * self.scale + self.pe[: tokens.shape[1]])  # (B, L, D)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """``src (B, S)`` → ``(memory (B, S, D), src_pad (B, S) True = pad)``."""
        src_pad = src == PAD
        return self.transformer.encoder(self.embed(self.src_emb, src), src_key_padding_mask=src_pad), src_pad

    def decode(self, tgt_in: Tensor, memory: Tensor, src_pad: Tensor) -> Tensor:
        """``tgt_in (B, T)`` → logits ``(B, T, V)`` (causal; target pads sit after every real token)."""
        T = tgt_in.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=tgt_in.device)
        h = self.transformer.decoder(
            self.embed(self.tgt_emb, tgt_in),
            memory,
            tgt_mask=causal,
            tgt_is_causal=True,
            memory_key_padding_mask=src_pad,
        )
        return self.out(h)  # (B, T, V)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        memory, src_pad = self.encode(src)
        return self.decode(tgt_in, memory, src_pad)


def reference_transformer_loss(model: ReferenceTransformer, batch, label_smoothing: float) -> Tensor:
    """Mean label-smoothed cross-entropy over non-pad labels, logits over every position."""
    logits = model(batch.src, batch.tgt_in)  # (B, T, V)
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        batch.tgt_out.reshape(-1),
        ignore_index=PAD,
        label_smoothing=label_smoothing,
    )


# ----------------------------------------------------------------------------------------------
# Bahdanau, the D2L way (d2l.ai §10.4, §9.7)


def d2l_sequence_mask(X: Tensor, valid_len: Tensor, value: float = 0.0) -> Tensor:
    maxlen = X.size(1)
    mask = torch.arange(maxlen, dtype=torch.float32, device=X.device)[None, :] < valid_len[:, None]
    X[~mask] = value
    return X


def d2l_masked_softmax(X: Tensor, valid_lens: Tensor) -> Tensor:
    shape = X.shape
    valid_lens = (
        torch.repeat_interleave(valid_lens, shape[1]) if valid_lens.dim() == 1 else valid_lens.reshape(-1)
    )
    X = d2l_sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)
    return F.softmax(X.reshape(shape), dim=-1)


class D2LAdditiveAttention(nn.Module):
    def __init__(self, num_hiddens: int, dropout: float) -> None:
        super().__init__()
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries: Tensor, keys: Tensor, values: Tensor, valid_lens: Tensor) -> Tensor:
        queries, keys = self.W_q(queries), self.W_k(keys)  # D2L projects the keys at every call
        features = torch.tanh(queries.unsqueeze(2) + keys.unsqueeze(1))
        scores = self.w_v(features).squeeze(-1)
        self.attention_weights = d2l_masked_softmax(scores, valid_lens)
        return torch.bmm(self.dropout(self.attention_weights), values)


class D2LBahdanau(nn.Module):
    """D2L's ``Seq2SeqEncoder`` + ``Seq2SeqAttentionDecoder`` (time-major GRUs, as in the book)."""

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        embed_size: int,
        num_hiddens: int,
        num_layers: int,
        dropout: float,
        tie: bool,
    ) -> None:
        super().__init__()
        self.enc_embedding = nn.Embedding(src_vocab, embed_size)
        self.enc_rnn = nn.GRU(embed_size, num_hiddens, num_layers, dropout=dropout)
        self.attention = D2LAdditiveAttention(num_hiddens, dropout)
        self.embedding = nn.Embedding(tgt_vocab, embed_size)
        self.rnn = nn.GRU(embed_size + num_hiddens, num_hiddens, num_layers, dropout=dropout)
        self.dense = nn.Linear(num_hiddens, tgt_vocab)
        if tie:
            self.dense.weight = self.embedding.weight

    def forward(self, src: Tensor, src_valid_lens: Tensor, tgt_in: Tensor) -> Tensor:
        X = self.enc_embedding(src).permute(1, 0, 2)  # (S, B, E): D2L's time-major layout
        enc_outputs, hidden_state = self.enc_rnn(X)  # reads the pads too, as D2L does
        enc_outputs = enc_outputs.permute(1, 0, 2)  # (B, S, D)
        X = self.embedding(tgt_in).permute(1, 0, 2)  # (T, B, E)
        outputs = []
        for x in X:
            query = torch.unsqueeze(hidden_state[-1], dim=1)  # (B, 1, D)
            context = self.attention(query, enc_outputs, enc_outputs, src_valid_lens)  # (B, 1, D)
            x = torch.cat((context, torch.unsqueeze(x, dim=1)), dim=-1)
            out, hidden_state = self.rnn(x.permute(1, 0, 2), hidden_state)
            outputs.append(out)
        outputs = self.dense(torch.cat(outputs, dim=0))  # (T, B, V)
        return outputs.permute(1, 0, 2)  # (B, T, V)


def d2l_masked_ce(model: D2LBahdanau, batch) -> Tensor:
    """D2L's ``MaskedSoftmaxCELoss`` then ``loss.sum()`` normalised by the token count."""
    pred = model(batch.src, batch.src_valid_lens, batch.tgt_in)  # (B, T, V)
    weights = d2l_sequence_mask(torch.ones_like(batch.tgt_out, dtype=torch.float32), batch.tgt_valid_lens)
    unweighted = F.cross_entropy(pred.permute(0, 2, 1), batch.tgt_out, reduction="none")  # (B, T)
    return (unweighted * weights).sum() / weights.sum()


# ----------------------------------------------------------------------------------------------
# Uncached, one-sentence-at-a-time decoding of an attnlab Transformer


def _prefix_logits(model: nn.Module, prefix: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
    """Run the decoder over the whole prefix ``(K, t)`` again; return the last position's logits ``(K, V)``."""
    T = prefix.shape[1]
    x = model._embed(model.tgt_embedding, prefix, torch.arange(T, device=prefix.device))  # (K, t, D)
    for block in model.decoder_blocks:
        x, _, _ = block(x, memory, src_mask)
    return model.output(model.decoder_norm(x[:, -1]))  # (K, V)


def _encode_one(model: nn.Module, src_ids: list[int], device) -> tuple[Tensor, Tensor]:
    src = torch.tensor([[*src_ids, EOS]], device=device)  # (1, S)
    valid = torch.tensor([src.shape[1]], device=device)
    memory = model.encode(src, valid).memory  # (1, S, D)
    return memory, torch.ones(1, 1, src.shape[1], dtype=torch.bool, device=device)


@torch.inference_mode()
def greedy_uncached(model: nn.Module, src_ids: list[int], max_len: int, device="cpu") -> list[int]:
    """Greedy decoding of one sentence; the tokens without ``<bos>``/``<eos>``."""
    memory, mask = _encode_one(model, src_ids, device)
    prefix = torch.tensor([[BOS]], device=device)
    out: list[int] = []
    for _ in range(max_len):
        tok = int(step_log_probs(_prefix_logits(model, prefix, memory, mask))[0].argmax())
        if tok == EOS:
            break
        out.append(tok)
        prefix = torch.cat([prefix, torch.tensor([[tok]], device=device)], dim=1)
    return out


@torch.inference_mode()
def beam_uncached(
    model: nn.Module, src_ids: list[int], beam_size: int, max_len: int, alpha: float = 1.0, device="cpu"
) -> list[int]:
    """Beam search of one sentence with attnlab's rules (see ``attnlab.decoding.beam``); the best tokens."""
    memory, mask = _encode_one(model, src_ids, device)
    beams: list[tuple[float, list[int]]] = [(0.0, [])]
    best: tuple[float, list[int]] | None = None  # (normalised score, tokens)
    fallback: tuple[float, list[int]] | None = None
    for step in range(1, max_len + 1):
        prefix = torch.tensor([[BOS, *toks] for _, toks in beams], device=device)  # (K', t)
        lp = step_log_probs(_prefix_logits(model, prefix, memory.expand(len(beams), -1, -1), mask)).double()
        cand = (
            torch.tensor([s for s, _ in beams], dtype=torch.float64, device=device)[:, None] + lp
        ).flatten()
        top_scores, top_idx = cand.topk(beam_size)
        V = lp.shape[-1]
        new_beams = []
        for score, idx in zip(top_scores.tolist(), top_idx.tolist()):
            if not math.isfinite(score):
                continue
            parent, tok = divmod(idx, V)
            toks = beams[parent][1]
            if tok == EOS:
                norm = score / gnmt_length_penalty(step, alpha)
                if best is None or norm > best[0]:
                    best = (norm, toks)
            elif step == max_len:
                norm = score / gnmt_length_penalty(step, alpha)
                if fallback is None or norm > fallback[0]:
                    fallback = (norm, [*toks, tok])
            else:
                new_beams.append((score, [*toks, tok]))
        if not new_beams:
            break
        # Exact stop: no live beam can beat the best finished hypothesis any more.
        if best is not None and max(s for s, _ in new_beams) / gnmt_length_penalty(max_len, alpha) <= best[0]:
            break
        beams = new_beams
    chosen = best or fallback
    return chosen[1] if chosen else []
