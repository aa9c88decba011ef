"""Where a model's trainable parameters sit (notes §9, §21, §28.4).

Every trainable tensor is assigned to one module group — source/target embedding, encoder GRU,
attention (per kind), decoder GRU, FFN, LayerNorm, output layer ``W_o, b_o`` — and counted once:
a weight shared by two modules (the target embedding tied to ``W_o``) is counted under the first
and marked on the other. Buffers (the sinusoidal positional table) are not parameters (§9: they are
computed from the config, never learned) and are not counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from attnlab.inspection.plots import new_figure, save_figure

__all__ = ["ParamGroup", "ParamReport", "draw_params", "format_params", "group_of", "parameter_report"]

# (pattern on the parameter name, group, the notes' section); the first match wins.
_RULES: tuple[tuple[str, str, str], ...] = (
    (r"^(src_embedding|encoder\.embedding)\.", "source embedding", "§5"),
    (r"^tgt_embedding\.", "target embedding", "§5"),
    (r"^positional\.", "positional encoding (learned)", "§13"),
    (r"^encoder\.(rnn|bridge)\.", "encoder GRU", "§6–7"),
    (r"^attention\.", "additive attention", "§2"),
    (r"^decoder\.", "decoder GRU", "§6–7"),
    (r"^encoder_blocks\.\d+\.attention\.", "encoder self-attention", "§11–12"),
    (r"^decoder_blocks\.\d+\.self_attention\.", "decoder masked self-attention", "§18"),
    (r"^decoder_blocks\.\d+\.cross_attention\.", "encoder–decoder attention", "§18"),
    (r"^blocks\.\d+\.attention\.", "causal self-attention", "§28"),
    (r"\.ffn\.", "FFN", "§19"),
    (r"(^|\.)(norm\d*|encoder_norm|decoder_norm)\.", "LayerNorm", "§20"),
    (r"^output\.", "output layer W_o, b_o", "§8"),
)


def group_of(name: str) -> tuple[str, str]:
    """``(group, section)`` of a parameter name such as ``decoder_blocks.0.ffn.dense1.weight``."""
    for pattern, group, section in _RULES:
        if re.search(pattern, name):
            return group, section
    return "other", ""


@dataclass
class ParamGroup:
    name: str
    section: str
    count: int = 0
    tensors: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)  # (name, shape) counted here
    tied: list[tuple[str, str]] = field(default_factory=list)  # (name here, name it shares storage with)
    shared_by: list[str] = field(default_factory=list)  # other names of tensors counted here


@dataclass
class ParamReport:
    groups: list[ParamGroup]
    total: int

    def count(self, group: str) -> int:
        return sum(g.count for g in self.groups if g.name == group)

    def share(self, group: str) -> float:
        return self.count(group) / self.total if self.total else 0.0


def parameter_report(model: nn.Module) -> ParamReport:
    """Group ``model``'s trainable parameters; tied weights are counted once (under their first name).

    The total equals ``sum(p.numel() for p in model.parameters() if p.requires_grad)``
    (``parameters()`` yields a shared tensor once too).
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
    return ParamReport(list(groups.values()), total)


def _shape(shape: tuple[int, ...]) -> str:
    return "×".join(map(str, shape)) if shape else "scalar"


def format_params(report: ParamReport, title: str = "", verbose: bool = False) -> str:
    """The report as a text table: group, count, share (and every tensor with ``verbose``)."""
    width = max([len(g.name) for g in report.groups] + [len("total")])
    lines = [title] if title else []
    lines.append(f"{'module':<{width}}  {'§':<6} {'parameters':>12}  {'share':>6}")
    lines.append("-" * (width + 30))
    for g in report.groups:
        line = f"{g.name:<{width}}  {g.section:<6} {g.count:>12,}  {100 * report.share(g.name):>5.1f}%"
        if g.tied:
            line += "  (" + "; ".join(f"{a} tied to {b}, counted there" for a, b in g.tied) + ")"
        if g.shared_by:
            line += "  (also used as " + ", ".join(g.shared_by) + ")"
        lines.append(line)
        if verbose:
            for name, shape in g.tensors:
                n = 1
                for s in shape:
                    n *= s
                lines.append(f"    {name:<{max(width + 4, 40)}} {_shape(shape):>14} {n:>12,}")
    lines.append("-" * (width + 30))
    lines.append(f"{'total':<{width}}  {'':<6} {report.total:>12,}  100.0%")
    return "\n".join(lines)


def draw_params(
    report: ParamReport, out_dir: str | Path, title: str, stem: str = "params", formats=("png", "svg")
) -> list[Path]:
    """A horizontal bar chart of the parameter count per group, labelled with the share."""
    groups = list(report.groups)
    fig = new_figure((8, 1.2 + 0.45 * len(groups)))
    ax = fig.add_subplot()
    names = [g.name + (" (tied weight counted elsewhere)" if g.tied else "") for g in groups]
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
            f"{g.count:,} ({100 * report.share(g.name):.1f}%)",
            va="center",
            fontsize=8,
        )
    ax.set_xlim(0, top * 1.3)
    ax.set_xlabel("trainable parameters")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"{title}: {report.total:,} trainable parameters (notes §9, §21)", fontsize=10)
    return save_figure(fig, Path(out_dir) / stem, formats=formats)
