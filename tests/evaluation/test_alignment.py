"""Has attention formed? attention_movement / attention_uniformity / formation_note against hand-made maps."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.evaluation.alignment import (
    FORMED_MOVEMENT,
    attention_movement,
    attention_uniformity,
    formation_note,
)


def _tv_by_hand(w: torch.Tensor) -> float:
    """Mean over t' of ½ Σ_s |w[t', s] − w[t'−1, s]|, written as loops."""
    pairs = []
    for t in range(1, w.shape[0]):
        pairs.append(0.5 * sum(abs(float(w[t, s]) - float(w[t - 1, s])) for s in range(w.shape[1])))
    return sum(pairs) / len(pairs)


def test_same_row_at_every_step_does_not_move_and_is_not_formed():
    row = torch.tensor([0.7, 0.2, 0.05, 0.05])
    w = row.expand(5, 4)  # sharp, but the same at every step: a fixed context again (§1)
    assert attention_movement(w) == 0.0
    assert attention_uniformity(w) < 0.9
    note = formation_note(w)
    assert note is not None and "has not formed" in note and "total variation" in note


def test_a_movement_just_under_the_bar_never_reads_as_the_bar():
    # two steps whose rows differ by a total variation of 0.196: "0.20 (below 0.2)" would contradict itself
    w = torch.tensor([[0.9, 0.1], [0.704, 0.296]])
    assert attention_movement(w) == pytest.approx(0.196, abs=1e-6)
    note = formation_note(w)
    assert note is not None and "of 0.19 (below 0.2)" in note


def test_a_diagonal_alignment_moves_fully_and_has_formed():
    w = torch.eye(4)
    assert attention_movement(w) == pytest.approx(1.0)
    assert attention_uniformity(w) == pytest.approx(0.0, abs=1e-6)
    assert formation_note(w) is None


def test_uniform_rows_are_reported_as_near_uniform():
    w = torch.full((3, 5), 0.2)
    assert attention_uniformity(w) == pytest.approx(1.0)
    note = formation_note(w)
    assert note is not None and "near-uniform" in note


def test_movement_equals_the_formula_by_hand_on_random_softmax_rows():
    torch.manual_seed(0)
    w = torch.softmax(torch.randn(7, 6) * 2, dim=-1)
    assert attention_movement(w) == pytest.approx(_tv_by_hand(w), rel=1e-6)


def test_masked_padding_columns_change_nothing():
    torch.manual_seed(1)
    w = torch.softmax(torch.randn(4, 3) * 3, dim=-1)
    padded = torch.cat([w, torch.zeros(4, 2)], dim=-1)  # two <pad> keys: exactly 0 from the masked softmax
    assert attention_movement(padded) == pytest.approx(attention_movement(w))
    assert attention_uniformity(padded) == pytest.approx(attention_uniformity(w))


def test_leading_dims_are_averaged_map_by_map():
    still = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    moving = torch.eye(2)
    both = torch.stack([still, moving])[None]  # (layers=1, heads=2, T, S)
    assert attention_movement(both) == pytest.approx(0.5)


def test_one_step_cannot_move_and_bad_shapes_are_refused():
    assert math.isnan(attention_movement(torch.tensor([[0.3, 0.7]])))
    assert formation_note(torch.tensor([[0.3, 0.7]])) is None
    with pytest.raises(ValueError, match="queries, keys"):
        attention_movement(torch.tensor([0.3, 0.7]))


def test_threshold_is_the_issue_check():
    # Rows that move by exactly a TV of 0.25 > 0.2 have formed; 0.15 < 0.2 have not.
    for shift, formed in ((0.25, True), (0.15, False)):
        a = torch.tensor([0.9, 0.1])  # sharp enough not to count as near-uniform
        b = torch.tensor([0.9 - shift, 0.1 + shift])
        w = torch.stack([a, b, a, b])
        assert attention_movement(w) == pytest.approx(shift)
        assert (formation_note(w) is None) is formed, shift
    assert FORMED_MOVEMENT == 0.2


@pytest.mark.slow
def test_bahdanau_attention_forms_on_a_short_fra_eng_run(tmp_path, fra_eng_zip):
    """Issue #18's check on the demo's budget: the tiny tier's 1,800 updates (what 1.5 minutes buy on an
    idle 2-core Xeon). At step 0 every probe's rows are the same; at the end they move by a mean TV > 0.2."""
    from attnlab import config as C
    from attnlab.runs.probes import read_probes
    from attnlab.training import sizing
    from attnlab.training.loop import train

    cfg = C.apply_overrides(C.preset("bahdanau"), [f"data.data_path={fra_eng_zip}", "train.size=tiny",
                                                   "train.max_steps=1800", "train.threads=1"])
    cfg, _ = sizing.resolve(cfg)
    train(cfg, tmp_path / "run", progress=False)
    sentences = read_probes(tmp_path / "run")["sentences"]
    assert len(sentences) == 4
    first = [torch.tensor(s["steps"][0]["attention"]["cross"][0]) for s in sentences]  # (T, S) at step 0
    last = [torch.tensor(s["steps"][-1]["attention"]["cross"][0]) for s in sentences]
    assert all(formation_note(w) is not None for w in first)  # untrained: not formed, and said so
    moves = [attention_movement(w) for w in last]
    assert sum(moves) / len(moves) > FORMED_MOVEMENT, moves
