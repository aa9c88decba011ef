"""Positional encodings (notes §13–16; D2L §10.6.3).

Self-attention is order-blind, so each token embedding gets a position vector *added* to it
(notes §14: adding keeps the width D; the following linear maps can still separate the two parts).

- :class:`SinusoidalPositionalEncoding`: fixed (a buffer, not trained),
  ``p[i, 2j] = sin(i ω_j)``, ``p[i, 2j+1] = cos(i ω_j)``, ``ω_j = 1 / 10000^(2j/D)`` (notes §15).
- :class:`LearnedPositionalEncoding`: a trainable ``(max_positions, D)`` table.

Both take positions as a LongTensor per example, so the decoder-only model can start its target
positions right after each source's valid length.

Dimension key: B batch, T positions per example, D model dim (num_hiddens).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.errors import AttnlabError
from attnlab.i18n import _


class SequenceTooLongError(AttnlabError):
    """A sequence needs more positions than the model's positional table holds."""


def check_positions(needed: int, max_positions: int) -> None:
    """Raise :class:`SequenceTooLongError` when ``needed`` positions exceed ``max_positions``.

    Models call it with host-side lengths (no device sync) before looking positions up.
    """
    if needed > max_positions:
        raise SequenceTooLongError(
            _("a sequence needs {needed} positions but model.max_positions={max_positions}; "
              "shorten the input (data.num_steps) or train a model with a larger model.max_positions").format(
                needed=needed, max_positions=max_positions)
        )


def sinusoidal_table(num_positions: int, dim: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """``(num_positions, dim)`` sinusoidal table, notes §15 (computed in float64, then cast).

    Even columns ``2j`` hold ``sin(i ω_j)``, odd columns ``2j+1`` hold ``cos(i ω_j)``,
    ``ω_j = 10000^(-2j/dim)``. An odd ``dim`` drops the last cosine column.
    """
    i = torch.arange(num_positions, dtype=torch.float64)[:, None]  # (P, 1)
    omega = torch.pow(10000.0, -torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (ceil(dim/2),)
    angles = i * omega  # (P, ceil(dim/2))
    table = torch.zeros(num_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : dim // 2])
    return table.to(dtype)


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sin/cos position vectors, looked up from a non-trainable, non-persistent buffer.

    ``forward(positions)`` maps a LongTensor of positions ``(B, T)`` (or any shape) to
    ``(..., D)`` vectors. Positions must be ``< max_positions`` (see :func:`check_positions`).
    """

    def __init__(self, num_hiddens: int, max_positions: int = 1024) -> None:
        super().__init__()
        self.max_positions = max_positions
        # persistent=False: the table is a function of the config, not a parameter (notes §9), so
        # it stays out of checkpoints and parameter counts.
        self.register_buffer(
            "P", sinusoidal_table(max_positions, num_hiddens, torch.float32), persistent=False
        )

    def forward(self, positions: Tensor) -> Tensor:
        return self.P[positions]  # (..., D)


class LearnedPositionalEncoding(nn.Module):
    """A trainable position table ``(max_positions, D)`` (BERT/GPT style); same interface."""

    def __init__(self, num_hiddens: int, max_positions: int = 1024) -> None:
        super().__init__()
        self.max_positions = max_positions
        self.embedding = nn.Embedding(max_positions, num_hiddens)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, positions: Tensor) -> Tensor:
        return self.embedding(positions)  # (..., D)


def rotation_error(dim: int, positions: int, max_shift: int, dtype: torch.dtype = torch.float64) -> float:
    """Check the notes' §16 property of the sinusoidal encoding; return the max absolute error.

    For every frequency pair j, every position ``i < positions`` and every shift
    ``1 <= δ <= max_shift``, the rotation (depending on δ only)
    ``[[cos δω_j, sin δω_j], [-sin δω_j, cos δω_j]]`` applied to ``(p[i, 2j], p[i, 2j+1])`` must give
    ``(p[i+δ, 2j], p[i+δ, 2j+1])``. The table comes from :func:`sinusoidal_table` (the one the
    module uses) in ``dtype``; the rotations are built independently from ω_j.
    """
    if dim < 2 or positions < 1 or max_shift < 1:
        raise ValueError("rotation_error needs dim >= 2, positions >= 1 and max_shift >= 1")
    table = sinusoidal_table(positions + max_shift, dim, dtype)
    pairs = dim // 2
    sin_part, cos_part = table[:, 0 : 2 * pairs : 2], table[:, 1 : 2 * pairs : 2]  # (P, J) each
    omega = torch.pow(10000.0, -torch.arange(0, 2 * pairs, 2, dtype=torch.float64) / dim).to(dtype)  # (J,)
    worst = 0.0
    for delta in range(1, max_shift + 1):
        c, s = torch.cos(delta * omega), torch.sin(delta * omega)  # (J,)
        x, y = sin_part[:positions], cos_part[:positions]  # position i
        rx, ry = c * x + s * y, -s * x + c * y  # R(δω_j) (p_{i,2j}, p_{i,2j+1})
        tx, ty = sin_part[delta : delta + positions], cos_part[delta : delta + positions]  # position i+δ
        err = torch.maximum((rx - tx).abs().max(), (ry - ty).abs().max()).item()
        worst = max(worst, err)
    return worst
