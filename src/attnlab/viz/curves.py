"""Matplotlib helpers (object API, Agg backend, imported lazily so the core never needs a display).

Each figure has one drawing function that returns it (a notebook shows it) and the commands save
what it returns with :func:`save_figure`.
"""

from __future__ import annotations

import io
from pathlib import Path

from attnlab.io import atomic_write_bytes
from attnlab.runs import read_metrics


def new_figure(figsize=(8, 5)):
    """An :class:`~attnlab.viz.figure.InlineFigure` (a matplotlib ``Figure`` on the Agg canvas,
    no pyplot state, safe in servers and threads, shown inline by Jupyter)."""
    # matplotlib is heavy: imported when a figure is drawn, so the core and `attnlab --help` never load it.
    from attnlab.viz.figure import InlineFigure

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


def curves_figure(run_dir: str | Path):
    """The training curves of a run as a ``Figure`` — training and validation loss, validation BLEU
    and the learning rate, from ``metrics.jsonl`` — or ``None`` when it holds no record yet."""
    run_dir = Path(run_dir)
    recs = read_metrics(run_dir)
    train = [r for r in recs if r.get("event") == "train"]
    valid = [r for r in recs if r.get("event") == "valid" and "valid_loss" in r]
    if not train and not valid:
        return None
    fig = new_figure((11, 4))
    ax_loss, ax_bleu, ax_lr = fig.subplots(1, 3)
    if train:
        ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], label="train (per token)", lw=1)
        ax_lr.plot([r["step"] for r in train], [r["lr"] for r in train], color="tab:green")
    if valid:
        ax_loss.plot([r["step"] for r in valid], [r["valid_loss"] for r in valid], "o-", label="valid", ms=3)
        vb = [r for r in valid if "valid_bleu" in r]
        ax_bleu.plot([r["step"] for r in vb], [r["valid_bleu"] for r in vb], "o-", color="tab:red", ms=3)
    ax_loss.set(title="cross-entropy", xlabel="step", ylabel="loss")
    ax_loss.legend()
    ax_bleu.set(title="validation BLEU (greedy)", xlabel="step", ylabel="BLEU")
    ax_lr.set(title="learning rate", xlabel="step", ylabel="lr")
    for ax in (ax_loss, ax_bleu, ax_lr):
        ax.grid(alpha=0.3)
    fig.suptitle(f"run {run_dir.name}")
    return fig


def plot_curves(run_dir: str | Path, out: str | Path | None = None, formats=("png", "svg")) -> list[Path]:
    """Write :func:`curves_figure` as ``curves.png/svg`` (into the run folder unless ``out``); returns the paths.

    Each file is replaced atomically (:func:`save_figure`: temporary file, fsync, rename), so a reader
    (a browser, the web page) polling during training sees the old curves or the new, never half a PNG.
    Training redraws only the PNG at each validation (``formats=("png",)``: the SVG doubles the cost).
    """
    fig = curves_figure(run_dir)
    if fig is None:
        return []
    return save_figure(fig, Path(out or run_dir) / "curves", formats)
