"""The budget plan (training/budget.py): the lr reaches its floor when the budget ends, on a simulated clock."""

from __future__ import annotations

import json
import os
import random
import signal

import pytest
import torch
from safetensors.torch import load_file

from attnlab import config as C
from attnlab import runs
from attnlab.training.budget import WARM_UPDATES, BudgetPlan
from tests.conftest import tiny_config


def _train_cfg(*items: str) -> C.TrainConfig:
    return C.apply_overrides(C.Config(), list(items)).train


def _simulate(plan: BudgetPlan, update_s, valid_s: float):
    """Run ``plan`` as the training loop does, on a simulated clock; returns (factors, clock, validations)."""
    t, step, factors, timed, n_timed, valids = 0.0, 0, [], 0.0, 0, 0
    while True:
        if n_timed:
            plan.observe(step, t, timed / n_timed)
        if plan.out_of_time(t):
            break
        factors.append(plan.factor(step))
        dt = update_s(step)
        t += dt
        step += 1
        if step > WARM_UPDATES:
            timed, n_timed = timed + dt, n_timed + 1
        if plan.due_validation(step):
            t += valid_s
            plan.validated(step, valid_s)
            valids += 1
    return factors, t + valid_s, valids  # the final validation


@pytest.mark.parametrize("minutes,update_s,valid_s", [(2.5, 0.25, 3.0), (12, 2.1, 10.0), (0.5, 0.05, 0.4)])
def test_timed_budget_ends_at_the_floor(minutes, update_s, valid_s):
    rng = random.Random(0)
    plan = BudgetPlan.make(_train_cfg(f"train.max_minutes={minutes}"), 0)
    # updates vary by ±40 % (bucketed batches of different lengths), the first two are slow
    factors, total, valids = _simulate(plan, lambda s: update_s * (3 if s < 2 else rng.uniform(0.6, 1.4)), valid_s)
    assert plan.shape == "wsd" and max(factors) == pytest.approx(1.0, abs=0.05)
    assert factors[-1] <= 0.05, factors[-10:]  # the last update runs at (near) zero lr
    assert total <= minutes * 60 + update_s  # the final validation fits in the budget
    assert total >= minutes * 60 - 2 * valid_s - 2 * update_s  # and the budget is used
    assert valids == 3  # at 25, 50 and 75 %
    warm = next(i for i, f in enumerate(factors) if f >= 0.999)
    assert warm <= 0.1 * len(factors)  # warm-up is a small share of the horizon


def test_step_and_epoch_budgets_know_their_horizon():
    plan = BudgetPlan.make(_train_cfg("train.max_steps=200"), 0)
    assert plan.shape == "wsd" and plan.horizon == 200 and plan.warmup == 10
    f = [plan.factor(s) for s in range(200)]
    assert f[9] == 1.0 and f[0] == pytest.approx(0.1) and f[-1] == pytest.approx(1 / 40)  # decays over the last 40
    assert all(a >= b for a, b in zip(f[9:], f[10:]))  # flat, then monotone decay after the warm-up
    plan = BudgetPlan.make(_train_cfg("train.max_epochs=3"), 70)
    assert plan.horizon == 210 and plan.factor(209) == pytest.approx(1 / 42)
    linear = BudgetPlan.make(_train_cfg("train.max_steps=200", "train.schedule=linear"), 0)
    g = [linear.factor(s) for s in range(200)]
    assert g[10] == 1.0 and g[11] < 1.0 and g[-1] == pytest.approx(1 / 190)  # decays from the warm-up on
    # steps and epochs both given: the nearer limit is the horizon
    assert BudgetPlan.make(_train_cfg("train.max_epochs=3", "train.max_steps=100"), 70).horizon == 100


def test_wsd_stays_flat_then_decays():
    plan = BudgetPlan.make(_train_cfg("train.max_steps=100", "train.schedule=wsd", "train.decay_frac=0.2"), 0)
    f = [plan.factor(s) for s in range(100)]
    assert f[50] == 1.0 and f[79] == 1.0 and f[90] == pytest.approx(0.5) and f[-1] == pytest.approx(0.05)


def test_unbudgeted_run_keeps_an_open_ended_schedule():
    plan = BudgetPlan.make(_train_cfg("train.warmup_steps=100"), 0)
    assert plan.shape == "inverse_sqrt" and plan.horizon is None
    assert plan.factor(49) == pytest.approx(0.5) and plan.factor(99) == 1.0
    assert plan.factor(399) == pytest.approx(0.5)  # 1/sqrt(t) after warm-up, never 0
    assert plan.due_validation(500) and not plan.due_validation(499)  # eval_every steps
    assert not plan.out_of_time(1e9)


def test_plan_round_trips_through_a_checkpoint_state():
    plan = BudgetPlan.make(_train_cfg("train.max_minutes=5"), 0)
    plan.observe(40, 60.0, 0.5)
    plan.validated(80, 4.0)
    again = BudgetPlan.make(_train_cfg("train.max_minutes=5"), 0)
    again.load_state_dict(plan.state_dict())
    assert again.state_dict() == plan.state_dict() and again.factor(100) == plan.factor(100)


class _FakeClock:
    """Each reading advances the clock by ``tick`` seconds: the loop's time depends only on its calls."""

    def __init__(self, tick: float) -> None:
        self.t, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.t += self.tick
        return self.t


def test_timed_run_decays_to_the_floor_on_a_simulated_clock(tmp_path, monkeypatch):
    import attnlab.training.loop as loop

    monkeypatch.setattr(loop, "clock", _FakeClock(0.05))
    # train.average_last=0: every reading of this clock costs a tick, and each checkpoint reads it (its elapsed
    # time), so the decay's checkpoints would cost this 40-update run whole updates; a real clock charges a
    # save what it takes (the test below checks the average points of a timed plan).
    res = loop.train(tiny_config("transformer", "train.max_minutes=0.1", "train.log_every=1", "train.eval_frac=0.25",
                                 "train.average_last=0"), tmp_path / "run", progress=False)
    rows = runs.read_metrics(tmp_path / "run")
    lrs = [r["lr"] for r in rows if r.get("event") == "train"]
    assert res.stopped_by == "max_minutes" and len(lrs) >= 20
    assert max(lrs) == pytest.approx(3e-3, rel=0.05) and lrs[-1] <= 0.15 * max(lrs)
    assert len([r for r in rows if r.get("event") == "valid"]) == 4  # 25, 50, 75 % and the end
    assert json.loads((tmp_path / "run" / "meta.json").read_text())["elapsed_s"] <= 6.0 + 0.5


def test_resume_after_a_signal_keeps_the_plan(tmp_path, monkeypatch):
    """A budgeted run stopped by a signal and resumed equals the same run uninterrupted."""
    import attnlab.training.loop as loop

    cfg = tiny_config("transformer", "train.max_steps=12", "train.log_every=1")
    loop.train(cfg, tmp_path / "straight", progress=False)
    real, calls = loop.sequence_loss, {"n": 0}

    def interrupting(*a, **k):
        calls["n"] += 1
        if calls["n"] == 6:
            os.kill(os.getpid(), signal.SIGINT)  # the loop finishes this step, saves and returns
        return real(*a, **k)

    monkeypatch.setattr(loop, "sequence_loss", interrupting)
    first = loop.train(cfg, tmp_path / "stopped", progress=False)
    monkeypatch.setattr(loop, "sequence_loss", real)
    assert first.stopped_by == "signal" and first.step < 12
    loop.train(cfg, tmp_path / "stopped", resume=True, progress=False)
    a = load_file(str(runs.resolve_checkpoint(tmp_path / "straight", "last") / runs.WEIGHTS))
    b = load_file(str(runs.resolve_checkpoint(tmp_path / "stopped", "last") / runs.WEIGHTS))
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.slow
def test_half_minute_numbers_run_ends_near_zero_lr(tmp_path):
    """The issue's check: `--max-minutes 0.5` on numbers with log_every=1 logs a last lr <= 15 % of its peak."""
    from attnlab.cli import main

    assert main(["train", "--model", "transformer", "--dataset", "numbers", "--out", str(tmp_path / "r"),
                 "--max-minutes", "0.5", "--quiet", "--threads", "1", "train.log_every=1",
                 "model.num_hiddens=64", "model.ffn_num_hiddens=128"]) == 0
    lrs = [r["lr"] for r in runs.read_metrics(tmp_path / "r") if r.get("event") == "train"]
    assert lrs[-1] <= 0.15 * max(lrs)
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert meta["elapsed_s"] <= 31.0


def test_resume_with_size_auto_keeps_the_saved_size(tmp_path, monkeypatch, fra_eng_zip):
    """An elastic restart reruns the command line (train.size=auto): the run keeps the tier it was built with."""
    import attnlab.training.loop as loop
    from attnlab import device

    monkeypatch.setattr(device, "measure_peak_gflops", lambda *a, **k: 64.0)
    cfg = C.apply_overrides(C.preset("transformer"), [
        "data.dataset=fra-eng", f"data.data_path={fra_eng_zip}", "data.max_pairs=2000", "train.max_minutes=0.02",
        "train.eval_max_sentences=4", "train.threads=1"])
    first = loop.train(cfg, tmp_path / "run", progress=False)
    assert C.load_toml(tmp_path / "run" / "config.toml").train.size == "tiny"
    monkeypatch.setattr(device, "measure_peak_gflops", lambda *a, **k: 5000.0)  # a probe that would pick `base`
    again = loop.train(C.apply_overrides(cfg, ["train.max_minutes=0.04"]), tmp_path / "run", resume=True,
                       progress=False)
    assert again.step >= first.step
    assert C.load_toml(tmp_path / "run" / "config.toml").model.num_hiddens == 128


def _average_points(plan: BudgetPlan, steps: int) -> list[int]:
    """The updates after which the loop saves a checkpoint for averaging, as ``fit`` asks the plan."""
    saved = []
    for step in range(1, steps + 1):
        if plan.after_update(step):
            plan.average_saved(step)
            saved.append(step)
    return saved


def test_average_points_fall_evenly_over_the_decay():
    plan = BudgetPlan.make(_train_cfg("train.max_steps=100"), 0)
    assert plan.decay_start == 81 and plan.factor(80) == 1.0 > plan.factor(81)  # 81 updates at the peak, then decay
    assert _average_points(plan, 100) == [84, 88, 92, 96]  # and the final checkpoint, after 100, is the fifth
    assert _average_points(BudgetPlan.make(_train_cfg("train.max_steps=100", "train.average_last=0"), 0), 100) == []
    assert _average_points(BudgetPlan.make(_train_cfg("train.max_steps=100", "train.average_last=1"), 0), 100) == []
    assert BudgetPlan.make(_train_cfg(), 0).decay_start is None  # no budget, no decay phase
    short = BudgetPlan.make(_train_cfg("train.max_steps=12"), 0)  # decays over 2 updates, after 11
    assert _average_points(short, 12) == [11]  # each point inside the decay, once; the final one is the 12th


def test_timed_run_saves_its_average_points_inside_the_final_decay():
    rng = random.Random(0)
    plan = BudgetPlan.make(_train_cfg("train.max_minutes=12"), 0)
    points, t, step, timed = [], 0.0, 0, 0.0
    while True:  # as _simulate, with the loop's average checkpoints
        if step > WARM_UPDATES:
            plan.observe(step, t, timed / (step - WARM_UPDATES))
        if plan.out_of_time(t):
            break
        dt = 2.1 * rng.uniform(0.6, 1.4)
        t, step = t + dt, step + 1
        timed += dt if step > WARM_UPDATES else 0.0
        if plan.after_update(step):
            plan.average_saved(step)
            points.append(step)
        if plan.due_validation(step):
            t += 10.0
            plan.validated(step, 10.0)
    start = plan.decay_start  # when the lr began to decay, as it happened
    assert start == plan.decay_began and len(points) == 4 and points[0] > start, (start, points, step)
    gaps = [b - a for a, b in zip([start, *points], [*points, step])]
    mean = sum(gaps) / len(gaps)  # evenly spread up to the last update, as the re-projected horizon allows
    assert all(0.5 * mean <= g <= 1.5 * mean for g in gaps), gaps
