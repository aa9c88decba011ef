"""New figures and saved figures: every attnlab drawing is made by :func:`new_figure` and written by
:func:`save_figure` (matplotlib's object API on the Agg canvas, imported only when something is drawn, so
the core, ``attnlab --help`` and a server that draws nothing never load it).
"""

from __future__ import annotations

import io
from pathlib import Path

from attnlab.files import atomic_write_bytes

__all__ = ["new_figure", "save_figure"]


def new_figure(figsize=(8, 5)):
    """An :class:`~attnlab.viz.figure.InlineFigure` (a matplotlib ``Figure`` on the Agg canvas,
    no pyplot state, safe in servers and threads, shown inline by Jupyter)."""
    # matplotlib is heavy: imported when a figure is drawn, so the core and `attnlab --help` never load it.
    from attnlab.viz.inline import InlineFigure

    return InlineFigure(figsize=figsize, layout="constrained")


def save_figure(fig, path_stem: Path, formats=("png", "svg")) -> list[Path]:
    """Save ``fig`` as ``path_stem.png`` / ``.svg`` atomically; returns the written paths. The stem is
    kept whole: a run named ``bahdanau-1.5min`` gives ``bahdanau-1.5min_x.png``, not ``bahdanau-1.png``."""
    written = []
    for fmt in formats:
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=120)
        path = path_stem.parent / f"{path_stem.name}.{fmt}"
        atomic_write_bytes(path, buf.getvalue())
        written.append(path)
    return written
