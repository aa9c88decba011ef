"""Attention maps drawn: panels of weights with token labels, and a strip of frames over training.

Draws what it is handed — weights, the labels of their rows and columns, titles — and knows nothing of
models or translations: :mod:`attnlab.maps` decides what to draw (which kind, layers, heads, which labels)
and calls :func:`grid_figure` and :func:`strip_figure`. As in D2L's heatmaps and the web page, a darker
cell is a larger weight (the notes §23: 颜色越深，说明注意力权重越大), on one fixed scale from 0 to 1 in every
panel and figure; rows are queries and columns keys, and every figure says so under its title.

Dimension key: Q queries (rows), K keys (columns).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from attnlab.i18n import _
from attnlab.viz.figure import new_figure

__all__ = ["CMAP", "Frame", "Panel", "animate", "grid_figure", "strip_figure"]

#: ColorBrewer's Blues, light → dark: 0 is white, 1 dark blue (the web page's ramp too).
CMAP = "Blues"
_SPECIAL_COLOURS = {"<pad>": "tab:gray", "<bos>": "tab:blue", "<eos>": "tab:blue"}


@dataclass(frozen=True)
class Panel:
    """One map to draw: its title and its weights ``(Q, K)``."""

    title: str
    weights: Tensor


@dataclass(frozen=True)
class Frame:
    """One recorded step of a map during training: its step, labels, caption and weights ``(Q, K)``."""

    step: int
    keys: list[str]
    rows: list[str]
    caption: str
    weights: Tensor


def caption() -> str:
    """The line every attention figure carries: how to read it (notes §23)."""
    return _("rows = queries, columns = keys; darker = larger weight (0–1); <pad> columns get exactly 0")


def _style_ticks(labels, texts: Sequence[str]) -> None:
    for label, text in zip(labels, texts):
        if text in _SPECIAL_COLOURS:
            label.set_color(_SPECIAL_COLOURS[text])


def _draw(ax, w: Tensor, rows: Sequence[str], cols: Sequence[str], title: str, boundary: int | None = None):
    # vmin/vmax fixed at 0 and 1: a colour means the same weight in every panel, figure and run.
    image = ax.imshow(w.detach().float().cpu().numpy(), cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto",
                      interpolation="nearest")
    ax.set_xticks(range(len(cols)))
    ax.set_yticks(range(len(rows)))
    ax.set_xticklabels(cols, rotation=90, fontsize=8)
    ax.set_yticklabels(rows, fontsize=8)
    _style_ticks(ax.get_xticklabels(), cols)
    _style_ticks(ax.get_yticklabels(), rows)
    if boundary is not None:  # where one sequence ends and the next begins (decoder-only: source ┆ target)
        ax.axvline(boundary - 0.5, color="tab:red", lw=1.2, ls="--")
        ax.axhline(boundary - 0.5, color="tab:red", lw=1.2, ls="--")
    ax.set_title(title, fontsize=9)
    return image


def grid_figure(grid: Sequence[Sequence[Panel]], rows: Sequence[str], cols: Sequence[str],
                axis_names: tuple[str, str], heading: str, boundary: int | None = None):
    """Panels in a grid (one row of panels per layer, one column per head), each ``(len(rows), len(cols))``
    with token labels, one colour bar, ``heading`` and the reading :func:`caption` above.
    ``len(fig.axes)`` is the number of panels plus one (the colour bar)."""
    n_rows, n_cols = len(grid), len(grid[0])
    cell = 0.28  # inches per token: labels stay legible, big grids stay bounded
    panel_w, panel_h = max(2.6, cell * len(cols) + 0.8), max(2.0, cell * len(rows) + 0.8)
    fig = new_figure((min(4 + panel_w * n_cols, 40), min(1.9 + panel_h * n_rows, 40)))
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    image = None
    for r, line in enumerate(grid):
        for c, panel in enumerate(line):
            title = _("{name} · max {peak:.2f}").format(name=panel.title, peak=float(panel.weights.max()))
            image = _draw(axes[r][c], panel.weights, rows, cols, title, boundary)
            if c == 0:
                axes[r][c].set_ylabel(axis_names[0], fontsize=8)
            if r == n_rows - 1:
                axes[r][c].set_xlabel(axis_names[1], fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.8, label=_("attention weight (darker = larger, 0–1)"))
    fig.suptitle(f"{heading}\n{caption()}", fontsize=10)
    return fig


def strip_figure(frames: Sequence[Frame], heading: str):
    """A strip of ``frames`` side by side on one colour scale (how a map formed during training)."""
    n_cols = max(len(f.keys) for f in frames)
    n_rows = max(max(len(f.rows), 1) for f in frames)
    panel_w, panel_h = max(2.0, 0.3 * n_cols + 1.0), max(2.0, 0.3 * n_rows + 1.2)
    fig = new_figure((min(max(6.0, 1.5 + panel_w * len(frames)), 48), panel_h + 1.5))
    axes = fig.subplots(1, len(frames), squeeze=False)[0]
    image = None
    for ax, f in zip(axes, frames):
        image = _frame(ax, f)
    fig.colorbar(image, ax=list(axes), shrink=0.8, label=_("attention weight (darker = larger, 0–1)"))
    fig.suptitle(f"{heading}\n{caption()}", fontsize=10)
    return fig


def _frame(ax, f: Frame):
    w = f.weights[: len(f.rows)] if f.rows else f.weights[:1]
    image = _draw(ax, w, f.rows or ["<eos>?"], f.keys, _("step {step}").format(step=f.step))
    ax.set_xlabel("\n".join(line[:40] for line in f.caption.splitlines()), fontsize=8)  # each line cut alone
    return image


def animate(frames: Sequence[Frame], path: Path, heading: str) -> Path | None:
    """An animated GIF of ``frames`` through matplotlib's PillowWriter, written atomically; None without Pillow."""
    try:  # optional: Pillow writes GIFs (not a core dependency)
        import PIL  # noqa: F401
        from matplotlib.animation import PillowWriter
    except ImportError:
        return None
    n_cols = max(len(f.keys) for f in frames)
    n_rows = max(max(len(f.rows), 1) for f in frames)
    fig = new_figure((max(3.5, 0.35 * n_cols + 2.5), max(3.0, 0.35 * n_rows + 2.0)))
    ax = fig.add_subplot()
    bar = None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".gif", dir=path.parent)
    os.close(fd)
    try:
        writer = PillowWriter(fps=max(1, min(4, math.ceil(len(frames) / 8))))
        with writer.saving(fig, tmp, dpi=100):
            for f in frames:
                ax.clear()
                image = _frame(ax, f)
                if bar is None:
                    bar = fig.colorbar(image, ax=ax, label=_("attention weight (darker = larger, 0–1)"))
                fig.suptitle(heading, fontsize=9)
                writer.grab_frame()
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
