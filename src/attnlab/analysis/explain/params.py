"""Where a model's trainable parameters sit (notes §9, §21, §28.4).

Every trainable tensor is assigned to one module group — source/target embedding, encoder GRU,
attention (per kind), decoder GRU, FFN, LayerNorm, output layer ``W_o, b_o`` — and counted once:
a weight shared by two modules (the target embedding tied to ``W_o``) is counted under the first
and marked on the other: the output layer's row then counts ``b_o`` alone and says that ``W_o`` is
the target embedding's table, shared, counted once there (:func:`tied_note`).

What is *not* a parameter is listed beside (§9, :func:`non_parameters`): buffers such as the sinusoidal
positional table (computed from the config, never learned, not even saved) and the context vectors, the
activations attention computes for every sentence; neither is counted.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field

from torch import nn

from attnlab.analysis.report import TextReport
from attnlab.attention.multi_head import MultiHeadAttention
from attnlab.i18n import N_, _, ljust, rjust, width
from attnlab.models import traits
from attnlab.viz.figure import new_figure

__all__ = [
    "NotParameter",
    "ParamGroup",
    "ParamReport",
    "group_of",
    "non_parameters",
    "params_figure",
    "run",
    "tied_note",
]

# (pattern on the parameter name, group, the notes' section); the first match wins.
_RULES: tuple[tuple[str, str, str], ...] = (
    (r"^(src_embedding|encoder\.embedding)\.", N_("source embedding"), "§5"),
    (r"^tgt_embedding\.", N_("target embedding"), "§5"),
    (r"^positional\.", N_("positional encoding (learned)"), "§13"),
    (r"^encoder\.(rnn|bridge)\.", N_("encoder GRU"), "§6–7"),
    (r"^attention\.", N_("additive attention"), "§2"),
    (r"^combine\.", N_("attentional layer W_c"), "§1"),
    (r"^decoder\.", N_("decoder GRU"), "§6–7"),
    (r"^encoder_blocks\.\d+\.attention\.", N_("encoder self-attention"), "§11–12"),
    (r"^decoder_blocks\.\d+\.self_attention\.", N_("decoder masked self-attention"), "§18"),
    (r"^decoder_blocks\.\d+\.cross_attention\.", N_("encoder–decoder attention"), "§18"),
    (r"^blocks\.\d+\.attention\.", N_("causal self-attention"), "§28"),
    (r"\.ffn\.", N_("FFN"), "§19"),
    (r"(^|\.)(norm\d*|encoder_norm|decoder_norm)\.", N_("LayerNorm"), "§20"),
    (r"^output\.", N_("output layer W_o, b_o"), "§8"),
)


#: NotParameter.what, shown in the learner's language (the report's data keeps the key)
WHAT = {"buffer": N_("buffer"), "activation": N_("activation")}


def group_of(name: str) -> tuple[str, str]:
    """``(group, section)`` of a parameter name such as ``decoder_blocks.0.ffn.dense1.weight``."""
    for pattern, group, section in _RULES:
        if re.search(pattern, name):
            return group, section
    return N_("other"), ""


@dataclass
class ParamGroup:
    name: str
    section: str
    count: int = 0
    tensors: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)  # (name, shape) counted here
    tied: list[tuple[str, str]] = field(default_factory=list)  # (name here, name it shares storage with)
    shared_by: list[str] = field(default_factory=list)  # other names of tensors counted here


@dataclass(frozen=True)
class NotParameter:
    """A tensor the model holds or computes that is *not* a parameter (§9): nothing learns it."""

    name: str  # the notes' name, e.g. "positional encoding P"
    what: str  # "buffer" (held by the model) or "activation" (computed for every sentence)
    size: str  # e.g. "1024×256 = 262,144 numbers" or "256 numbers per decoder step"
    note: str  # why it is not a parameter


@dataclass
class ParamReport(TextReport):
    """The parameter groups of one model (:func:`run`): ``format()`` the table, ``figure()`` the bar chart.

    ``title`` names the model on both; ``vocab`` (source, target sizes) is added to the table's heading;
    ``verbose`` lists every tensor under its group."""

    groups: list[ParamGroup]
    total: int
    not_parameters: list[NotParameter] = field(default_factory=list)
    title: str = ""
    vocab: tuple[int, int] | None = None
    verbose: bool = False

    def count(self, group: str) -> int:
        return sum(g.count for g in self.groups if g.name == group)

    def share(self, group: str) -> float:
        return self.count(group) / self.total if self.total else 0.0

    def shape_of(self, name: str) -> tuple[int, ...] | None:
        """The shape of the parameter counted under ``name`` (None when no group counts it)."""
        return next((shape for g in self.groups for n, shape in g.tensors if n == name), None)

    def _format(self) -> str:
        return _table(self)

    def figure(self):
        """The bar chart of :func:`params_figure`."""
        return params_figure(self)


def run(model: nn.Module, title: str = "", vocab: tuple[int, int] | None = None, verbose: bool = False) -> ParamReport:
    """Group ``model``'s trainable parameters; tied weights are counted once (under their first name).
    ``title``, ``vocab`` and ``verbose`` only shape the text and the figure (:class:`ParamReport`).

    The total equals ``sum(p.numel() for p in model.parameters() if p.requires_grad)``
    (``parameters()`` yields a shared tensor once too). ``not_parameters`` lists what is not counted
    (:func:`non_parameters`).
    """
    groups: dict[str, ParamGroup] = {}
    first_name: dict[int, str] = {}
    owner: dict[int, ParamGroup] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if not p.requires_grad:
            continue
        gname, section = group_of(name)
        g = groups.setdefault(gname, ParamGroup(gname, section))
        if id(p) in first_name:
            g.tied.append((name, first_name[id(p)]))
            owner[id(p)].shared_by.append(name)
            continue
        first_name[id(p)] = name
        owner[id(p)] = g
        g.count += p.numel()
        g.tensors.append((name, tuple(p.shape)))
    total = sum(g.count for g in groups.values())
    return ParamReport(list(groups.values()), total, non_parameters(model), title, vocab, verbose)


def non_parameters(model: nn.Module) -> list[NotParameter]:
    """What ``model`` holds or computes besides its parameters (§9): its buffers (the sinusoidal
    positional table) and the context vectors its attention computes (an activation: the size of one).

    The context vector's size is read from the model: Bahdanau's values are the encoder states (M numbers:
    D, or 2D with a bidirectional encoder), whatever score its attention module computes; multi-head
    attention's output is D per query, in every layer of the kind (the model's traits); a model without
    attention that is recurrent reads one fixed context, the encoder's last state (D numbers, §1).
    """
    rows = []
    saved = set(model.state_dict())
    for name, buf in model.named_buffers():
        label = _("positional encoding P") if name.startswith("positional.") else name
        rows.append(NotParameter(
            label, "buffer", _("{shape} = {n:,} numbers").format(shape=_shape(tuple(buf.shape)), n=buf.numel()),
            _("sin/cos of the position (§15), computed from the config; not learned")
            + ("" if name in saved else _(", not saved in the checkpoint")),
        ))
    cfg = getattr(model, "config", None)
    t = traits(cfg) if cfg is not None else None
    if t is not None and t.recurrent and t.attention:
        M = cfg.num_hiddens * (2 if cfg.bidirectional else 1)  # the encoder states h_t: [h→; h←] when bidirectional
        rows.append(NotParameter(_("context vector c_t'"), "activation",
                                 _("{n} numbers per decoder step").format(n=M),
                                 _("Σ_t α_t h_t, recomputed at every step from the attention weights (§1)")))
    elif t is not None and t.attention_modules:
        for kind, path in t.attention_modules.items():
            mha = model.get_submodule(path.replace("*", "0"))
            if not isinstance(mha, MultiHeadAttention):
                continue
            label = (_("context vectors (cross-attention)") if kind == "cross"
                     else _("attention outputs ({kind})").format(kind=kind))
            rows.append(NotParameter(label, "activation",
                                     _("{n} numbers per query position, × {layers} layers").format(
                                         n=mha.num_hiddens, layers=t.attention[kind]),
                                     _("Σ_j α_j v_j of the heads, concatenated; recomputed for every sentence "
                                       "(§11–12)")))
    elif t is not None and t.recurrent:
        rows.append(NotParameter(_("context vector c"), "activation",
                                 _("{n} numbers per sentence").format(n=cfg.num_hiddens),
                                 _("the encoder's last state, read at every step (§1: the fixed context)")))
    return rows


def tied_note(report: ParamReport, group: ParamGroup) -> str:
    """The words for a group's tied weights, e.g. the output layer's: "output.bias only: output.weight
    (8000×256) is tied to the target embedding, shared, counted once (in that row)" — so its count
    (``b_o``) is not read as W_o's. '' when the group has none."""
    parts = []
    for name, first in group.tied:
        shape = report.shape_of(first)
        size = f" ({_shape(shape)})" if shape is not None else ""
        parts.append(_("{name}{size} is tied to the {group}, shared, counted once (in that row)").format(
            name=name, size=size, group=_(group_of(first)[0])))
    if not parts:
        return ""
    here = ", ".join(n for n, _ in group.tensors)
    return (_("{names} only: ").format(names=here) if here else "") + "; ".join(parts)


def _shape(shape: tuple[int, ...]) -> str:
    return "×".join(map(str, shape)) if shape else "scalar"


def _heading(report: ParamReport) -> str:
    if report.vocab is None:
        return report.title
    return _("{title}: source vocabulary {src:,}, target vocabulary {tgt:,}").format(
        title=report.title, src=report.vocab[0], tgt=report.vocab[1])


def _table(report: ParamReport) -> str:
    """The report as a text table: group, count, share (and every tensor with ``verbose``), then what
    is not a parameter (buffers, activations: not counted)."""
    # group names are shown in the current language (--lang), and stay the report's English keys
    module, params, share, total = _("module"), _("parameters"), _("share"), _("total")
    cells = max([width(_(g.name)) for g in report.groups] + [width(total), width(module)])
    title = _heading(report)
    lines = [title] if title else []
    lines.append(f"{ljust(module, cells)}  {'§':<6} {rjust(params, 12)}  {rjust(share, 6)}")
    lines.append("-" * (cells + 30))
    for g in report.groups:
        line = f"{ljust(_(g.name), cells)}  {g.section:<6} {g.count:>12,}  {100 * report.share(g.name):>5.1f}%"
        if g.tied:
            line += "  (" + tied_note(report, g) + ")"
        if g.shared_by:
            line += "  (" + _("also {names}: one shared tensor").format(names=", ".join(g.shared_by)) + ")"
        lines.append(line)
        if report.verbose:
            for name, shape in g.tensors:
                n = 1
                for s in shape:
                    n *= s
                lines.append(f"    {name:<{max(cells + 4, 40)}} {_shape(shape):>14} {n:>12,}")
    lines.append("-" * (cells + 30))
    lines.append(f"{ljust(total, cells)}  {'':<6} {report.total:>12,}  100.0%")
    if report.not_parameters:
        lines.append(_("not parameters (§9): not learned, not counted above"))
        w = max(width(r.name) for r in report.not_parameters)
        for r in report.not_parameters:
            lines.append(f"  {ljust(r.name, w)}  {ljust(_(WHAT[r.what]), 10)}  {r.size}: {r.note}")
    return "\n".join(lines)



def params_figure(report: ParamReport):
    """A horizontal bar chart of the parameter count per group, labelled with the count and share.

    Nothing is cut off: the title wraps and is centred on the figure, the x range leaves room for the longest label at the end of
    the longest bar, and constrained layout makes room for the group names. A tied group's bar is its
    own count (``b_o``); its name says that ``W_o`` is counted in the embedding's bar.
    """
    groups = list(report.groups)
    fig = new_figure((9, 1.6 + 0.45 * len(groups)))
    ax = fig.add_subplot()
    names = [_(g.name) + (_("\n(W_o tied to the {group}, counted there)").format(group=_(group_of(g.tied[0][1])[0]))
                          if g.tied else _(" (= W_o, tied)") if g.shared_by else "") for g in groups]
    counts = [g.count for g in groups]
    bars = ax.barh(range(len(groups)), counts, color="tab:blue")
    ax.set_yticks(range(len(groups)))
    ax.set_yticklabels(names, fontsize=9)
    ax.invert_yaxis()
    top = max(counts) if counts else 1
    for bar, g in zip(bars, groups):
        ax.text(
            bar.get_width() + 0.01 * top,
            bar.get_y() + bar.get_height() / 2,
            f"{g.count:,} ({100 * report.share(g.name):.1f}%)"
            + (_(", {names} only").format(names=", ".join(n.rsplit(".", 1)[-1] for n, _ in g.tensors))
               if g.tied else ""),
            va="center",
            fontsize=8,
        )
    ax.xaxis.set_major_formatter(lambda x, _: f"{x:,.0f}")  # 2,000,000, not an offset "1e6"
    ax.set_xlim(0, top * 1.45)  # the value labels ("2,102,272 (27.0%)") end inside the axes
    ax.set_xlabel(_("trainable parameters"))
    ax.grid(axis="x", alpha=0.3)
    # a figure title, centred on the figure (an axes title is centred on the bars and runs off the right
    # edge when the group names push the axes right), wrapped to the figure's width
    title = f"{report.title}: " if report.title else ""
    fig.suptitle(textwrap.fill(title + _("{n:,} trainable parameters (notes §9, §21)").format(n=report.total), 90),
                 fontsize=10)
    if report.not_parameters:
        note = _("not parameters (§9), not counted: ") + "; ".join(
            f"{r.name} ({_(WHAT[r.what])}, {r.size})" for r in report.not_parameters)
        fig.supxlabel(textwrap.fill(note, 120), fontsize=7, color="0.35")
    return fig

