"""Who is Query, Key and Value; one score and one logit worked by hand; the residual adds around every
sublayer (notes §2, §8, §11–12, §17–20). Sections of ``attnlab explain`` (see :mod:`.sentence`).

Every number here is recomputed from the model's own weights and from the tensors that one
teacher-forced pass hands its modules (forward hooks, :func:`capture`), then checked against what the
model itself returned:

- :func:`residual_section` (section 4 of a Transformer): the norm placement, and the norms of X,
  Sublayer(·) and X + Sublayer(·) at one position of every layer;
- :func:`ffn_section` (4, after it): the position-wise FFN (§19), the same function at every position;
- :func:`roles_section` (6): for each attention kind, which tensor is the Query, the Keys and the
  Values (§2 Bahdanau: s(t'−1) against the encoder states h_t; §12 self-attention Q = K = V = X; §18
  the decoder's masked self-attention and its encoder–decoder attention); how ``in_proj`` splits into
  W_q, W_k, W_v and into H heads of D/H rows (§11); the scores of one query worked by hand, and their
  softmax: the attention row the decoding section printed for step 1;
- :func:`logit_section` (7): ``logit = W_o[id]·out + b_o[id]`` (§8) for step 1's token, and weight tying;
- :func:`context_rows`: the §9 table's context vectors and positional-encoding buffer.

Pre-norm against the notes' post-norm (§20): docs/explanations/explain.md.

The printed sentences are the format strings of :data:`TEXT`, one place to translate them.

Dimension key: S source len, T target len, D model dim, H heads, Dh = D / H, M encoder state size
(Bahdanau: D, or 2D with a bidirectional encoder), A additive attention's hidden size, V target vocab.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.analysis import hooks
from attnlab.attention.multi_head import MultiHeadAttention
from attnlab.data.batching import Batch
from attnlab.i18n import N_, Templates, _, ljust
from attnlab.maps import display_tokens, marks_word_starts
from attnlab.models import ModelTraits, traits
from attnlab.models.transformer import DecoderBlock, EncoderBlock, PositionWiseFFN
from attnlab.translator import teacher_forced

__all__ = ["ROWS", "TEXT", "Call", "Capture", "FFNCheck", "additive_scores", "attention_module", "attention_path",
           "capture", "context_rows", "ffn_check", "ffn_section", "head_scores", "is_additive", "logit_section",
           "recurrent_attention", "residual_section", "roles_section"]

Out = Any  # the list.append that collects the text's lines

# The printed text, one format string per line kind, looked up in the current language (``--lang``:
# :class:`attnlab.i18n.Templates`; the values in N_() have a translation in the catalogue).
TEXT: dict[str, str] = Templates({
    # 4. residual connections and LayerNorm (Transformers)
    "res.head": N_("\n== 4. residual connections and LayerNorm (§17–20): this model is {placement} (model.norm_first={nf})"),
    "res.notes": N_("  the notes (§20) write post-norm:  Y = LayerNorm(X + Dropout(Sublayer(X)))"),
    "res.pre": N_("  this model computes pre-norm:     Y = X + Dropout(Sublayer(LayerNorm(X))), then one final "
                  "LayerNorm per stack ({finals})"),
    "res.pre_why": N_("  why: the residual stream X passes from layer to layer un-normalised, so gradients reach the "
                      "first layers through the additions alone; it trains without a long warm-up (Xiong et al. 2020)"),
    "res.post": N_("  this model computes the notes' post-norm: Y = LayerNorm(X + Dropout(Sublayer(X))), "
                   "no final LayerNorm"),
    "res.switch": N_("  the other placement is one setting away: attnlab train … model.norm_first={other}"),
    "res.risk": N_("  post-norm's known risk is divergence in deep stacks or without a learning-rate warm-up (Xiong et "
                   "al. 2020); at a few layers with warm-up both placements train"),
    "res.rows": N_("  the residual adds at one position per layer (Dropout is the identity at inference; ‖·‖ = L2 norm of "
                   "the {D} numbers):"),
    "res.row": N_("    {block:<22} {pos:<16} {sub:<16} ‖X‖ {x:7.2f}  ‖Sublayer‖ {s:7.2f}  ‖X + Sublayer‖ {y:7.2f}{ln}"),
    "res.ln": N_("  ‖LayerNorm(X + Sublayer)‖ {n:7.2f}"),
    "res.final": N_("    {block:<22} {pos:<16} {sub:<16} ‖X‖ {x:7.2f}  ‖LayerNorm(X)‖ {y:7.2f}  (the stack's final LayerNorm)"),
    "res.check": N_("  X + Sublayer recomputed from the tensors each sublayer read and returned equals the model's next "
                    "tensor: max |Δ| = {gap:.1e}"),
    # 4. (Transformers) the position-wise FFN, §19
    "ffn.head": N_("  the position-wise feed-forward network (§19), {name}: FFN(x) = W_2 ReLU(W_1 x + b_1) + b_2 with "
                   "W_1 {W1}, W_2 {W2}, one set of weights for every position"),
    "ffn.each": N_("    run on the {n} positions one at a time, then all at once: max |Δ| = {gap:.1e}, the same function "
                   "applied at each position"),
    "ffn.perm": N_("    positions reordered ({order}) before the FFN: its outputs come out in that order, max |Δ| = "
                   "{gap:.1e}; nothing in it knows where a position is"),
    "ffn.mix": N_("    position 1 ({tok!r}) replaced by position {k}'s vector: the FFN's outputs at the other positions "
                  "change by {ffn:.1e}, the self-attention's of the same layer by {att:.2e}: attention mixes tokens "
                  "(§12), the FFN mixes none (§19)"),
    # 6. Query, Key, Value
    "roles.head": N_("\n== 6. Query, Key, Value (§2, §11–12, §18): which tensor asks, which is matched, which is mixed"),
    "roles.none": N_("  none: this model has no attention; its decoder reads one fixed context vector c, the encoder's "
                     "last state {c}, at every step (§1)"),
    "roles.enc_self": N_("  {kind:<9} encoder self-attention (§12, §17): Query = Key = Value = the source states X {q}: "
                         "each source token is matched against every source token"),
    "roles.dec_self": N_("  {kind:<9} masked self-attention (§18): Query = Key = Value = the target states {q}; causal: "
                         "step t sees only steps ≤ t"),
    "roles.cross": N_("  {kind:<9} encoder–decoder attention (§18): Query = the decoder's states {q}; Key = Value = "
                      "the encoder output (memory) {k}"),
    "roles.self": N_("  {kind:<9} causal self-attention (§28): Query = Key = Value = the one sequence "
                     "source <eos> <bos> target {q}; causal"),
    "roles.other": N_("  {kind:<9} Query {q}; Key = Value {k}"),
    "roles.prenorm": N_("  (pre-norm: each attention reads LayerNorm of its input stream, section 4)"),
    "inproj.1": N_("  in_proj: one nn.Linear({D}, {D3}) per attention layer ({name}); its weight ({D3}, {D}) is laid "
                   "out as nn.MultiheadAttention's in_proj_weight, [W_q; W_k; W_v]:"),
    "inproj.2": N_("    W_q = rows 0:{D}, W_k = rows {D}:{D2}, W_v = rows {D2}:{D3}, each ({D}, {D}), with biases "
                   "b_q, b_k, b_v ({D},)"),
    "inproj.3": N_("    H = {H} heads of size D/H = {D}/{H} = {Dh} (§11): head h owns rows (h−1)·{Dh} : h·{Dh} of "
                   "each, W_q^(h), W_k^(h), W_v^(h) of shape ({Dh}, {D})"),
    "inproj.4": N_("    q^(h) = W_q^(h) x + b_q^(h), k^(h), v^(h): ({Dh},) per position; head h returns Σ α v^(h) "
                   "({Dh},); the {H} concatenated ({H} × {Dh} = {D}) → out_proj ({D}, {D}), §11's W_o (not §8's "
                   "output layer)"),
    "score.head": N_("  one query worked by hand: {kind}, layer {layer} of {L}, step 1 (query position {qpos}, "
                     "{qtok!r}), against its {K} keys:"),
    "score.row": "    {label}{cols}{note}",  # label: ljust to 22 cells (a CJK label is wider than it is long)
    "score.keys": N_("keys"),
    "score.dot": N_("head {h}: q·k/√{Dh}"),
    "score.softmax": N_("  softmax"),
    "score.mean": N_("mean of the {H} heads"),
    "score.printed": N_("   ← step 1's attention row (heads averaged, section 5)"),
    "score.check": N_("  recomputed from in_proj's slices: max |Δ| = {gap_model:.1e} against the model's own weights, "
                      "{gap_row:.1e} against the row step 1 printed"),
    "add.q": N_("  Query   q = s(t'−1), the decoder's previous top state {q} (at step 1 the encoder's final state, "
                "where the decoder starts)"),
    "add.q.current": N_("  Query   q = s(t'), the decoder's top state after this step's GRU update {q} (Luong et al. 2015's "
                        "order, model.attention_query=current; D2L §10.4 queries with s(t'−1))"),
    "add.k": N_("  Keys    k_t = h_t, the encoder states {k}"),
    "add.v": N_("  Values  v_t = h_t, the same encoder states (Key = Value, §2): there is no W_v, the values are mixed "
                "as they are"),
    "add.o": N_("  output  the context vector c_t' = Σ_t α_t h_t {c} (section 5 prints it at every step)"),
    "add.w": N_("  parameters: W_q {Wq}, W_k {Wk}, w_v {wv}: the notes' Query and Key matrices and scoring vector (§9); "
                "one head"),
    "add.other": N_("  score: this model's attention module is {cls}, the score its config chose, not the additive one; "
                    "step 1's scores are not worked by hand here"),
    "add.score": N_("  additive score (§2; D2L 10.3.2 zh / 11.3.4 en): e_t = w_vᵀ tanh(W_q q + W_k k_t), not q·k/√d (the "
                    "Transformer's, §12)"),
    "add.keys": N_("keys k_t = h_t"),
    "add.dot": N_("score e_t"),
    "add.softmax": N_("softmax α_t"),
    "add.printed": N_("   ← step 1's attention row (section 5)"),
    "add.check": N_("  recomputed from W_q, W_k, w_v: max |Δ| = {gap_model:.1e} against the model's own weights, "
                    "{gap_row:.1e} against the row step 1 printed"),
    # 7. one logit by hand
    "logit.head": N_("\n== 7. one logit by hand (§8): logit_id = W_o[id] · out + b_o[id]"),
    "logit.out": N_("  out = the decoder's top state at step 1, what the output layer reads, {shape} = {vec}"),
    "logit.W": N_("  W_o {W}, b_o {b}: the output layer's parameters (the notes' Dense layer, §8)"),
    "logit.tied": N_("  weight tying (model.tie_embeddings=true): W_o is the {table} table itself, one {W} tensor, "
                     "shared, counted once in §9's table; row id of W_o is token id's embedding"),
    "logit.out.current": N_("  out = tanh(W_c [s; c]) at step 1, the attentional state the output layer reads (the "
                            "decoder state and the context vector joined by W_c), {shape} = {vec}"),
    "logit.untied": N_("  W_o is its own matrix (model.tie_embeddings=false), apart from the target embedding"),
    "logit.id": N_("  id = {id} ({tok!r}, the token step 1 chose): W_o[{id}] = {vec}"),
    "logit.sum": N_("  W_o[{id}]·out = {dot:+.4f}, b_o[{id}] = {bias:+.4f} → logit = {hand:+.4f}; the model's logit "
                    "{model:+.4f} (|Δ| = {gap:.1e})"),
    "logit.p": N_("  softmax over all {V} logits → p({tok!r}) = {p:.3f}, the probability step 1 printed"),
})

#: The §9 table's context-vector rows: (name, note).
ROWS: dict[str, tuple[str, str]] = {
    "context_add": (N_("context vectors c_t'"), N_("Σ_t α_t h_t, one per decoder step (§1): an activation, not a "
                                                    "parameter")),
    "context_mha": (N_("context vectors (cross)"), N_("Σ_j α_j v_j per layer, heads concatenated: an activation, "
                                                      "not a parameter")),
    "context_self": (N_("attention outputs ({kind})"), N_("Σ_j α_j v_j per layer, heads concatenated: an activation "
                                                          "(self-attention's context vectors)")),
    "context_fixed": (N_("context vector c"), N_("the encoder's last state, read at every step (§1): an activation")),
}


def _say(out: Out, key: str, **kw: Any) -> None:
    out(TEXT[key].format(**kw))


def _fmt(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _vec(t: Tensor, n: int = 4) -> str:
    vals = ", ".join(f"{v:+.3f}" for v in t[:n].tolist())
    return f"[{vals}{', …' if t.numel() > n else ''}]"


# ------------------------------------------------------------------------------------------ capture


class Call(hooks.Call):
    """One call of a module during the captured pass: what it read and what it returned."""

    def arg(self, i: int, name: str) -> Any:
        """Argument ``name``, passed at position ``i`` or by keyword (None when absent)."""
        return self.args[i] if len(self.args) > i else self.kwargs.get(name)


@dataclass
class Capture:
    """The calls of the interesting modules during one teacher-forced pass, in call order, and the
    pass's :class:`~attnlab.models.ModelOutput` (``fwd``). ``S``/``T``: source and decoder-input lengths."""

    calls: list[Call]
    fwd: Any
    S: int
    T: int

    def of(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]


_WATCHED = (MultiHeadAttention, PositionWiseFFN, nn.LayerNorm, EncoderBlock, DecoderBlock)


def attention_path(t: ModelTraits, kind: str, layer: int | None = None) -> str:
    """Where ``kind``'s attention module sits in the model, in layer ``layer`` (counted from 0; None: the
    last): the traits' path (``attention_modules``, ``*`` for the layer), else ``"attention"``, the model's
    own attention module (Bahdanau: one module, built from the config's score, shared by every layer)."""
    path = t.attention_modules.get(kind)
    if path is None:
        return "attention"
    return path.replace("*", str(t.attention[kind] - 1 if layer is None else layer))


def attention_module(model: nn.Module, t: ModelTraits, kind: str) -> nn.Module:
    """The module that computes ``kind``'s attention in the model's last layer (:func:`attention_path`)."""
    return model.get_submodule(attention_path(t, kind))


def recurrent_attention(model: nn.Module, t: ModelTraits) -> nn.Module | None:
    """A GRU model's attention module (Bahdanau's, whatever its score), None without one (seq2seq, Transformers)."""
    return attention_module(model, t, "cross") if t.recurrent and "cross" in t.attention else None


def is_additive(module: nn.Module) -> bool:
    """Does ``module`` score with the additive score ``w_vᵀ tanh(W_q q + W_k k)`` (§2)? Read from the
    parameters the formula needs, so any score module with ``W_q``, ``W_k`` and ``w_v`` is worked by hand."""
    return all(isinstance(getattr(module, n, None), nn.Linear) for n in ("W_q", "W_k", "w_v"))


def capture(model: nn.Module, batch: Batch, device: torch.device) -> Capture:
    """One teacher-forced pass of ``batch`` (one sentence), recording every attention, FFN, LayerNorm and
    Transformer block (:func:`attnlab.analysis.hooks.recording`; the tensors are kept, inference mode)."""
    extra = recurrent_attention(model, traits(model.config))
    watched = [(n, m) for n, m in model.named_modules() if isinstance(m, _WATCHED) or m is extra]
    with hooks.recording(watched) as recorded:
        fwd = teacher_forced(model, batch, device)
    calls = [Call(c.name, c.module, c.args, c.kwargs, c.output) for c in recorded]
    return Capture(calls, fwd, batch.src.shape[1], batch.tgt_in.shape[1])


def _cpu(x: Tensor) -> Tensor:
    return x.detach().float().cpu()


# --------------------------------------------------------------------------- 4. residual + LayerNorm


def _position(length: int, decoder: bool, cap: Capture, src: list[str], tgt: list[str]) -> tuple[int, str]:
    """The position shown for a stream of ``length``: the first target position of a stream that holds
    the target (the decoder's; decoder-only's ``source <eos> <bos> …``), else the first source token."""
    if length == cap.S + cap.T:
        return cap.S, (src + tgt)[cap.S]
    return (0, tgt[0]) if decoder else (0, src[0])


def _reads_decoder(c: Call, cap: Capture) -> bool:
    """Does a stack's final LayerNorm read the decoder's stream? (the block whose output it normalises
    is a DecoderBlock; decoder-only's norm reads the target part, of length T)."""
    feeder = [b for b in cap.calls if isinstance(b.module, EncoderBlock | DecoderBlock) and b.output[0] is c.args[0]]
    return isinstance(feeder[0].module, DecoderBlock) if feeder else c.args[0].shape[1] == cap.T


def residual_section(model: nn.Module, cap: Capture, src: list[str], tgt: list[str], out: Out) -> None:
    """4. the norm placement and the residual adds of every Transformer block (nothing for GRU models).

    In each block the k-th LayerNorm belongs to the k-th sublayer (attention or FFN) in call order.
    Pre-norm: X = the norm's input, the sum X + Sublayer is the next norm's input (the block's output
    after the last sublayer). Post-norm: X = the sublayer's input, the sum is its norm's input.
    """
    blocks = [(n, m) for n, m in model.named_modules() if isinstance(m, EncoderBlock | DecoderBlock)]
    if not blocks:
        return
    nf = bool(blocks[0][1].norm_first)
    finals = [c for c in cap.calls if isinstance(c.module, nn.LayerNorm) and "." not in c.name]
    _say(out, "res.head", placement="pre-norm" if nf else "post-norm (the notes' placement)", nf=str(nf).lower())
    _say(out, "res.notes")
    if nf:
        _say(out, "res.pre", finals=", ".join(c.name for c in finals))
        _say(out, "res.pre_why")
    else:
        _say(out, "res.post")
    _say(out, "res.switch", other=str(not nf).lower())
    _say(out, "res.risk")
    _say(out, "res.rows", D=model.config.num_hiddens)
    gap = 0.0
    with torch.inference_mode():
        for name, block in blocks:
            gap = max(gap, _block_rows(name, block, nf, cap, src, tgt, out))
        for c in finals:
            x, y = _cpu(c.args[0])[0], _cpu(c.output)[0]
            p, tok = _position(x.shape[0], _reads_decoder(c, cap), cap, src, tgt)
            _say(out, "res.final", block=c.name, pos=_("pos {pos} {token!r}").format(pos=p + 1, token=tok), sub="LayerNorm",
                 x=float(x[p].norm()), y=float(y[p].norm()))
    _say(out, "res.check", gap=gap)


def _block_rows(name: str, block: nn.Module, nf: bool, cap: Capture, src: list[str], tgt: list[str],
                out: Out) -> float:
    """The rows of one block; returns max |(X + Sublayer) − the model's next tensor|."""
    depth = name.count(".") + 1
    inner = [c for c in cap.calls if c.name.startswith(name + ".") and c.name.count(".") == depth]
    norms = [c for c in inner if isinstance(c.module, nn.LayerNorm)]
    subs = [c for c in inner if not isinstance(c.module, nn.LayerNorm)]
    (whole,) = cap.of(name)
    block_out = _cpu(whole.output[0])[0]  # (L, D)
    p, tok = _position(block_out.shape[0], isinstance(block, DecoderBlock), cap, src, tgt)
    stack, layer = name.rsplit(".", 1)
    gap = 0.0
    for k, (norm, sub) in enumerate(zip(norms, subs)):
        s = _cpu(sub.output[0] if isinstance(sub.output, tuple) else sub.output)[0]  # (L, D)
        if nf:
            x = _cpu(norm.args[0])[0]
            nxt = _cpu(norms[k + 1].args[0])[0] if k + 1 < len(norms) else block_out
            ln = ""
        else:
            x = _cpu(sub.args[0])[0]
            nxt = _cpu(norm.args[0])[0]
            ln = TEXT["res.ln"].format(n=float(_cpu(norm.output)[0][p].norm()))
        y = x + s
        gap = max(gap, float((y - nxt).abs().max()))
        _say(out, "res.row", block=_("{stack} layer {layer}").format(stack=stack, layer=int(layer) + 1) if k == 0 else "",
             pos=_("pos {pos} {token!r}").format(pos=p + 1, token=tok) if k == 0 else "", sub=sub.name.rsplit(".", 1)[-1],
             x=float(x[p].norm()), s=float(s[p].norm()), y=float(y[p].norm()), ln=ln)
    return gap


@dataclass
class FFNCheck:
    """§19 on one trained FFN: ``each`` = max |one position at a time − all at once|, ``perm`` = max |FFN(X[π]) −
    FFN(X)[π]|, ``ffn_mix``/``att_mix`` = how much the outputs at the other positions move when position 1's input
    is replaced (the FFN's: 0; the same layer's self-attention's: not 0)."""

    name: str
    order: list[int]  # π, 0-based
    each: float
    perm: float
    ffn_mix: float
    att_mix: float | None
    replaced_by: int  # the position whose vector replaced position 0's (0-based)


def ffn_check(cap: Capture) -> FFNCheck | None:
    """:class:`FFNCheck` of the first FFN the captured pass called (layer 1), on the very tensor it read; None
    for a model without one. The attention compared is the first self-attention of the same block."""
    ffn = next((c for c in cap.calls if isinstance(c.module, PositionWiseFFN)), None)
    if ffn is None:
        return None
    f, x = ffn.module, ffn.args[0][:1]  # (1, L, D)
    L = x.shape[1]
    block = ffn.name.rsplit(".", 1)[0]
    att = next((c for c in cap.calls if isinstance(c.module, MultiHeadAttention) and c.name.startswith(block + ".")),
               None)
    order = list(range(L))[::-1] if L > 1 else [0]
    k = L - 1
    with torch.inference_mode():
        whole = f(x)  # (1, L, D)
        each = torch.cat([f(x[:, i : i + 1]) for i in range(L)], dim=1)  # (1, L, D), one position per call
        permuted = f(x[:, order])  # (1, L, D)
        x2 = x.clone()
        x2[:, 0] = x[:, k]
        ffn_mix = float((f(x2) - whole)[:, 1:].abs().max()) if L > 1 else 0.0
        att_mix = None
        if att is not None and L > 1:
            q = att.arg(0, "query")[:1]  # self-attention: key and value are the query (None or the same tensor)
            q2 = q.clone()
            q2[:, 0] = q[:, k]
            kw = {n: v for n, v in att.kwargs.items() if n in ("mask", "is_causal")}
            if len(att.args) > 3:
                kw["mask"] = att.args[3]
            same_kv = att.arg(1, "key") is None or att.arg(1, "key") is att.args[0]
            if same_kv:
                a1 = att.module(q, None, None, **kw)[0]
                a2 = att.module(q2, None, None, **kw)[0]
                att_mix = float((a2 - a1)[:, 1:].abs().max())
    return FFNCheck(ffn.name, order, float((each - whole).abs().max()), float((permuted - whole[:, order]).abs().max()),
                    ffn_mix, att_mix, k)


def ffn_section(cap: Capture, src: list[str], tgt: list[str], out: Out) -> None:
    """§19 shown on the model (:func:`ffn_check`): the FFN is one function at every position and mixes no tokens."""
    check = ffn_check(cap)
    if check is None:
        return
    f = next(c.module for c in cap.calls if c.name == check.name)
    tokens = src if len(check.order) == cap.S else (src + tgt if len(check.order) == cap.S + cap.T else tgt)
    _say(out, "ffn.head", name=check.name, W1=_fmt(f.dense1.weight.shape), W2=_fmt(f.dense2.weight.shape))
    _say(out, "ffn.each", n=len(check.order), gap=check.each)
    _say(out, "ffn.perm", order=" ".join(str(i + 1) for i in check.order), gap=check.perm)
    if check.att_mix is not None:
        _say(out, "ffn.mix", tok=tokens[0] if tokens else "", k=check.replaced_by + 1, ffn=check.ffn_mix,
             att=check.att_mix)


# ------------------------------------------------------------------------------- 6. Query, Key, Value


def roles_section(model: nn.Module, t: ModelTraits, cap: Capture, src: list[str], tgt: list[str],
                  printed_row: Tensor | None, out: Out) -> None:
    """6. the Query, Key and Value of each attention kind, ``in_proj``'s split, and the scores of
    step 1's query worked by hand against ``printed_row`` ``(S,)``, the row the decoding section printed."""
    _say(out, "roles.head")
    if not t.attention:
        _say(out, "roles.none", c=f"(1, {model.config.num_hiddens})")
        return
    shown = "cross" if "cross" in t.attention else next(iter(t.attention))
    module = attention_module(model, t, shown)
    with torch.inference_mode():
        if t.recurrent:  # Bahdanau: one attention module, whatever its score
            _recurrent_roles(module, cap.of(attention_path(t, shown)), cap, src, printed_row, out,
                             after_step=bool(getattr(model, "after_step", False)))
            return
        for kind in t.attention:
            call = cap.of(attention_path(t, kind))[0]
            q, k = call.arg(0, "query"), call.arg(1, "key")
            key = "roles." + kind if "roles." + kind in TEXT else "roles.other"
            _say(out, key, kind=kind, q=_fmt(q.shape), k=_fmt((k if k is not None else q).shape))
        if model.config.norm_first:
            _say(out, "roles.prenorm")
        _in_proj_lines(module, t.attention_modules[shown].replace("*", "ℓ"), out)
        _mha_scores(module, shown, t, cap, src, tgt, printed_row, out)


def _in_proj_lines(mha: MultiHeadAttention, name: str, out: Out) -> None:
    D, H = mha.num_hiddens, mha.num_heads
    _say(out, "inproj.1", D=D, D3=3 * D, name=f"{name}.in_proj")
    _say(out, "inproj.2", D=D, D2=2 * D, D3=3 * D)
    _say(out, "inproj.3", D=D, H=H, Dh=mha.head_size)
    _say(out, "inproj.4", D=D, H=H, Dh=mha.head_size)


def head_scores(mha: MultiHeadAttention, query: Tensor, keys: Tensor, h: int) -> Tensor:
    """Head ``h``'s scores ``q^(h)·k^(h)/√Dh`` ``(Q, K)`` of ``query (Q, D)`` against ``keys (K, D)``,
    from the slices of ``in_proj`` that belong to head h (rows ``h·Dh:(h+1)·Dh`` of W_q and W_k)."""
    D, Dh = mha.num_hiddens, mha.head_size
    W = _cpu(mha.in_proj.weight)  # (3D, D) = [W_q; W_k; W_v]
    b = _cpu(mha.in_proj.bias) if mha.in_proj.bias is not None else torch.zeros(3 * D)
    rq, rk = slice(h * Dh, (h + 1) * Dh), slice(D + h * Dh, D + (h + 1) * Dh)
    q = query @ W[rq].T + b[rq]  # (Q, Dh)
    k = keys @ W[rk].T + b[rk]  # (K, Dh)
    return q @ k.T / math.sqrt(Dh)  # (Q, K)


def _visible(call: Call, i: int, Q: int, K: int) -> Tensor:
    """``(K,)`` True where query ``i`` may attend: the call's mask (True = may attend) and its causal flag."""
    ok = torch.ones(K, dtype=torch.bool)
    mask = call.kwargs.get("mask")
    if mask is not None:
        m = mask[0].cpu()  # (1 or Q, K)
        ok &= m[min(i, m.shape[0] - 1)]
    if call.kwargs.get("is_causal"):
        ok &= torch.arange(K) <= i + K - Q  # the last query sees the last key (masks.causal_mask)
    return ok


def _row(out: Out, label: str, values: list[str], width: int, note: str = "") -> None:
    """One row of a scores table: a label, then one right-aligned column per key."""
    _say(out, "score.row", label=ljust(label, 22), cols="".join(f"{v:>{width}}" for v in values), note=note)


def _mha_scores(mha: MultiHeadAttention, kind: str, t: ModelTraits, cap: Capture, src: list[str],
                tgt: list[str], printed_row: Tensor | None, out: Out) -> None:
    L = t.attention[kind]
    call = cap.of(attention_path(t, kind))[0]
    query = _cpu(call.arg(0, "query"))[0]  # (Q, D)
    key = call.arg(1, "key")
    keys = _cpu(key)[0] if key is not None else query  # (K, D): self-attention matches the query's own sequence
    Q, K = query.shape[0], keys.shape[0]
    i = Q - cap.T  # step 1: the first decoder input (<bos>), also after decoder-only's source
    labels = src if K == cap.S else tgt if K == cap.T else (src + tgt)[:K]
    qlabels = tgt if Q == cap.T else (src + tgt)[:Q]
    ok = _visible(call, i, Q, K)
    width = max(9, max(len(s) for s in labels) + 2)
    shown = min(K, 12)  # a long sentence prints its first 12 keys; the checks cover them all
    _say(out, "score.head", kind=kind, layer=L, L=L, qpos=i + 1, qtok=qlabels[i], K=K)
    _row(out, TEXT["score.keys"], labels[:shown], width, " …" if K > shown else "")
    model_w = _cpu(cap.fwd.attention[kind])[0, L - 1, :, i]  # (H, K) the model's weights for this query
    rows = []
    for h in range(mha.num_heads):
        s = head_scores(mha, query[i:i + 1], keys, h)[0]  # (K,)
        alpha = torch.softmax(s.masked_fill(~ok, -math.inf), dim=-1)  # masked keys get exactly 0
        rows.append(alpha)
        scores = [f"{v:+.3f}" if o else "masked" for v, o in zip(s[:shown].tolist(), ok[:shown].tolist())]
        _row(out, TEXT["score.dot"].format(h=h + 1, Dh=mha.head_size), scores, width)
        _row(out, TEXT["score.softmax"], [f"{v:.3f}" for v in alpha[:shown].tolist()], width)
    alphas = torch.stack(rows)  # (H, K)
    mean = alphas.mean(dim=0)
    _row(out, TEXT["score.mean"].format(H=mha.num_heads), [f"{v:.3f}" for v in mean[:shown].tolist()], width,
         TEXT["score.printed"])
    gap_row = float((mean[: printed_row.numel()] - printed_row).abs().max()) if printed_row is not None else math.nan
    _say(out, "score.check", gap_model=float((alphas - model_w).abs().max()), gap_row=gap_row)


def additive_scores(att: nn.Module, query: Tensor, keys: Tensor) -> Tensor:
    """Bahdanau's scores ``e_t = w_vᵀ tanh(W_q q + W_k k_t)`` ``(K,)`` of one ``query (D,)`` against
    ``keys (K, M)``, from the module's three weights."""
    features = query @ _cpu(att.W_q.weight).T + keys @ _cpu(att.W_k.weight).T  # (K, A) by broadcasting
    return features.tanh() @ _cpu(att.w_v.weight)[0]  # (K,)


def _recurrent_roles(att: nn.Module, calls: list[Call], cap: Capture, src: list[str], printed_row: Tensor | None,
                     out: Out, after_step: bool = False) -> None:
    """Bahdanau's Query, Key and Value (the same for every score: the decoder state, s(t'−1) or with
    ``after_step`` s(t'), against the encoder states h_t), then step 1's scores worked by hand when the
    module scores additively (:func:`is_additive`)."""
    call = calls[0]  # step 1's call (after_step: every step's queries in one call, step 1's first)
    query = _cpu(call.arg(0, "queries"))[0, 0]  # (D,) s(0), or s(1) after the step
    values = _cpu(call.arg(2, "values"))[0]  # (S, M): the keys are these same states
    context = call.output[0]
    _say(out, "add.q.current" if after_step else "add.q", q=_fmt((1, 1, query.numel())))
    _say(out, "add.k", k=_fmt((1, *values.shape)))
    _say(out, "add.v")
    _say(out, "add.o", c=_fmt(context.shape))
    if not is_additive(att):
        _say(out, "add.other", cls=type(att).__name__)
        return
    _say(out, "add.w", Wq=_fmt(att.W_q.weight.shape), Wk=_fmt(att.W_k.weight.shape), wv=_fmt(att.w_v.weight.shape))
    _say(out, "add.score")
    e = additive_scores(att, query, values)
    mask = call.arg(3, "mask")
    ok = mask[0, 0].cpu() if mask is not None else torch.ones(e.numel(), dtype=torch.bool)
    alpha = torch.softmax(e.masked_fill(~ok, -math.inf), dim=-1)
    width = max(9, max(len(s) for s in src) + 2)
    shown = min(e.numel(), 12)
    _row(out, TEXT["add.keys"], src[:shown], width, " …" if e.numel() > shown else "")
    _row(out, TEXT["add.dot"], [f"{v:+.3f}" for v in e[:shown].tolist()], width)
    _row(out, TEXT["add.softmax"], [f"{v:.3f}" for v in alpha[:shown].tolist()], width, TEXT["add.printed"])
    model_w = _cpu(cap.fwd.attention["cross"])[0, 0, 0, 0]  # (S,) the model's step-1 row
    gap_row = float((alpha - printed_row).abs().max()) if printed_row is not None else math.nan
    _say(out, "add.check", gap_model=float((alpha - model_w).abs().max()), gap_row=gap_row)


# --------------------------------------------------------------------------------- 7. one logit by hand


def logit_section(model: nn.Module, t: ModelTraits, cap: Capture, tgt_tok, out: Out) -> None:
    """7. ``logit_id = W_o[id]·out + b_o[id]`` (§8) for the token step 1 chose (the argmax of its
    logits: greedy), computed from ``model.output``'s weight and bias and checked against the model's
    logit; names the table W_o is tied to, when it is."""
    layer: nn.Linear = model.output
    W, b = layer.weight, layer.bias
    hidden = _cpu(cap.fwd.hidden)[0, 0]  # (D,) what the output layer reads at step 1
    logits = _cpu(cap.fwd.logits)[0, 0]  # (V,)
    tok_id = int(logits.argmax())
    tok = display_tokens([tgt_tok.id_to_token(tok_id)], marks_word_starts(tgt_tok))[0]
    with torch.inference_mode():
        row = _cpu(W[tok_id])
        dot = float(row @ hidden)
        bias = float(b[tok_id]) if b is not None else 0.0
    hand = dot + bias
    _say(out, "logit.head")
    _say(out, "logit.out.current" if getattr(model, "after_step", False) else "logit.out",
         shape=_fmt(hidden.shape), vec=_vec(hidden))
    _say(out, "logit.W", W=_fmt(W.shape), b=_fmt(b.shape) if b is not None else "(none)")
    tied = [name for name in t.embeddings if model.get_submodule(name).weight is W]
    if tied:
        _say(out, "logit.tied", table=tied[-1], W=_fmt(W.shape))
    else:
        _say(out, "logit.untied")
    _say(out, "logit.id", id=tok_id, tok=tok, vec=_vec(row))
    _say(out, "logit.sum", id=tok_id, dot=dot, bias=bias, hand=hand, model=float(logits[tok_id]),
         gap=abs(hand - float(logits[tok_id])))
    _say(out, "logit.p", V=logits.numel(), tok=tok, p=float(torch.softmax(logits, dim=-1)[tok_id]))


# ------------------------------------------------------------------------------------------ §9 rows


def context_rows(model: nn.Module, t: ModelTraits, cap: Capture) -> list[tuple[str, str, str]]:
    """The §9 table's context-vector rows ``(name, shape, note)`` for this sentence: Bahdanau's
    c_t' ``(1, T, M)``, the Transformer's cross-attention outputs ``(1, T, D)`` per layer, or the
    fixed-context seq2seq's c ``(1, D)``; a model with self-attention alone gets its attention outputs."""
    if t.recurrent and "cross" in t.attention:
        calls = cap.of(attention_path(t, "cross"))  # one per decoder step
        M = calls[0].output[0].shape[-1]
        name, note = ROWS["context_add"]
        return [(_(name), f"(1, {len(calls)}, {M})", _(note))]
    if t.attention_modules:
        kind = "cross" if "cross" in t.attention_modules else next(iter(t.attention_modules))
        call = cap.of(attention_path(t, kind, layer=0))[0]
        name, note = ROWS["context_mha" if kind == "cross" else "context_self"]
        return [(_(name).format(kind=kind), _("{shape} × {n} layers").format(shape=_fmt(call.output[0].shape),
                                                                           n=t.attention[kind]), _(note))]
    if t.recurrent and not t.attention:
        name, note = ROWS["context_fixed"]
        return [(_(name), f"(1, {model.config.num_hiddens})", _(note))]
    return []
