"""Positional encodings: the notes' §15 formula and the §16 rotation property."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.attention import positional
from attnlab.attention.positional import (
    LearnedPositionalEncoding,
    SequenceTooLongError,
    SinusoidalPositionalEncoding,
    check_positions,
    rotation_error,
    sinusoidal_table,
)
from attnlab.errors import AttnlabError


@pytest.mark.parametrize("dim", [2, 32, 64, 256, 33])
def test_rotation_property_holds(dim):
    assert rotation_error(dim, positions=300, max_shift=40) < 1e-5


def test_rotation_check_detects_a_wrong_table(monkeypatch):
    good = sinusoidal_table

    def swapped(n, d, dtype=torch.float64):  # cos in even columns, sin in odd: no longer a rotation by δω
        t = good(n, d, dtype)
        return torch.stack([t[:, 1::2], t[:, 0::2]], dim=-1).reshape(n, d)

    monkeypatch.setattr(positional, "sinusoidal_table", swapped)
    assert rotation_error(16, 50, 5) > 0.1


def test_table_matches_the_notes_formula():
    P = sinusoidal_table(50, 8)
    i, j = 7, 2
    w = 1 / 10000 ** (2 * j / 8)
    assert P[i, 2 * j].item() == pytest.approx(math.sin(i * w), abs=1e-12)
    assert P[i, 2 * j + 1].item() == pytest.approx(math.cos(i * w), abs=1e-12)
    assert torch.equal(P[0, 1::2], torch.ones(4, dtype=torch.float64))  # cos(0) = 1


def test_sinusoidal_is_a_buffer_not_a_parameter_and_looks_up_per_example_positions():
    pe = SinusoidalPositionalEncoding(16, max_positions=64)
    assert list(pe.parameters()) == [] and pe.state_dict() == {}
    positions = torch.tensor([[0, 1, 2], [5, 6, 7]])  # second example starts at 5 (decoder-only targets)
    out = pe(positions)
    assert out.shape == (2, 3, 16) and out.dtype == torch.float32
    torch.testing.assert_close(out[1, 0], sinusoidal_table(64, 16)[5].float(), atol=1e-7, rtol=0)


def test_learned_is_trainable_with_the_same_interface():
    pe = LearnedPositionalEncoding(16, max_positions=10)
    assert sum(p.numel() for p in pe.parameters()) == 160
    assert pe(torch.tensor([[3, 4]])).shape == (1, 2, 16)


def test_check_positions_teaches():
    check_positions(10, 10)
    with pytest.raises(SequenceTooLongError, match="max_positions=10") as e:
        check_positions(11, 10)
    assert isinstance(e.value, AttnlabError)
