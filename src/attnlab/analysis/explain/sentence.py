"""One sentence followed through a trained model, in words and shapes (notes §4–9).

:func:`run` follows the sentence through the model and returns an :class:`ExplainReport`, whose
``format()`` is the text that ``attnlab explain RUN "i'm home ."`` prints and whose ``figure()`` is the
GRU's gates:

1. tokens → ids (§4), with ``<eos>`` and the valid length;
2. the embedding rows those ids select and the resulting shapes (§5);
3. the path through the network: every module in call order with its output shape — per layer
   for a Transformer — recorded by forward hooks on a teacher-forced pass;
4. for GRU models, the gates z and r at every step (§6–7), read from the from-scratch GRU (checked to
   give the trained model's logits); for Transformers, the norm placement and residual adds (:mod:`.roles`);
5. greedy decoding step by step (§3, §22): the attention over the source and the top-k logits with
   their probabilities (§8) — the translator's own greedy search; then what each output looks at and
   what it depends on (:mod:`.depends`);
6. Query, Key and Value of each attention kind (§2, §12, §18), ``in_proj`` split into W_q, W_k, W_v
   and heads (§11), and step 1's scores worked by hand (:mod:`.roles`);
7. one logit worked by hand, ``W_o[id]·out + b_o[id]`` (§8), and weight tying;
8. with a reference: the teacher-forced cross-entropy, token by token (§21), and the sentence BLEU (§9 lists it);
9. the §9 tables: which things are parameters (with shapes) and which are not: computed values
   (context vectors included) and buffers (the positional encoding).

What differs between model families is asked of the model (:func:`attnlab.models.traits`), never
of its kind name.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.analysis import hooks
from attnlab.analysis.explain import by_hand, params
from attnlab.analysis.explain.looks_and_depends import DependsReport
from attnlab.analysis.explain.looks_and_depends import run as depends_on
from attnlab.analysis.explain.params import tied_note
from attnlab.analysis.report import TextReport
from attnlab.data.batching import Batch, collate
from attnlab.data.vocab import EOS, UNK
from attnlab.errors import AttnlabError
from attnlab.evaluation.bleu import d2l_bleu
from attnlab.i18n import N_, _, ljust, rjust, width
from attnlab.maps import display_tokens, marks_word_starts
from attnlab.models import ModelTraits, StepOutput, build_model, traits
from attnlab.models.gru import ScratchGRU
from attnlab.translator import Translator, decode_many, teacher_forced, token_labels

__all__ = ["ExplainReport", "GateTrack", "gate_tracks", "gates_figure", "run", "scratch_gru_copy"]

Out = Any  # the list.append that collects the text's lines


def _fmt_shape(x: Any) -> str:
    if isinstance(x, Tensor):
        return "(" + ", ".join(map(str, x.shape)) + ")"
    return type(x).__name__


def _fmt_output(out: Any) -> str:
    if isinstance(out, Tensor):
        return _fmt_shape(out)
    if isinstance(out, tuple | list):
        parts = [_fmt_shape(o) for o in out if isinstance(o, Tensor)]
        return " + ".join(parts) if parts else type(out).__name__
    return type(out).__name__


def _vec(t: Tensor, n: int = 4) -> str:
    vals = ", ".join(f"{v:+.3f}" for v in t[:n].tolist())
    return f"[{vals}{', …' if t.numel() > n else ''}]"


class RecordingGRU(ScratchGRU):
    """A :class:`ScratchGRU` that keeps the gates of every call (same parameters, same results)."""

    def __init__(self, like: ScratchGRU) -> None:
        super().__init__(like.input_size, like.hidden_size, like.num_layers, like.dropout.p, like.bias,
                         like.bidirectional)
        self.gates: list[Any] = []
        self.outputs: list[Tensor] = []

    def forward(self, x, h0=None, valid_lens=None, return_gates=False):
        out, h, gates = super().forward(x, h0, valid_lens, return_gates=True)
        self.gates.append(gates)  # GRUGates of (B, L·dirs, T, D)
        self.outputs.append(out)  # (B, T, D·dirs): the top layer's states h_t
        return (out, h, gates) if return_gates else (out, h)


def scratch_gru_copy(translator: Translator) -> nn.Module:
    """A copy of the translator's GRU model whose two GRUs are from-scratch GRUs that record their gates,
    with the same weights (the scratch GRU names its parameters like ``nn.GRU``, so they load as they are);
    every other part, its attention module included, is the model's own, copied.

    ``model.encoder.rnn.gates`` and ``model.decoder.gates`` collect one ``GRUGates`` per call.
    """
    trained = translator.model
    scratch = build_model(replace(translator.cfg.model, scratch_gru=True), len(translator.src_tok),
                          len(translator.tgt_tok))  # built for its two ScratchGRUs only
    model = copy.deepcopy(trained)
    model.encoder.rnn = RecordingGRU(scratch.encoder.rnn)
    model.decoder = RecordingGRU(scratch.decoder)
    model.encoder.rnn.load_state_dict(trained.encoder.rnn.state_dict())
    model.decoder.load_state_dict(trained.decoder.state_dict())
    return model.to(translator.device).eval()


class _Watched(nn.Module):
    """``model`` seen through the decoding protocol, asking every step for its attention and keeping
    ``(input token, StepOutput)`` of each: the translator's greedy search decodes, explain reads along."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.module = model  # named as PyTorch's wrappers name it: attnlab.fast reads its kernels choice
        self.config = model.config
        self.training = model.training  # decode_many restores the mode it finds: the model's own
        self.steps: list[tuple[int, StepOutput]] = []
        self.memory: Tensor | None = None  # (1, S, M) the encoder states h_t: keys = values (§2)

    def encode(self, src, src_valid_lens, need_weights=False):
        enc = self.module.encode(src, src_valid_lens, need_weights=need_weights)
        self.memory = enc.memory
        return enc

    def init_state(self, enc, src_valid_lens):
        return self.module.init_state(enc, src_valid_lens)

    def step(self, tokens, state, need_weights=False):
        out = self.module.step(tokens, state, need_weights=True)  # explain shows every step's attention
        self.steps.append((int(tokens[0]), out))
        return out


@dataclass
class _Step:
    """What one greedy step read, looked at and chose (the rows of section 5)."""

    input: str
    top: list[tuple[str, float]]
    chosen: str
    p_chosen: float
    attention: list[tuple[str, float]] | None = None
    attention_kind: str | None = None
    weights: Tensor | None = None  # (S,) the whole row that ``attention`` shows the top of
    context: Tensor | None = None  # (M,) additive attention's output c_t' = Σ α h_t (Bahdanau)
    context_gap: float | None = None  # max |Σ α h_t − the attention module's own output|


def _shown(tok, ids: list[int], eos: bool = False) -> list[str]:
    """The tokens of ``ids`` in ``tok``'s vocabulary (and ``<eos>`` when ``eos``) as every label of this
    walk-through shows them (:func:`attnlab.maps.display_tokens`: no ``▁`` mark)."""
    return display_tokens(token_labels(tok, ids, eos=eos), marks_word_starts(tok))


def _layer_from_1(module_path: str) -> str:
    """`` (layer N)`` for a PyTorch module path with a block index (``encoder_blocks.0.…`` → layer 1):
    the paths count from 0, every label and figure of attnlab counts layers from 1."""
    m = re.search(r"blocks\.(\d+)", module_path)
    return "   " + _("(layer {layer})").format(layer=int(m.group(1)) + 1) if m else ""


_SHOWN = (
    "MultiHeadAttention",
    "PositionWiseFFN",
    "EncoderBlock",
    "DecoderBlock",
    "GRUEncoder",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEncoding",
)  # the notes' parts, beside the PyTorch layers of _record_modules and the model's own attention module


def _record_modules(model: nn.Module, run) -> list[tuple[str, str, str, int]]:
    """Run ``run()`` recording the model's parts (:func:`attnlab.analysis.hooks.recording`); returns
    ``(name, class, output shape of the first call, calls)`` in call order."""
    keep = (nn.Embedding, nn.Linear, nn.LayerNorm, nn.GRU, ScratchGRU)
    attention = by_hand.recurrent_attention(model, traits(model.config))  # Bahdanau's, whatever its score
    watched = [
        (name, m) for name, m in model.named_modules()
        if name and name.count(".") <= 3 and not isinstance(m, nn.Dropout | nn.Identity | nn.ModuleList)
        and (isinstance(m, keep) or type(m).__name__ in _SHOWN or m is attention)
    ]
    order: dict[str, list[Any]] = {}
    with hooks.recording(watched) as calls:
        run()
    for c in calls:
        rec = order.setdefault(c.name, [type(c.module).__name__, _fmt_output(c.output), 0])
        rec[2] += 1
    rows = [(n, r[0], r[1], r[2]) for n, r in order.items()]
    # A layer whose weight its parent only reads in slices is never called (cross-attention's in_proj: W_q on
    # the decoder's state, W_k and W_v on the memory); it is listed with its weight's shape and 0 calls, before
    # its first sibling, so every parameter tensor has its row.
    for name, m in watched:
        own = dict(m.named_parameters(recurse=False))
        if name in order or not own:
            continue
        parent = name.rsplit(".", 1)[0] + "."
        at = next((i for i, r in enumerate(rows) if r[0].startswith(parent)), len(rows))
        rows.insert(at, (name, type(m).__name__, _fmt_shape(own.get("weight", next(iter(own.values())))), 0))
    return rows


def run(translator: Translator, sentence: str, reference: str | None = None, top_k: int = 5) -> ExplainReport:
    """Follow ``sentence`` through the translator's model: every pass the walk-through reads (greedy
    decoding watched step by step, the teacher-forced passes over its output, the GRU's gates, the loss
    against ``reference``) is run here; :meth:`ExplainReport.format` writes the §4–9 text from them.

    Raises:
        AttnlabError: when the sentence (or the reference) has no token after preprocessing.
    """
    tr = translator
    t = traits(tr.cfg.model)
    ids, truncated = tr.encode_source(sentence)
    if not ids:
        raise AttnlabError(_("{sentence!r} has no token after preprocessing; give a sentence in the run's source language").format(sentence=sentence))
    if reference is not None and not tr.tgt_tok.encode(reference):
        raise AttnlabError(_("--reference {reference!r} has no token after preprocessing; give a sentence in the "
                             "run's target language").format(reference=reference))
    model = scratch_gru_copy(tr) if t.recurrent else tr.model  # the GRU's gates need the scratch cell
    model.eval()
    # decoding first, so the teacher-forced passes can follow the model's own output
    steps, hyp = _greedy_steps(model, t, ids, tr, top_k)
    src_labels = _shown(tr.src_tok, ids, eos=True)
    tracks = gate_tracks(model, tr.cfg.model.bidirectional, src_labels, [st.input for st in steps]) if t.recurrent else None
    batch = collate([ids], [hyp], [0])
    modules = _record_modules(model, lambda: teacher_forced(model, batch, tr.device))
    cap = by_hand.capture(model, batch, tr.device)  # the tensors sections 4, 6, 7 and 9 work by hand
    translation = tr.tgt_tok.decode(hyp)
    return ExplainReport(
        tr, model, t, sentence, ids, truncated, top_k, steps, translation, batch, modules, cap, tracks,
        scratch_gap=_scratch_gap(tr, model, batch) if t.recurrent else None,
        loss=_loss(model, tr, ids, reference, translation) if reference is not None else None,
        depends=depends_on(tr, sentence) if {"cross", "self"} & set(t.attention) else None,
    )


@dataclass
class ExplainReport(TextReport):
    """What :func:`run` computed for one sentence; :meth:`format` is the §4–9 walk-through (the sections of
    the module docstring), :meth:`figure` the GRU's gates (None for the other models)."""

    translator: Translator
    model: nn.Module  # the translator's model, or its recording scratch-GRU copy
    traits: ModelTraits
    sentence: str
    ids: list[int]  # source ids, without <eos>
    truncated: bool
    top_k: int
    steps: list[_Step]
    translation: str
    batch: Batch  # the teacher-forced pass over the model's own output
    modules: list[tuple[str, str, str, int]]  # (name, class, output shape, calls) in call order; 0 calls: read in slices (its weight shape)
    cap: by_hand.Capture
    tracks: dict[str, GateTrack] | None = None
    scratch_gap: float | None = None  # max |Δ| of the scratch GRU's logits against the trained model's
    loss: _Loss | None = None
    depends: DependsReport | None = None  # None: the model has no attention from output to source

    def _format(self) -> str:
        tr, t, model, cap = self.translator, self.traits, self.model, self.cap
        lines: list[str] = []
        out = lines.append
        seq = self.ids + [EOS]
        T = self.batch.tgt_in.shape[1]
        src_labels = _shown(tr.src_tok, self.ids, eos=True)
        tgt_labels = _shown(tr.tgt_tok, self.batch.tgt_in[0].tolist())  # <bos> y1 …: decoder inputs
        _tokens_section(tr, self.sentence, self.ids, self.truncated, out)  # 1
        _embedding_section(tr, t, model, seq, out)  # 2
        _network_section(self.modules, T, cap.fwd, out)  # 3
        if self.tracks is not None:
            _gates_section(tr, self.tracks, self.scratch_gap, out)  # 4 (GRU models)
        by_hand.residual_section(model, cap, src_labels, tgt_labels, out)  # 4 (Transformers)
        by_hand.ffn_section(cap, src_labels, tgt_labels, out)  # 4, §19 (Transformers)
        _decoding_section(self.steps, self.translation, len(tr.tgt_tok), self.top_k, out,
                          after_step=bool(getattr(tr.model, "after_step", False)))  # 5, as roles reads it
        if self.depends is not None:
            out(self.depends.format())  # 5: the alignment verdict beside integrated gradients
        first_row = self.steps[0].weights if self.steps else None
        by_hand.roles_section(model, t, cap, src_labels, tgt_labels, first_row, out)  # 6
        by_hand.logit_section(model, t, cap, tr.tgt_tok, out)  # 7
        if self.loss is not None:
            _loss_section(self.loss, out)  # 8
        _tables(tr, t, model, seq, cap, T, self.loss is not None, out)  # 9
        return "\n".join(lines)

    def figure(self):
        """The GRU's gates, every unit at every step (:func:`gates_figure`); None for the other models."""
        return gates_figure(self.tracks) if self.tracks is not None else None

    def to_json(self) -> dict[str, Any]:
        """The walk-through's data: tokens, the decoding steps, the network's modules, the loss; ``text``
        is :meth:`format`'s text in the current language (the sections worked by hand exist as text only)."""
        from attnlab.files import jsonable

        tr = self.translator
        steps = [{"input": st.input, "top": st.top, "chosen": st.chosen, "p_chosen": st.p_chosen,
                  "attention": st.attention, "context_gap": st.context_gap} for st in self.steps]
        modules = [{"name": n, "class": c, ("output" if k else "weight"): o, "calls": k} for n, c, o, k in self.modules]
        return jsonable({
            "sentence": self.sentence, "model_kind": tr.cfg.model.kind,
            "tokens": token_labels(tr.src_tok, self.ids), "ids": self.ids + [EOS], "translation": self.translation,
            "steps": steps, "modules": modules, "scratch_gap": self.scratch_gap,
            "loss": dataclasses.asdict(self.loss) if self.loss is not None else None,
            "depends": self.depends.to_json() if self.depends is not None else None, "text": self.format(),
        })


def _tokens_section(tr: Translator, sentence: str, ids: list[int], truncated: bool, out: Out) -> None:
    """1. tokens → ids (§4)."""
    seq = ids + [EOS]
    out(_("== 1. tokens → ids (notes §4) — {kind} model, source vocabulary of {size} entries").format(
        kind=tr.cfg.model.kind, size=len(tr.src_tok)))
    out(_("  sentence     : {sentence!r}").format(sentence=sentence))
    tokens = " ".join(_shown(tr.src_tok, ids, eos=True))
    out(_("  tokens       : {tokens}").format(tokens=tokens) + (_("   (truncated to fit the model)") if truncated else ""))
    out(_("  ids  X       : {ids}   shape ({n},), valid_len = {n}").format(ids=seq, n=len(seq)))
    unk = [w for w, i in zip(tr.src_tok.tokens(sentence), ids) if i == UNK]
    if unk:
        out(_("  unknown words became <unk> (id {unk}): {words}").format(unk=UNK, words=", ".join(unk)))
    out(_ids_are_not_quantities(tr, ids))


def _ids_are_not_quantities(tr: Translator, ids: list[int]) -> str:
    """The notes' point of §4 (an id is a row number, not a size: "home"'s id is larger than "i'm"'s) on this
    run's own ids: the sentence's first two different tokens, or its one token beside ``<eos>``."""
    pairs = list(dict.fromkeys(zip(ids, _shown(tr.src_tok, ids))))[:2]
    pairs += [(EOS, tr.src_tok.id_to_token(EOS))] * (2 - len(pairs))
    (small, small_word), (big, big_word) = sorted(pairs)
    return _("  ids are row numbers in the vocabulary, not quantities: {big} ({big_word}) is not 'more' than "
             "{small} ({small_word}).").format(big=big, big_word=big_word, small=small, small_word=small_word)


def _embedding_section(tr: Translator, t: ModelTraits, model: nn.Module, seq: list[int], out: Out) -> None:
    """2. the embedding rows the ids select (§5)."""
    D = tr.cfg.model.num_hiddens
    E = tr.cfg.model.embed_size if t.recurrent else D  # GRU models have their own embedding size
    emb = model.get_submodule(t.embeddings[0])  # the source's table (traits list it first)
    V_src = emb.weight.shape[0]
    out("\n" + _("== 2. embedding (§5): a trainable lookup table of shape ({rows}, {cols}); each id selects one row")
        .format(rows=V_src, cols=E))
    with torch.inference_mode():
        for tok, i in zip(_shown(tr.src_tok, seq[:-1], eos=True), seq):
            out(_("  {token:>12} → row {id:>5} = {vector}").format(token=tok, id=i,
                                                                   vector=_vec(emb.weight[i].float().cpu())))
    out(_("  → source embeddings of shape (1, {steps}, {size}) (batch, steps, embed size)").format(
        steps=len(seq), size=E))
    if not t.recurrent:
        out(
            _("  Transformer input: embedding × √D (√{D} = {scale:.2f}) + positional encoding P[0:{steps}] "
              "(§13–15) → (1, {steps}, {D})").format(D=D, scale=math.sqrt(D), steps=len(seq))
        )


def _greedy_steps(
    model: nn.Module, t: ModelTraits, ids: list[int], tr: Translator, top_k: int
) -> tuple[list[_Step], list[int]]:
    """Greedy decoding as the translator does it (:func:`decode_many`, so the one greedy search),
    watched step by step; returns what each step read, looked at and predicted, and the output ids.

    The outputs of a GRU model's attention module (Bahdanau's context vectors) are recorded, one per step."""
    watched = _Watched(model)
    attention = by_hand.recurrent_attention(model, t)
    with hooks.recording([("attention", attention)] if attention is not None else []) as calls:
        hyp = decode_many(watched, [ids], tr.cfg.decode, tr.device, beam_size=1)[0][0]
    contexts = [c.output[0].detach() for c in calls]  # (1, 1, M) each
    chosen_ids = list(hyp.tokens) + ([EOS] if hyp.finished else [])  # one per step
    src_labels = _shown(tr.src_tok, ids, eos=True)
    tgt = tr.tgt_tok
    steps: list[_Step] = []
    for k, ((token, o), chosen) in enumerate(zip(watched.steps, chosen_ids)):
        probs = torch.softmax(o.logits[0].float(), dim=-1).cpu()  # (V,) the model's own distribution
        top = probs.topk(min(top_k, probs.numel()))
        step = _Step(
            _shown(tgt, [token])[0],
            list(zip(_shown(tgt, top.indices.tolist()), top.values.tolist())),
            _shown(tgt, [chosen])[0],
            float(probs[chosen]),
        )
        for name in ("cross", "self"):
            if name in o.attention:
                w = o.attention[name][0, -1].float().mean(dim=0)[-1, : len(src_labels)].cpu()  # last layer, heads averaged
                order = w.argsort(descending=True)[:3].tolist()
                step.attention, step.weights = [(src_labels[i], float(w[i])) for i in order], w
                step.attention_kind = (
                    _("top 3 source tokens")  # Bahdanau: one additive attention, no layers or heads
                    if t.recurrent
                    else _("{kind}, last layer, heads averaged, top 3 source tokens").format(kind=name)
                )
        if k < len(contexts) and step.weights is not None and watched.memory is not None:
            _add_context(step, contexts[k], watched.memory)
        steps.append(step)
    return steps, list(hyp.tokens)


def _add_context(step: _Step, context: Tensor, memory: Tensor) -> None:
    """Set ``step.context`` to the attention module's output ``(1, 1, M)`` and check it against the
    notes' formula c_t' = Σ_t α_t h_t over ``memory (1, S, M)`` with the step's weights ``(S,)``."""
    c = context[0, 0].float().cpu()  # (M,)
    by_formula = step.weights @ memory[0, : step.weights.numel()].float().cpu()  # (S,) @ (S, M) → (M,)
    step.context, step.context_gap = c, float((c - by_formula).abs().max())


def _network_section(modules: list[tuple[str, str, str, int]], T: int, fwd: Any, out: Out) -> None:
    """3. every module in call order with its output shape (:func:`_record_modules`; a layer read only in slices,
    with its weight's shape), on a teacher-forced pass over the model's own translation (``T`` decoder inputs;
    ``fwd`` its ``ModelOutput``)."""
    out(
        "\n" + _("== 3. through the network (teacher-forced over its own output: decoder input <bos> y…, {T} steps)")
        .format(T=T)
    )
    width = max(len(n) for n, *_ in modules)
    for name, cls, shape, calls in modules:
        if calls == 0:  # read in slices by its parent (_record_modules)
            out(f"  {name:<{width}}  {cls:<28}   " + _("weight {shape}, read in slices by {parent} (never called "
                                                      "itself)").format(shape=shape, parent=name.rsplit(".", 1)[0])
                + _layer_from_1(name))
            continue
        extra = (
            _("   ×{calls} calls").format(calls=calls)
            + (_(" (one per decoding step)") if calls == T and name != "positional" else "")
            if calls > 1
            else ""
        )
        out(f"  {name:<{width}}  {cls:<28} → {shape}{extra}{_layer_from_1(name)}")
    for k, w in fwd.attention.items():
        out(_("  attention weights {kind:<8} (batch, layers, heads, queries, keys) = {shape}").format(
            kind=k, shape=_fmt_shape(w)))


@dataclass
class GateTrack:
    """One GRU's top layer over the steps of a sentence: each field ``(D, steps)`` (units × steps).

    ``z`` update gate, ``r`` reset gate, ``h_tilde`` candidate state, ``h`` the new state h_t (§7).
    """

    z: Tensor
    r: Tensor
    h_tilde: Tensor
    h: Tensor
    labels: list[str]  # the input token of each step


def gate_tracks(model: nn.Module, bidirectional: bool, src_labels: list[str], dec_inputs: list[str]) -> dict[str, GateTrack]:
    """The encoder's (forward direction) and the decoder's top-layer gates and states, from the first
    encoder call and the first ``len(dec_inputs)`` decoder calls a :func:`scratch_gru_copy` recorded."""
    enc_rnn, dec_rnn = model.encoder.rnn, model.decoder
    top = -2 if bidirectional else -1  # gates are (layer, direction)-major: top forward
    D = enc_rnn.hidden_size
    g = enc_rnn.gates[0]
    enc = GateTrack(g.z[0, top].T, g.r[0, top].T, g.h_tilde[0, top].T, enc_rnn.outputs[0][0, :, :D].T, src_labels)
    n = len(dec_inputs)

    def steps(tensors) -> Tensor:
        return torch.stack([x[0, -1, 0] if x.dim() == 4 else x[0, 0] for x in tensors[:n]], dim=1)  # (D, n)

    dec_g = dec_rnn.gates
    dec = GateTrack(steps([x.z for x in dec_g]), steps([x.r for x in dec_g]), steps([x.h_tilde for x in dec_g]),
                    steps(dec_rnn.outputs), dec_inputs)
    return {N_("encoder"): enc, N_("decoder"): dec}


#: (GateTrack field, name, formula, meaning): the notes' §7 formulas, as computed here (the candidate in nn.GRU's placement, see RESET_PLACEMENT).
GATE_FORMULAS = (
    ("z", N_("update gate"), "z_t = σ(W_xz x_t + W_hz h_t−1 + b_z)", N_("near 1 keeps the old state")),
    ("r", N_("reset gate"), "r_t = σ(W_xr x_t + W_hr h_t−1 + b_r)", N_("near 0 lets the candidate ignore it")),
    ("h_tilde", N_("candidate"), "h̃_t = tanh(W_xh x_t + b_xh + r_t ⊙ (W_hh h_t−1 + b_hh))", N_("new content")),
    ("h", N_("new state"), "h_t = z_t ⊙ h_t−1 + (1 − z_t) ⊙ h̃_t", N_("old and new mixed")),
)

RESET_PLACEMENT = (  # one paragraph, four lines: a catalogue entry each
    N_("reset-gate placement: the notes (§7, as Cho et al. 2014) write W_hh (r_t ⊙ h_t−1): reset the old state, then"),
    N_("multiply. nn.GRU (cuDNN; ONNX's linear_before_reset) multiplies first and resets the product, r_t ⊙ (W_hh h_t−1"),
    N_("+ b_hh), so W_h h_t−1 of all three gates is one matmul per step. attnlab's ScratchGRU implements nn.GRU's"),
    N_("placement, so it equals nn.GRU and loads its weights; the notes' placement is another function of the same "
       "weights."),
)


def _units(track: GateTrack, k: int = 3) -> list[int]:
    """The ``k`` units whose update gate varies most over the steps (the first ``k`` with one step)."""
    spread = track.z.std(dim=1) if track.z.shape[1] > 1 else -torch.arange(track.z.shape[0], dtype=torch.float)
    return spread.topk(min(k, spread.numel())).indices.tolist()


def _gates_section(tr: Translator, tracks: dict[str, GateTrack], scratch_gap: float | None, out: Out) -> None:
    """4. the GRU's gates z, r, candidate h̃ and state h_t at every step, for a few units (§6–7);
    ``scratch_gap``: max |Δ| of the scratch GRU's logits against the trained model's (:func:`_scratch_gap`)."""
    D = tr.cfg.model.num_hiddens
    out("\n" + _("== 4. GRU gates (§6–7; the from-scratch GRU with the trained weights, top layer, {D} units):")
        .format(D=D))
    for _field, name, formula, meaning in GATE_FORMULAS:
        out(f"  {ljust(_(name), 11)} {formula:<58} {_(meaning)}")
    for line in RESET_PLACEMENT:
        out("  " + _(line))
    out(_("  scratch GRU reproduces the trained model's logits: max |Δ| = {gap:.1e}").format(gap=scratch_gap))
    enc = tracks["encoder"]
    h_prev = torch.cat([torch.zeros_like(enc.h[:, :1]), enc.h[:, :-1]], dim=1)  # h_0 = 0 (D, S)
    mix = float((enc.z * h_prev + (1 - enc.z) * enc.h_tilde - enc.h).abs().max())
    out(_("  h_t = z ⊙ h_t−1 + (1 − z) ⊙ h̃ recomputed from the encoder's gates equals its states: max |Δ| = {gap:.1e}")
        .format(gap=mix))
    for part, track in tracks.items():
        units = _units(track)
        where = _(" (forward direction)") if part == "encoder" and tr.cfg.model.bidirectional else ""
        out(_("  {part}{where}: units {units} (the {n} whose z varies most over the steps); mean z and r over all "
              "{D} units beside").format(part=_(part), where=where, units=", ".join(map(str, units)), n=len(units), D=D))
        for t, tok in enumerate(track.labels):
            cols = "  ".join(f"{sym} {_units_vec(getattr(track, f), units, t)}"
                             for sym, f in (("z", "z"), ("r", "r"), ("h̃", "h_tilde"), ("h", "h")))
            out(_("    step {step:>2} {token}: {columns}   mean z {z:.2f} r {r:.2f}").format(
                step=t + 1, token=rjust(tok, 12), columns=cols, z=float(track.z[:, t].mean()),
                r=float(track.r[:, t].mean())))


def _units_vec(values: Tensor, units: list[int], t: int) -> str:
    return "[" + " ".join(f"{float(values[u, t]):+.2f}" for u in units) + "]"


def gates_figure(tracks: dict[str, GateTrack]):
    """Units × steps heatmaps of z, r, h̃ and h_t, one row per GRU (encoder, decoder), as a ``Figure``.

    Fixed colour scales: gates on [0, 1], candidate and state on [−1, 1] (their ranges: σ and tanh).
    """
    from attnlab.viz.figure import new_figure

    n_steps = max(t.z.shape[1] for t in tracks.values())
    fig = new_figure((min(22.0, 4 * (1.6 + 0.3 * n_steps)), 3.2 * len(tracks) + 0.6))
    axes = fig.subplots(len(tracks), 4, squeeze=False)
    for row, (part, track) in enumerate(tracks.items()):
        for col, (field_name, name, formula, _meaning) in enumerate(GATE_FORMULAS):
            ax = axes[row][col]
            data = getattr(track, field_name).float().cpu().numpy()  # (D, steps)
            gate = col < 2
            im = ax.imshow(data, aspect="auto", interpolation="nearest", cmap="viridis" if gate else "RdBu_r",
                           vmin=0.0 if gate else -1.0, vmax=1.0)
            ax.set_xticks(range(len(track.labels)), track.labels, rotation=60, fontsize=8)
            ax.set_title(f"{_(part)}: {_(name)}\n{formula}", fontsize=8)
            if col == 0:
                ax.set_ylabel(_("hidden unit"))
            fig.colorbar(im, ax=ax, fraction=0.05)
    fig.suptitle(_("GRU top layer, every unit at every step (notes §7); x: the step's input token"))
    return fig


def logits_formula(after_step: bool) -> str:
    """What the output layer reads (§8): the decoder state s, or for a Bahdanau model whose query is its state
    after the step (``model.attention_query="current"``, Luong et al. 2015) the attentional tanh(W_c [s; c])."""
    return "W_o tanh(W_c [s; c]) + b_o" if after_step else "W_o s + b_o"


def _decoding_section(steps: list[_Step], translation: str, V: int, top_k: int, out: Out,
                      after_step: bool = False) -> None:
    """5. greedy decoding, one step at a time (§3, §8, §22), over a target vocabulary of ``V`` entries.
    ``after_step``: a Bahdanau model whose query is its state after the step (``model.attention_query``)."""
    out(
        "\n" + _("== 5. greedy decoding, one step at a time (§22): attention over the source, then logits = "
                 "{logits} (§8), shape (1, {V}), softmax → probabilities; top {k} shown").format(
            logits=logits_formula(after_step), V=V, k=top_k)
    )
    with_context = [st for st in steps if st.context is not None]
    if with_context:
        gap = max(st.context_gap for st in with_context)
        if after_step:
            out(_("  context vector (§1): c_t' = Σ_t α(s_t', h_t) h_t — the encoder states h_t (the values) weighted by"))
            out(_("  this step's attention; the decoder GRU reads embedding(y_t'−1), its new state s_t' is the query, and"))
            out(_("  W_o reads tanh(W_c [s_t'; c_t']) (Luong et al. 2015's order; D2L queries with s_t'−1)."))
            out(_("  Σ α h recomputed from the weights"))
        else:
            out(_("  context vector (§1): c_t' = Σ_t α(s_t'−1, h_t) h_t — the encoder states h_t (the values) weighted by"))
            out(_("  this step's attention; the decoder GRU reads embedding(y_t'−1) ⊕ c_t'. Σ α h recomputed from the weights"))
        out(_("  equals the attention module's own output: max |Δ| = {gap:.1e}").format(gap=gap))
    for t, st in enumerate(steps):
        out(_("  step {step}: input {input!r}").format(step=t + 1, input=st.input))
        if st.attention is not None:
            att = ", ".join(f"{tok} {w:.2f}" for tok, w in st.attention)
            out(_("    attention ({kind}): {weights}").format(kind=st.attention_kind, weights=att))
        if st.context is not None:
            out(_("    context c_{step} = {vector} ({dims} dims), ").format(
                step=t + 1, vector=_vec(st.context), dims=st.context.numel()) +
                f"‖c‖ = {float(st.context.norm()):.3f}")
        out(_("    top: ") + "  ".join(f"{tok} {p:.3f}" for tok, p in st.top))
        out(_("    → chooses {token!r} (p = {p:.3f})").format(token=st.chosen, p=st.p_chosen))
    out(_("  translation: {text!r}").format(text=translation))


def _scratch_gap(tr: Translator, scratch: nn.Module, batch: Batch) -> float:
    dev = tr.device
    args = (batch.src.to(dev), batch.src_valid_lens.to(dev), batch.tgt_in.to(dev))
    with torch.inference_mode():
        a = tr.model(*args).logits
        b = scratch(*args).logits
    return float((a - b).abs().max())


@dataclass
class _Loss:
    """The teacher-forced cross-entropy against a reference (§3, §21): per decoder input, its label and
    −log p(label); and the sentence BLEU of the translation against the reference."""

    reference: str
    translation: str
    inputs: list[str]
    labels: list[str]
    nll: list[float]
    bleu: float


def _loss(model, tr: Translator, ids: list[int], reference: str, translation: str) -> _Loss:
    b = collate([ids], [tr.tgt_tok.encode(reference)], [0])
    dev = tr.device
    with torch.inference_mode():
        logits = model(b.src.to(dev), b.src_valid_lens.to(dev), b.tgt_in.to(dev)).logits[0].float().cpu()
    log_probs = torch.log_softmax(logits, dim=-1)  # (T, V)
    labels = b.tgt_out[0]
    nll = -log_probs.gather(1, labels[:, None])[:, 0]  # (T,)
    words = [tr.tgt_tok.preprocess(t).split() for t in (translation, reference)]  # Chinese: characters
    return _Loss(reference, translation, _shown(tr.tgt_tok, b.tgt_in[0].tolist()), _shown(tr.tgt_tok, labels.tolist()),
                 nll.tolist(),
                 d2l_bleu(*words, k=2))


def _loss_section(loss: _Loss, out: Out) -> None:
    """8. the teacher-forced cross-entropy against a reference, token by token (§3, §21), and its BLEU (§9)."""
    out(
        "\n" + _("== 8. loss against the reference (§3, §21): teacher forcing feeds <bos> + reference, labels are "
                 "reference + <eos>; cross-entropy = mean of −log p(label)")
    )
    for inp, lab, nll in zip(loss.inputs, loss.labels, loss.nll):
        out(_("  input {input} → label {label}: p = {p:.3f}, −log p = {nll:.3f}").format(
            input=rjust(inp, 14), label=rjust(lab, 14), p=math.exp(-nll), nll=nll))
    mean = sum(loss.nll) / len(loss.nll)
    out(_("  loss = {loss:.3f} per token over {n} tokens (perplexity {ppl:.2f})").format(
        loss=mean, n=len(loss.nll), ppl=math.exp(min(mean, 50))))
    out(_("  sentence BLEU (D2L formula, k=2) of {translation!r} against {reference!r}: {bleu:.3f}").format(
        translation=loss.translation, reference=loss.reference, bleu=loss.bleu))


def _tables(
    tr: Translator, t: ModelTraits, model: nn.Module, seq: list[int], cap: by_hand.Capture, T: int, has_loss: bool,
    out: Out,
) -> None:
    """9. which things are parameters (with shapes) and which are not: computed values, buffers (§9)."""
    fwd = cap.fwd
    report = params.run(model)
    out("\n" + _("== 9. what is a parameter and what is computed (§9)"))
    out(_("  parameters: learned by backpropagation, saved in the checkpoint — {total:,} numbers").format(
        total=report.total))
    for g in report.groups:
        shapes = ", ".join(f"{n} {'×'.join(map(str, s))}" for n, s in g.tensors[:3])
        more = _(", … ({n} more tensors)").format(n=len(g.tensors) - 3) if len(g.tensors) > 3 else ""
        tied = f" [{tied_note(report, g)}]" if g.tied else ""
        out(f"    {ljust(_(g.name), 30)} {g.count:>10,}  {shapes}{more}{tied}")
    S, V, D = len(seq), len(tr.tgt_tok), tr.cfg.model.num_hiddens
    out(_("  computed values: recomputed for every sentence, never saved, not learned"))
    rows = [
        (_("token ids X"), f"({S},)", _("integers, row numbers in the vocabulary (§4)")),
        (_("source embeddings"), f"(1, {S}, {tr.cfg.model.embed_size if t.recurrent else D})",
         _("rows of the embedding table (§5)")),
        *_state_rows(tr, t, S, T),
    ]
    for k, w in fwd.attention.items():
        rows.append((_("attention weights {kind}").format(kind=k), _fmt_shape(w),
                     _("softmax of scores: rows sum to 1 (§12)")))
    rows += by_hand.context_rows(model, t, cap)
    rows += [
        ("logits", f"(1, {T}, {V})", f"{logits_formula(bool(getattr(model, 'after_step', False)))} (§8)"),
        (_("probabilities"), f"(1, {T}, {V})", _("softmax of the logits")),
    ]
    if has_loss:
        rows.append(("loss", _("scalar"), _("cross-entropy against the reference (§21)")))
    rows.append(("BLEU", _("scalar"), _("a score of the output text, not differentiable (§9)")))
    w0 = max(width(r[0]) for r in rows)
    w1 = max(width(r[1]) for r in rows)
    for name, shape, note in rows:
        out(f"    {ljust(name, w0)}  {ljust(shape, w1)}  {note}")
    buffers = [r for r in report.not_parameters if r.what == "buffer"]
    if buffers:
        out(_("  buffers: tensors the model holds that are not parameters (no gradient, not learned)"))
        for r in buffers:
            out(f"    {r.name}  {r.size}: {r.note}")
    out(_("  hyperparameters (set by you, neither learned nor computed, §10): ") + hyperparameters(tr.cfg, t))


def hyperparameters(cfg, t: ModelTraits) -> str:
    """The §10 hyperparameters this model has: ``embed_size`` for the GRU models (their own embedding size),
    ``num_heads`` and ``ffn_num_hiddens`` only where there is multi-head attention and an FFN (Bahdanau's
    additive attention has no heads to set), then what training sets."""
    m = cfg.model
    items = [("embed_size", m.embed_size)] if t.recurrent else []
    items += [("num_hiddens", m.num_hiddens), ("num_layers", m.num_layers)]
    if t.attention_modules:
        items += [("num_heads", m.num_heads), ("ffn_num_hiddens", m.ffn_num_hiddens)]
    if t.recurrent and m.bidirectional:
        items.append(("bidirectional", True))
    items += [("tie_embeddings", m.tie_embeddings), ("dropout", m.dropout), ("lr", cfg.train.lr),
              ("num_steps", cfg.data.num_steps)]
    return ", ".join(f"{k}={v}" for k, v in items)


def _state_rows(tr: Translator, t: ModelTraits, S: int, T: int) -> list[tuple[str, str, str]]:
    """The §9 rows of the states a family computes: GRU states and gates, one decoder-only
    sequence, or the Transformer's encoder memory and decoder states."""
    m, D = tr.cfg.model, tr.cfg.model.num_hiddens
    if t.recurrent:
        dirs = 2 if m.bidirectional else 1
        return [
            (_("encoder hidden states h_t"), f"(1, {S}, {dirs * D})",
             _("GRU states, one per source step (§6)") + ("; [h→; h←]" if dirs == 2 else "")),
            (_("gates z, r and candidate h̃"), f"(1, {dirs * m.num_layers}, steps, {D})",
             _("per step (§7)") + (_("; encoder: layers × directions") if dirs == 2 else "")),
            (_("decoder states s_t'"), _("({layers}, 1, {D}) per step").format(layers=m.num_layers, D=D), "(§6)"),
        ]
    if t.one_sequence:
        return [(_("hidden states"), _("(1, {S} + {T}, {D}) per layer").format(S=S, T=T, D=D),
                 _("source and target in one sequence (§28)"))]
    return [
        (_("encoder states (memory)"), f"(1, {S}, {D})", _("keys and values of the cross-attention (§17)")),
        (_("decoder states"), f"(1, {T}, {D})", "(§18)"),
    ]
