"""A run's training curves: training and validation loss, validation BLEU and the learning rate."""

from __future__ import annotations

from pathlib import Path

from attnlab.i18n import _
from attnlab.runs import read_metrics
from attnlab.viz.figure import new_figure, save_figure


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
        ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], label=_("train (per token)"), lw=1)
        ax_lr.plot([r["step"] for r in train], [r["lr"] for r in train], color="tab:green")
    if valid:
        ax_loss.plot([r["step"] for r in valid], [r["valid_loss"] for r in valid], "o-", label=_("valid"), ms=3)
        vb = [r for r in valid if "valid_bleu" in r]
        ax_bleu.plot([r["step"] for r in vb], [r["valid_bleu"] for r in vb], "o-", color="tab:red", ms=3)
    ax_loss.set(title=_("cross-entropy"), xlabel=_("step"), ylabel=_("loss"))
    ax_loss.legend()
    ax_bleu.set(title=_("validation BLEU (greedy)"), xlabel=_("step"), ylabel="BLEU")
    ax_lr.set(title=_("learning rate"), xlabel=_("step"), ylabel="lr")
    for ax in (ax_loss, ax_bleu, ax_lr):
        ax.grid(alpha=0.3)
    fig.suptitle(_("run {name}").format(name=run_dir.name))
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
