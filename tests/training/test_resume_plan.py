"""--resume keeps its plan: the saved schedule continues unless a new --max-steps or --max-minutes changes it
on purpose, and then the resume says how the schedule changes (the horizon, the learning rate at the step)."""

from __future__ import annotations

import dataclasses

from attnlab.config import TrainConfig
from attnlab.training.budget import BudgetPlan


def plan(**train) -> BudgetPlan:
    return BudgetPlan.make(dataclasses.replace(TrainConfig(), warmup_steps=2, **train), batches_per_epoch=100)


def test_a_resume_with_the_same_limits_keeps_the_plan_silently():
    saved = plan(max_steps=6)
    again = plan(max_steps=6)
    assert again.load_state_dict(saved.state_dict(), step=6) is None
    assert again.horizon == 6


def test_a_new_max_steps_extends_the_plan_and_says_how():
    saved = plan(max_steps=6)
    assert saved.factor(6) == 0.0  # the saved plan is spent: its decay has ended
    longer = plan(max_steps=12)
    line = longer.load_state_dict(saved.state_dict(), step=6)
    assert longer.horizon == 12
    assert "6 updates -> 12 updates" in line and "horizon 6 -> 12" in line
    assert f"from {saved.factor(6):.3f} to {longer.factor(6):.3f}" in line  # the lr rises again: said, not silent
