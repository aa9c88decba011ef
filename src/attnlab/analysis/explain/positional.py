"""The sinusoidal positional encoding, drawn and checked (notes §13–16; D2L §10.6.3).

:func:`run` returns a :class:`PositionalReport`: its ``figure()`` draws the table, its ``format()`` prints
the checks (what ``attnlab positional [RUN]`` shows):

- a heat map of the table ``P (positions × dim)``: fast-varying columns on the left, slow ones on
  the right — a binary-counter-like pattern in continuous form (§15);
- curves of a few columns: a sin/cos pair per frequency ω_j = 1/10000^(2j/d);
- the similarity ``p_i · p_k`` of every pair of positions, which depends on the offset ``k − i``
  only (the bands parallel to the diagonal);
- the numerical check of the §16 rotation property with :func:`attnlab.attention.positional.rotation_error`,
  and a worked δ = 2 example (:func:`delta_example`): one matrix takes p_3 to p_5 and p_10 to p_12.

The table shown is :func:`attnlab.attention.positional.sinusoidal_table`, the one the models use.

On a trained run (``attnlab positional RUN``, :func:`model_section`), the same ideas on its model:

- §13 order-blindness (:func:`order_check`): reverse a sentence's tokens with the positional
  encoding removed, and the first self-attention layer's outputs come out reversed too, exactly
  (``f(πX) = π f(X)``, so "我 爱 你" and "你 爱 我" give the same vectors); with the encoding they do not;
- §14 adding (:func:`norm_check`, :func:`concat_cost`): the sizes of embedding × √D and of the
  position vectors that are added, and what concatenating ``[x, p]`` instead would cost in
  parameters and FLOPs at this run's width D.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.analysis import hooks
from attnlab.analysis.report import TextReport
from attnlab.attention.positional import SinusoidalPositionalEncoding, rotation_error, sinusoidal_table
from attnlab.data.specials import BOS, EOS
from attnlab.errors import AttnlabError
from attnlab.i18n import N_, Templates, _, ljust
from attnlab.maps import display_tokens, marks_word_starts
from attnlab.models import build_model, traits
from attnlab.viz.figure import new_figure

__all__ = [
    "TEXT", "ConcatCost", "DeltaExample", "ModelSection", "NormCheck", "OrderCheck", "PositionalReport", "concat_cost",
    "default_columns", "delta_example", "delta_for", "model_section", "norm_check", "order_check", "positional_figure",
    "run",
]


def default_columns(dim: int) -> list[int]:
    """Two neighbouring sin/cos pairs, as D2L draws (columns 6–9); the first ones for a small ``dim``.

    (Columns 0–1 have ω = 1 rad per position: sampled at integers they look like noise.)"""
    return [6, 7, 8, 9] if dim >= 10 else list(range(min(dim, 4)))


def _check_args(dim: int, positions: int, max_shift: int, columns: list[int]) -> None:
    if dim < 2 or dim > 4096:
        raise AttnlabError(_("--dim {dim} must lie between 2 and 4096 (one sin/cos pair needs 2 "
                             "columns)").format(dim=dim))
    if positions < 2 or positions > 100_000:
        raise AttnlabError(_("--positions {positions} must lie between 2 and 100000").format(positions=positions))
    if max_shift < 1:
        raise AttnlabError(_("--max-shift {max_shift} must be >= 1").format(max_shift=max_shift))
    bad = [c for c in columns if not 0 <= c < dim]
    if bad:
        raise AttnlabError(_("--columns {bad} out of range; columns lie in 0..{value}").format(bad=bad, value=dim - 1))


def run(dim: int | None = None, positions: int = 60, max_shift: int = 10, columns: list[int] | None = None,
        translator=None, sentence: str = "i'm home .") -> PositionalReport:
    """The §13–16 report: the rotation check of the sinusoidal table at ``dim`` over ``positions`` and
    shifts ``1..max_shift``, the worked δ = 2 example, and with a :class:`~attnlab.translator.Translator`
    the §13–14 section on its model for ``sentence``. ``dim``: the encoding's width (default: the
    translator's ``num_hiddens``, else 32); ``columns``: the columns the figure draws as curves.

    Raises AttnlabError for a dimension, number of positions, shift or column out of range, or a ``dim``
    that differs from the translator's model.
    """
    model = translator.model if translator is not None else None
    if translator is not None:
        own = translator.cfg.model.num_hiddens
        if dim is not None and dim != own:
            raise AttnlabError(_("--dim {dim} differs from the run's model.num_hiddens={own}; drop "
                                 "--dim with RUN").format(dim=dim, own=own))
        dim = own
    dim = 32 if dim is None else dim
    columns = default_columns(dim) if columns is None else list(columns)
    _check_args(dim, positions, max_shift, columns)
    delta, learned = delta_for(model, dim)
    section = model_section(translator, sentence) if translator is not None else None
    return PositionalReport(dim, positions, max_shift, rotation_error(dim, positions, max_shift), columns, delta,
                            learned, section)


@dataclass
class PositionalReport(TextReport):
    """What ``attnlab positional`` prints and draws: the §16 rotation check (``max_error``: the largest
    deviation from the rotation property), the worked δ example (``learned``: the run learns its table, so
    the example is the formula's), and the §13–14 section on a run's model (``model``, None without a run);
    ``figure()`` is the table drawn (:func:`positional_figure`)."""

    dim: int
    positions: int
    max_shift: int
    max_error: float
    columns: list[int]
    delta: DeltaExample
    learned: bool = False
    model: ModelSection | None = None

    def line(self) -> str:
        return _("rotation property: max error {error:.1e} over {positions} positions, shifts 1..{shift} "
                 "(dim {dim}, float64)").format(error=self.max_error, positions=self.positions,
                                               shift=self.max_shift, dim=self.dim)

    def _format(self) -> str:
        parts = [self.line(), _format_delta(self.delta, self.learned)]
        if self.model is not None:
            parts.append(_format_model_section(self.model))
        return "\n\n".join(parts)

    def figure(self):
        return positional_figure(self.dim, self.positions, self.columns)

    def to_json(self) -> dict[str, Any]:
        from attnlab.files import jsonable

        return jsonable({**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, "text": self.format()})


def positional_figure(dim: int, positions: int, columns: list[int] | None = None):
    """The table ``P (positions × dim)`` drawn: heat map, a few columns as curves (``columns``, default
    :func:`default_columns`), and the similarity ``p_i · p_k`` of every pair of positions (§15–16)."""
    columns = default_columns(dim) if columns is None else list(columns)
    P = sinusoidal_table(positions, dim)  # (positions, dim), float64
    fig = new_figure((15, 4.5))
    ax_heat, ax_curves, ax_sim = fig.subplots(1, 3)
    im = ax_heat.imshow(P.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    ax_heat.set(
        title=_("P ({positions} positions × {dim} dims)").format(positions=positions, dim=dim),
        xlabel=_("column (2j: sin, 2j+1: cos)"),
        ylabel=_("position i"),
    )
    fig.colorbar(im, ax=ax_heat, shrink=0.8)
    x = torch.arange(positions).numpy()
    for c in columns:
        j = c // 2
        kind = "sin" if c % 2 == 0 else "cos"
        ax_curves.plot(x, P[:, c].numpy(), label=_("col {c}: {kind}(i·ω_{j})").format(c=c, kind=kind, j=j), lw=1.2)
    ax_curves.set(title=_("a few columns (§15)"), xlabel=_("position i"), ylabel=_("value"), ylim=(-1.15, 1.15))
    ax_curves.legend(fontsize=8, loc="lower right")
    ax_curves.grid(alpha=0.3)
    sim = P @ P.T  # (positions, positions): p_i · p_k depends on k − i only (§16)
    im2 = ax_sim.imshow(sim.numpy(), cmap="viridis", aspect="auto", interpolation="nearest")
    ax_sim.set(title=_("p_i · p_k depends only on k − i (§16)"), xlabel=_("position k"), ylabel=_("position i"))
    fig.colorbar(im2, ax=ax_sim, shrink=0.8)
    fig.suptitle(
        _("sinusoidal positional encoding: p[i, 2j] = sin(i ω_j), p[i, 2j+1] = cos(i ω_j), ω_j = 10000^(−2j/d)"),
        fontsize=10,
    )
    return fig


# ------------------------------------------------------------------------------ §16: a worked δ = 2 example

#: Every sentence the §13–16 sections print, as a format string (a translation replaces them one for one).
TEXT: dict[str, str] = Templates({
    "delta_head": N_("§16 worked example, δ = {delta} (d = {dim}, {where}): one matrix M_{delta}, block-diagonal with the "
                     "rotation R({delta}ω_j) = [[cos {delta}ω_j, sin {delta}ω_j], [−sin {delta}ω_j, cos {delta}ω_j]] "
                     "per sin/cos pair j, takes p_{a} to p_{a2} and p_{b} to p_{b2}:"),
    "delta_pair": "  j={j:<3} ω_j={omega:.6f}  R = [[{c:+.4f}, {s:+.4f}], [{ns:+.4f}, {c:+.4f}]]",
    "delta_move": "        R·p_{i} = R·({x:+.4f}, {y:+.4f}) = ({rx:+.4f}, {ry:+.4f});  p_{k} = ({tx:+.4f}, {ty:+.4f})",
    "delta_all": N_("  all {pairs} pairs: max |M_{delta} p_{a} − p_{a2}| = {err_a:.1e}, max |M_{delta} p_{b} − p_{b2}| = {err_b:.1e}: "
                    "the same M_{delta} for both, it depends on δ only (the trigonometric addition formulas)"),
    "delta_dot": N_("  so p_{a}·p_{a2} = {dot_a:.4f} and p_{b}·p_{b2} = {dot_b:.4f} agree, while the differences p_{a2} − p_{a} and "
                    "p_{b2} − p_{b} do not (max gap {gap:.3f}): the relation is a rotation, not a fixed offset vector"),
    "where_model": N_("the run's own position table"),
    "where_formula": N_("the formula in float64"),
    "learned": N_("  (this run learns its position table (model.positional=learned): the rotation is the sinusoidal "
                  "encoding's property, shown above on the formula at the run's d)"),
    # §13–14 on the run's model
    "model_head": N_("§13–14 on {run} ({kind}, D = {dim}), sentence {sentence!r}:"),
    "no_pe": N_("  this model has no positional encoding: it is recurrent and reads the tokens in order (§6, §13), "
                "so there is nothing to remove"),
    "order_head": N_("  §13 order-blindness, first self-attention layer (encoder layer 1), float64 copy of the trained weights:"),
    "order_tokens": N_("    tokens {tokens}  →  reversed {permuted}"),
    "order_row": N_("    {label} max |f(πX) − π f(X)| = {err:.1e}  (relative {rel:.1e}); whole encoder: relative {enc:.1e}"),
    "label_no_pe": N_("without the encoding:"),
    "label_pe": N_("with the encoding:"),
    "order_weight": N_("    attention weight {q!r} → {k!r} (head 1): {a:.4f} in the sentence, {b:.4f} reversed without the "
                       "encoding; {c:.4f} and {d:.4f} with it"),
    "order_says": N_("    without it, reordering the words only reorders the output vectors (§13's 我 爱 你 / 你 爱 我): "
                     "self-attention sees which tokens there are, not where they are"),
    "order_causal": N_("  §13: this model's self-attention is causal; the mask itself depends on the order, so the "
                       "order-blindness check (a bidirectional self-attention) does not apply"),
    "order_short": N_("  §13: the sentence needs at least two different tokens to reorder; give a longer --sentence"),
    "norm_head": N_("  §14 sizes of what is added, x·√D + p (vector norms):"),
    "norm_tokens": N_("    embedding × √D ({scale:.2f}) of the sentence's tokens: {pairs}"),
    "norm_vocab": N_("    embedding × √D over all {rows:,} source rows: median {median:.2f}, min {lo:.2f}, max {hi:.2f}"),
    "norm_pos": N_("    position vectors p_0…p_{last}: {lo:.2f} … {hi:.2f}{closed}"),
    "norm_closed": N_(" (sinusoidal: every ‖p_i‖ = √(D/2) = {value:.2f})"),
    "norm_ratio": N_("    so the word part is {ratio:.2f}× the position part: {verdict}"),
    "ratio_even": N_("comparable sizes, neither drowns the other, and the linear maps after them can use both (§14)"),
    "ratio_word": N_("the word part dominates; the position signal is small beside it (the model has learnt to lean on words)"),
    "ratio_pos": N_("the position part dominates; the word signal is small beside it"),
    "concat_head": N_("  §14 adding keeps width D = {dim}; concatenating [x, p] makes it 2D = {wide}. This run's "
                      "architecture outside the embedding and position tables, on this sentence (forward, teacher-forced):"),
    "concat_row": N_("    {label} {params:>12,} parameters  {flops:>14,} FLOPs"),
    "label_add": N_("add (this run):"),
    "label_wide": N_("concatenate, keep 2D throughout:"),
    "label_proj": N_("concatenate, project 2D → D:"),
    "concat_says": N_("    keeping 2D costs ×{pr:.2f} parameters and ×{fr:.2f} FLOPs (every D×D matrix becomes 2D×2D); "
                      "even projecting back adds {extra:,} parameters ({tables} × (2D·D + D)) and 2·2D·D FLOPs per "
                      "token; adding costs nothing (the table is a buffer, not a parameter, §9)"),
})


@dataclass
class DeltaExample:
    """``M_δ`` applied to ``p_a`` and ``p_b`` of one table. ``pairs``: per shown pair index j,
    ``(j, ω_j, cos δω_j, sin δω_j, p_a pair, p_b pair)``; errors over every pair of the table."""

    dim: int
    delta: int
    a: int
    b: int
    table: Tensor  # (max(a, b) + δ + 1, dim)
    shown: list[int]
    err_a: float
    err_b: float
    from_model: bool


def _rotate_all(table: Tensor, i: int, delta: int) -> Tensor:
    """``M_δ p_i``: the rotation R(δω_j) applied to every sin/cos pair j of row i (built from ω_j, not from the table)."""
    dim = table.shape[1]
    pairs = dim // 2
    omega = torch.pow(10000.0, -torch.arange(0, 2 * pairs, 2, dtype=torch.float64) / dim)  # (J,)
    c, s = torch.cos(delta * omega), torch.sin(delta * omega)  # (J,)
    x, y = table[i, 0 : 2 * pairs : 2].double(), table[i, 1 : 2 * pairs : 2].double()  # (J,) each
    out = table[i].double().clone()
    out[0 : 2 * pairs : 2], out[1 : 2 * pairs : 2] = c * x + s * y, -s * x + c * y
    return out  # (dim,)


def delta_example(dim: int, delta: int = 2, a: int = 3, b: int = 10, table: Tensor | None = None) -> DeltaExample:
    """The notes' §16 example: positions ``a → a+δ`` and ``b → b+δ`` (3→5 against 10→12) under one matrix.

    ``table``: a model's own sinusoidal position table ``(P, dim)`` (e.g. ``model.positional.P``);
    None: :func:`sinusoidal_table` in float64. Raises AttnlabError when the table is too short.
    """
    if dim < 2:
        raise AttnlabError(_("d={dim} must be >= 2 (one sin/cos pair needs 2 columns)").format(dim=dim))
    rows = max(a, b) + delta + 1
    from_model = table is not None
    table = sinusoidal_table(rows, dim) if table is None else table[:rows].detach().cpu()
    if table.shape[0] < rows:
        raise AttnlabError(_("the position table has {shape} rows; the example needs {rows}").format(shape=table.shape[0], rows=rows))
    J = dim // 2
    shown = sorted({0, 1, J // 2, J - 1} & set(range(J)))
    err_a = (_rotate_all(table, a, delta) - table[a + delta].double()).abs().max().item()
    err_b = (_rotate_all(table, b, delta) - table[b + delta].double()).abs().max().item()
    return DeltaExample(dim, delta, a, b, table, shown, err_a, err_b, from_model)


def _format_delta(ex: DeltaExample, learned: bool = False) -> str:
    """The worked example as text: a few pairs j with R(δω_j) and both moves, then the check over all pairs."""
    d, a, b, t = ex.delta, ex.a, ex.b, ex.table.double()
    where = TEXT["where_model"] if ex.from_model else TEXT["where_formula"]
    lines = [TEXT["delta_head"].format(delta=d, dim=ex.dim, where=where, a=a, a2=a + d, b=b, b2=b + d)]
    for j in ex.shown:
        omega = 10000.0 ** (-2 * j / ex.dim)
        c, s = math.cos(d * omega), math.sin(d * omega)
        lines.append(TEXT["delta_pair"].format(j=j, omega=omega, c=c, s=s, ns=-s))
        for i in (a, b):
            x, y = t[i, 2 * j].item(), t[i, 2 * j + 1].item()
            lines.append(TEXT["delta_move"].format(i=i, x=x, y=y, rx=c * x + s * y, ry=-s * x + c * y, k=i + d,
                                                   tx=t[i + d, 2 * j].item(), ty=t[i + d, 2 * j + 1].item()))
    lines.append(TEXT["delta_all"].format(pairs=ex.dim // 2, delta=d, a=a, a2=a + d, b=b, b2=b + d,
                                          err_a=ex.err_a, err_b=ex.err_b))
    gap = ((t[a + d] - t[a]) - (t[b + d] - t[b])).abs().max().item()
    lines.append(TEXT["delta_dot"].format(a=a, a2=a + d, b=b, b2=b + d, dot_a=(t[a] @ t[a + d]).item(),
                                          dot_b=(t[b] @ t[b + d]).item(), gap=gap))
    if learned:
        lines.append(TEXT["learned"])
    return "\n".join(lines)


# ------------------------------------------------------------------- §13: order-blindness, on the model


@dataclass
class OrderCheck:
    """Reversing the tokens before ``<eos>`` (π) with the encoding removed (``False``) and kept (``True``).

    ``err[pe]``: max |f(πX) − π f(X)| of the first self-attention layer's output; ``rel[pe]`` the same
    as a Frobenius ratio to ‖f(X)‖; ``enc_rel[pe]`` the ratio for the whole encoder's output;
    ``weight[pe]``: head 1's weight from the first token to the second, ``(in the sentence, reversed)``.
    """

    tokens: list[str]
    permuted: list[str]
    err: dict[bool, float]
    rel: dict[bool, float]
    enc_rel: dict[bool, float]
    weight: dict[bool, tuple[float, float]]


def _encode_once(model: nn.Module, layer: nn.Module, src: Tensor, with_pe: bool) -> tuple[Tensor, Tensor, Tensor]:
    """``model.encode`` on ``src (1, S)``: (first self-attention layer's output (S, D), encoder output (S, D),
    layer 1's weights (H, S, S)); ``with_pe=False`` replaces the position vectors by zeros for this call."""
    with contextlib.ExitStack() as stack:
        calls = stack.enter_context(hooks.recording([("layer", layer)]))
        if not with_pe:  # the position vectors become zeros: x·√D + 0
            stack.enter_context(hooks.replacing_output(model.positional, lambda m, args, out: torch.zeros_like(out)))
        with torch.inference_mode():
            enc = model.encode(src, torch.tensor([src.shape[1]]), need_weights=True)
    return calls[0].output[0][0], enc.memory[0], enc.attention["enc_self"][0, 0]  # (S, D), (S, D), (H, S, S)


def order_check(model: nn.Module, src_ids: list[int], labels: list[str]) -> OrderCheck | None:
    """§13 on ``model``'s encoder (call it on a float64 CPU copy in eval mode for rounding-level equality).

    ``src_ids`` end with ``<eos>``; π reverses the tokens before it. Returns None when the model has no
    bidirectional self-attention (``traits().attention_modules`` lacks ``enc_self``) or no position module.
    Raises AttnlabError when the reversed sentence equals the sentence (nothing would move).
    """
    path = traits(model.config).attention_modules.get("enc_self")
    if path is None or getattr(model, "positional", None) is None:
        return None
    n = len(src_ids) - 1
    perm = [*range(n - 1, -1, -1), n]  # position p of the reversed sentence holds the original token perm[p]
    if [src_ids[p] for p in perm] == src_ids:
        raise AttnlabError(TEXT["order_short"].strip())
    inv = [perm.index(i) for i in range(len(perm))]
    layer = model.get_submodule(path.replace("*", "0"))
    src = torch.tensor([src_ids])
    err, rel, enc_rel, weight = {}, {}, {}, {}
    for pe in (False, True):
        y, mem, w = _encode_once(model, layer, src, pe)
        yp, memp, wp = _encode_once(model, layer, src[:, perm], pe)
        err[pe] = (yp - y[perm]).abs().max().item()
        rel[pe] = ((yp - y[perm]).norm() / y.norm()).item()
        enc_rel[pe] = ((memp - mem[perm]).norm() / mem.norm()).item()
        weight[pe] = (w[0, 0, 1].item(), wp[0, inv[0], inv[1]].item())
    return OrderCheck(labels, [labels[p] for p in perm], err, rel, enc_rel, weight)


# --------------------------------------------------------------- §14: sizes, and the cost of concatenating


@dataclass
class NormCheck:
    """Norms of ``embedding × √D`` (the sentence's tokens and the whole source table) and of ``p_0…p_{S−1}``."""

    scale: float
    tokens: list[tuple[str, float]]
    rows: int  # rows of the source embedding table
    vocab: tuple[float, float, float]  # median, min, max over them
    positions: list[float]
    sinusoidal: bool


def norm_check(model: nn.Module, src_ids: list[int], labels: list[str]) -> NormCheck:
    """§14 on ``model``: how big the two summands of ``x·√D + p`` are (``model.scale`` is the √D it multiplies by)."""
    table = model.get_submodule(traits(model.config).embeddings[0]).weight.detach()  # (V, D)
    scale = float(model.scale)
    norms = table.double().norm(dim=1) * scale  # (V,)
    with torch.inference_mode():
        pos = model.positional(torch.arange(len(src_ids), device=table.device)).double().norm(dim=-1)  # (S,)
    return NormCheck(scale, [(t, norms[i].item()) for t, i in zip(labels, src_ids)], len(norms),
                     (norms.median().item(), norms.min().item(), norms.max().item()), pos.tolist(),
                     isinstance(model.positional, SinusoidalPositionalEncoding))


@dataclass
class ConcatCost:
    """Parameters outside the embedding and position tables, and forward FLOPs on one sentence (measured by
    ``torch.utils.flop_counter``), at width D (adding) and 2D (concatenating); ``proj_*``: concatenating then
    projecting 2D → D with one linear layer per embedding table."""

    dim: int
    tokens: int
    tables: int
    params: tuple[int, int]
    flops: tuple[int, int]
    proj_params: int
    proj_flops: int


def _body_params(model: nn.Module) -> int:
    skip = (*traits(model.config).embeddings, "positional")  # a tied W_o is the target table: counted once, there
    return sum(p.numel() for name, p in model.named_parameters() if name.split(".")[0] not in skip)


def _forward_flops(model: nn.Module, src: Tensor) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    tgt_in = torch.cat([torch.full((1, 1), BOS), src[:, :-1]], dim=1)  # (1, S): a target as long as the source
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        # need_weights: the explicit attention path, whose matmuls the counter sees (it does not count SDPA on CPU)
        model(src, torch.tensor([src.shape[1]]), tgt_in, need_weights=True)
    return int(counter.get_total_flops())


def concat_cost(model: nn.Module, src_ids: list[int], src_vocab: int, tgt_vocab: int) -> ConcatCost:
    """§14's "concatenating doubles the width": the same architecture built at 2D, counted and run on the sentence."""
    cfg = model.config
    D = cfg.num_hiddens
    wide = build_model(replace(cfg, num_hiddens=2 * D), src_vocab, tgt_vocab).eval()
    src = torch.tensor([src_ids])
    narrow = copy.deepcopy(model).float().cpu().eval()
    tables = len(traits(cfg).embeddings)
    return ConcatCost(D, len(src_ids), tables, (_body_params(narrow), _body_params(wide)),
                      (_forward_flops(narrow, src), _forward_flops(wide, src)), tables * (2 * D * D + D),
                      tables * len(src_ids) * 2 * (2 * D) * D)  # each table's tokens (the target is as long), one projection


# ------------------------------------------------------------------------------- the section, and its text


@dataclass
class ModelSection:
    run: str
    kind: str
    dim: int
    sentence: str
    order: OrderCheck | None
    norms: NormCheck | None
    concat: ConcatCost | None
    reversible: bool  # False: the sentence had nothing to reorder


def model_section(tr, sentence: str) -> ModelSection:
    """§13–14 on a :class:`attnlab.translator.Translator`'s model, for ``sentence`` (its own tokenizer)."""
    cfg = tr.cfg.model
    ids = tr.encode_source(sentence)[0] + [EOS]
    labels = display_tokens([tr.src_tok.id_to_token(i) for i in ids], marks_word_starts(tr.src_tok))
    run = str(tr.run_dir) if getattr(tr, "run_dir", None) else "the run"
    if getattr(tr.model, "positional", None) is None:
        return ModelSection(run, cfg.kind, cfg.num_hiddens, sentence, None, None, None, True)
    exact = copy.deepcopy(tr.model).double().cpu().eval()  # float64: equal outputs differ by rounding only
    try:
        order, reversible = order_check(exact, ids, labels), True
    except AttnlabError:
        order, reversible = None, False
    return ModelSection(run, cfg.kind, cfg.num_hiddens, sentence, order, norm_check(exact, ids, labels),
                        concat_cost(tr.model, ids, len(tr.src_tok), len(tr.tgt_tok)), reversible)


def _format_order(o: OrderCheck) -> list[str]:
    lines = [TEXT["order_head"], TEXT["order_tokens"].format(tokens=" ".join(o.tokens), permuted=" ".join(o.permuted))]
    for pe, label in ((False, "label_no_pe"), (True, "label_pe")):
        lines.append(TEXT["order_row"].format(label=ljust(TEXT[label], 22), err=o.err[pe], rel=o.rel[pe], enc=o.enc_rel[pe]))
    (a, b), (c, d) = o.weight[False], o.weight[True]
    lines.append(TEXT["order_weight"].format(q=o.tokens[0], k=o.tokens[1], a=a, b=b, c=c, d=d))
    lines.append(TEXT["order_says"])
    return lines


def _format_norms(n: NormCheck, dim: int) -> list[str]:
    pairs = ", ".join(f"{t} {v:.2f}" for t, v in n.tokens)
    closed = TEXT["norm_closed"].format(value=math.sqrt(dim / 2)) if n.sinusoidal and dim % 2 == 0 else ""
    ratio = (sum(v for _, v in n.tokens) / len(n.tokens)) / (sum(n.positions) / len(n.positions))
    verdict = "ratio_even" if 0.5 <= ratio <= 2 else "ratio_word" if ratio > 2 else "ratio_pos"
    return [TEXT["norm_head"], TEXT["norm_tokens"].format(scale=n.scale, pairs=pairs),
            TEXT["norm_vocab"].format(rows=n.rows, median=n.vocab[0], lo=n.vocab[1], hi=n.vocab[2]),
            TEXT["norm_pos"].format(last=len(n.positions) - 1, lo=min(n.positions), hi=max(n.positions), closed=closed),
            TEXT["norm_ratio"].format(ratio=ratio, verdict=TEXT[verdict])]


def _format_concat(c: ConcatCost) -> list[str]:
    (p1, p2), (f1, f2) = c.params, c.flops
    return [TEXT["concat_head"].format(dim=c.dim, wide=2 * c.dim),
            TEXT["concat_row"].format(label=ljust(TEXT["label_add"], 34), params=p1, flops=f1),
            TEXT["concat_row"].format(label=ljust(TEXT["label_wide"], 34), params=p2, flops=f2),
            TEXT["concat_row"].format(label=ljust(TEXT["label_proj"], 34), params=p1 + c.proj_params, flops=f1 + c.proj_flops),
            TEXT["concat_says"].format(pr=p2 / p1, fr=f2 / f1, extra=c.proj_params, tables=c.tables)]


def _format_model_section(m: ModelSection) -> str:
    lines = [TEXT["model_head"].format(run=m.run, kind=m.kind, dim=m.dim, sentence=m.sentence)]
    if m.norms is None:
        return "\n".join([*lines, TEXT["no_pe"]])
    if m.order is not None:
        lines += _format_order(m.order)
    else:
        lines.append(TEXT["order_causal"] if m.reversible else TEXT["order_short"])
    assert m.concat is not None
    return "\n".join([*lines, *_format_norms(m.norms, m.dim), *_format_concat(m.concat)])


def delta_for(model: nn.Module | None, dim: int) -> tuple[DeltaExample, bool]:
    """The worked δ = 2 example on ``model``'s own sinusoidal table, else on the formula at ``dim``; the flag
    says the model learns its position table (the rotation is then the formula's, not the model's)."""
    pe = getattr(model, "positional", None)
    if isinstance(pe, SinusoidalPositionalEncoding):
        return delta_example(dim, table=pe.P), False
    return delta_example(dim), pe is not None
