"""The sinusoidal positional encoding, drawn and checked (notes §13–16; D2L §10.6.3).

- a heat map of the table ``P (positions × dim)``: fast-varying columns on the left, slow ones on
  the right — a binary-counter-like pattern in continuous form (§15);
- curves of a few columns: a sin/cos pair per frequency ω_j = 1/10000^(2j/d);
- the similarity ``p_i · p_k`` of every pair of positions, which depends on the offset ``k − i``
  only (the bands parallel to the diagonal);
- the numerical check of the §16 rotation property with :func:`attnlab.attention.positional.rotation_error`.

The table shown is :func:`attnlab.attention.positional.sinusoidal_table`, the one the models use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from attnlab.attention.positional import rotation_error, sinusoidal_table
from attnlab.errors import AttnlabError
from attnlab.inspection.plots import new_figure, save_figure

__all__ = ["PositionalReport", "default_columns", "draw_positional", "positional_report"]


@dataclass
class PositionalReport:
    dim: int
    positions: int
    max_shift: int
    max_error: float  # the largest deviation from the §16 rotation property
    paths: list[Path]

    def line(self) -> str:
        return (
            f"rotation property: max error {self.max_error:.1e} over {self.positions} positions, "
            f"shifts 1..{self.max_shift} (dim {self.dim}, float64)"
        )


def default_columns(dim: int) -> list[int]:
    """Two neighbouring sin/cos pairs, as D2L draws (columns 6–9); the first ones for a small ``dim``.

    (Columns 0–1 have ω = 1 rad per position: sampled at integers they look like noise.)"""
    return [6, 7, 8, 9] if dim >= 10 else list(range(min(dim, 4)))


def _check_args(dim: int, positions: int, max_shift: int) -> None:
    if dim < 2 or dim > 4096:
        raise AttnlabError(f"--dim {dim} must lie between 2 and 4096 (one sin/cos pair needs 2 columns)")
    if positions < 2 or positions > 100_000:
        raise AttnlabError(f"--positions {positions} must lie between 2 and 100000")
    if max_shift < 1:
        raise AttnlabError(f"--max-shift {max_shift} must be >= 1")


def draw_positional(
    dim: int, positions: int, out_dir: str | Path, columns: list[int] | None = None, formats=("png", "svg")
) -> list[Path]:
    """Draw ``positional_encoding.{png,svg}`` (heat map, curves, similarity) into ``out_dir``.

    Raises AttnlabError for a dimension or number of positions out of range, or a column ≥ ``dim``.
    """
    _check_args(dim, positions, 1)
    columns = default_columns(dim) if columns is None else list(columns)
    bad = [c for c in columns if not 0 <= c < dim]
    if bad:
        raise AttnlabError(f"--columns {bad} out of range; columns lie in 0..{dim - 1}")
    P = sinusoidal_table(positions, dim)  # (positions, dim), float64
    fig = new_figure((15, 4.5))
    ax_heat, ax_curves, ax_sim = fig.subplots(1, 3)
    im = ax_heat.imshow(P.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    ax_heat.set(
        title=f"P ({positions} positions × {dim} dims)",
        xlabel="column (2j: sin, 2j+1: cos)",
        ylabel="position i",
    )
    fig.colorbar(im, ax=ax_heat, shrink=0.8)
    x = torch.arange(positions).numpy()
    for c in columns:
        j = c // 2
        kind = "sin" if c % 2 == 0 else "cos"
        ax_curves.plot(x, P[:, c].numpy(), label=f"col {c}: {kind}(i·ω_{j})", lw=1.2)
    ax_curves.set(title="a few columns (§15)", xlabel="position i", ylabel="value", ylim=(-1.15, 1.15))
    ax_curves.legend(fontsize=8, loc="lower right")
    ax_curves.grid(alpha=0.3)
    sim = P @ P.T  # (positions, positions): p_i · p_k depends on k − i only (§16)
    im2 = ax_sim.imshow(sim.numpy(), cmap="viridis", aspect="auto", interpolation="nearest")
    ax_sim.set(title="p_i · p_k depends only on k − i (§16)", xlabel="position k", ylabel="position i")
    fig.colorbar(im2, ax=ax_sim, shrink=0.8)
    fig.suptitle(
        "sinusoidal positional encoding: p[i, 2j] = sin(i ω_j), p[i, 2j+1] = cos(i ω_j), ω_j = 10000^(−2j/d)",
        fontsize=10,
    )
    return save_figure(fig, Path(out_dir) / f"positional_encoding_d{dim}_p{positions}", formats=formats)


def positional_report(
    dim: int,
    positions: int,
    out_dir: str | Path,
    max_shift: int = 10,
    columns: list[int] | None = None,
    formats=("png", "svg"),
) -> PositionalReport:
    """Draw the figures and run the rotation check; ``report.line()`` is the line to print."""
    _check_args(dim, positions, max_shift)
    paths = draw_positional(dim, positions, out_dir, columns, formats)
    error = rotation_error(dim, positions, max_shift)
    return PositionalReport(dim, positions, max_shift, error, paths)
