"""The budget plan: how many updates a run can make, and the learning rate along them (the notes' §10).

A learner gives a budget in *minutes* (or steps, or epochs) on whatever machine they have. A schedule
tuned in steps on a fast machine then fails on a slow one: a 200-step warm-up is the whole of a
2.5-minute run there, and the lr never reaches its peak. So under ``train.schedule="auto"`` (the
default) a budgeted run plans its schedule on its **horizon**, the number of updates it will make:

* ``max_steps``: the horizon is known;  ``max_epochs``: it is the batches of those epochs;
* ``max_minutes``: the trainer times its updates (validation and saving excluded), and projects
  ``horizon = step + time left / seconds per update``, again at every update. The time left is the
  budget less what validation will still cost, so the final validation fits inside the budget.

The lr warms up linearly over a small share of the horizon (``train.warmup_frac``, at most
``train.warmup_steps`` updates), stays at its peak, and decays linearly to zero over the last
``train.decay_frac`` of the horizon (warmup-stable-decay, the default; ``train.schedule="linear"``
decays from the end of the warm-up instead). Measured against each other at the same budgets, the flat
stretch won every time (bench/RESULTS.md, Quality). A run with no budget
keeps the open-ended schedule of Vaswani et al. (warm-up, then 1/√t).

Validation of a budgeted run happens at shares of the horizon (``train.eval_frac``: 0.25 = at 25, 50
and 75 %; 0 = every ``train.eval_every`` updates, as in a run with no budget), plus once at the end. The plan is saved in every checkpoint, so ``--resume`` keeps it.

``train.average_last`` = N checkpoints fall evenly over the decay phase (the N-th is the final one), for
``attnlab average RUN --from-decay``: Vaswani et al. 2017 averaged converged weights, not the flat phase's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from attnlab.config import TrainConfig
from attnlab.i18n import _
from attnlab.training.schedules import lr_factor

#: the first updates allocate buffers and are slower; the rate is measured after these
WARM_UPDATES = 2
#: a validation's cost before one has been timed, as a share of the time budget (then: the last one's)
_VALID_COST_PRIOR = 0.02


@dataclass
class BudgetPlan:
    """The schedule of one run; ``factor(step)`` multiplies ``train.lr`` at 0-based update ``step``.

    ``horizon`` is the planned number of updates (None: open-ended). For a timed run it moves as the
    measured update rate does; :meth:`observe` updates it and :meth:`out_of_time` says when to stop.
    """

    shape: str  # "linear", "wsd" (budgeted); "inverse_sqrt", "constant", "cosine" (fixed in steps)
    cfg: TrainConfig
    fixed_horizon: int | None = None  # from max_steps / max_epochs
    budget_s: float = 0.0  # from max_minutes; 0 = none
    horizon: int | None = None
    sec_per_update: float = 0.0
    valid_cost_s: float = 0.0  # the last validation's time (0: none timed yet)
    evals_done: int = 0
    averages_done: int = 0  # decay-phase checkpoints for averaging saved so far (train.average_last)
    decay_began: int | None = None  # updates made before the first one at a decayed lr, once it came

    @classmethod
    def make(cls, cfg: TrainConfig, batches_per_epoch: int) -> BudgetPlan:
        limits = [n for n in (cfg.max_steps, cfg.max_epochs * batches_per_epoch) if n > 0]
        fixed = min(limits) if limits else None
        budget_s = cfg.max_minutes * 60.0
        budgeted = fixed is not None or budget_s > 0
        shape = cfg.schedule
        if shape == "auto":
            shape = "wsd" if budgeted else "inverse_sqrt"
        if shape in ("linear", "wsd") and not budgeted:
            shape = "inverse_sqrt"  # nothing to decay towards; TrainConfig says so in its comment
        return cls(shape, cfg, fixed, budget_s, fixed)

    # ------------------------------------------------------------------------------------- the lr

    @property
    def budgeted(self) -> bool:
        return self.shape in ("linear", "wsd")

    @property
    def warmup(self) -> int:
        if not self.budgeted:
            return self.cfg.warmup_steps
        if self.horizon is None:  # a timed run before its first updates are timed
            return self.cfg.warmup_steps
        share = max(1, round(self.cfg.warmup_frac * self.horizon))
        return min(share, self.cfg.warmup_steps) if self.cfg.warmup_steps else share

    def _span(self, horizon: int) -> int:
        """The updates over which the lr decays to 0."""
        if self.shape == "wsd":
            return max(1, round(self.cfg.decay_frac * horizon))
        return max(horizon - self.warmup, 1)

    @property
    def decay_start(self) -> int | None:
        """The updates made before the first one at a decayed lr: as it happened once it has (a timed run's
        horizon moves), else as the horizon projects it; None without a budget or a horizon yet."""
        if self.decay_began is not None:
            return self.decay_began
        if not self.budgeted or self.horizon is None:
            return None
        return self.horizon - self._span(self.horizon) + 1

    def factor(self, step: int) -> float:
        """Multiplier of ``train.lr`` for 0-based update ``step``."""
        if not self.budgeted:
            return lr_factor(step, self.cfg, self.shape)
        s, warm = step + 1, self.warmup
        if s <= warm:
            return s / warm
        if self.horizon is None:
            return 1.0
        left = max(self.horizon - step, 0)  # updates still to make, this one included
        return min(1.0, left / self._span(self.horizon))

    # ---------------------------------------------------------------------------------- the clock

    def observe(self, step: int, elapsed_s: float, sec_per_update: float) -> None:
        """Re-project a timed run's horizon after ``step`` updates: ``elapsed_s`` of the budget are
        spent (validation and saving included), an update takes ``sec_per_update`` (they excluded)."""
        if self.budget_s <= 0 or sec_per_update <= 0:
            return
        self.sec_per_update = sec_per_update
        left = self.budget_s - elapsed_s - self.reserve_s()
        projected = step + max(int(left / sec_per_update), 1)
        self.horizon = projected if self.fixed_horizon is None else min(projected, self.fixed_horizon)

    def reserve_s(self) -> float:
        """Time the validations still to come will take (the final one included)."""
        cost = self.valid_cost_s or _VALID_COST_PRIOR * self.budget_s
        return cost * (self.evals_left() + 1)

    def out_of_time(self, elapsed_s: float) -> bool:
        """A timed run stops when the next update would eat into the final validation's time."""
        if self.budget_s <= 0:
            return False
        cost = self.valid_cost_s or _VALID_COST_PRIOR * self.budget_s
        return elapsed_s + cost + 0.5 * self.sec_per_update >= self.budget_s

    # --------------------------------------------------------------------------------- validation

    def evals_left(self) -> int:
        if not self.budgeted or self.cfg.eval_frac <= 0:
            return 0
        total = math.ceil(1 / self.cfg.eval_frac) - 1  # 0.25 -> at 25, 50, 75 % (the end is separate)
        return max(total - self.evals_done, 0)

    def due_validation(self, step: int) -> bool:
        """Whether update ``step`` (1-based count of updates made) ends a share of the horizon."""
        if not self.budgeted or self.cfg.eval_frac <= 0:
            every = self.cfg.eval_every
            return bool(every and step % every == 0)
        if self.horizon is None or self.evals_left() == 0:
            return False
        return step >= (self.evals_done + 1) * self.cfg.eval_frac * self.horizon

    def validated(self, step: int, cost_s: float) -> None:
        """A validation after ``step`` updates took ``cost_s``; shares already passed count as done
        (a horizon that shrank must not set off one validation per update)."""
        self.valid_cost_s = cost_s
        share = self.cfg.eval_frac * (self.horizon or 0)
        passed = int(step / share) if self.budgeted and share > 0 else 0
        self.evals_done = max(self.evals_done + 1, passed)

    # ------------------------------------------------------------------------------ averaging

    def _points_passed(self, step: int) -> int:
        """How many of the ``train.average_last`` - 1 points of the decay the lr has passed after ``step``
        updates: point i comes when the lr's factor falls to 1 - i/N, evenly over the decay in updates and, at
        a steady speed, in time (a timed run's horizon moves; its lr is what the weights saw)."""
        n = self.cfg.average_last
        if n <= 1 or self.decay_began is None:
            return 0
        f = self.factor(step)
        return sum(f <= 1 - i / n + 1e-9 for i in range(1, n))

    def after_update(self, step: int) -> bool:
        """Called after each update (``step`` made): records when the decay began, and says whether a
        checkpoint for averaging is due (then call :meth:`average_saved`). The N-th is the final checkpoint."""
        if not self.budgeted or self.horizon is None:
            return False
        if self.decay_began is None and step >= self.warmup and self.factor(step) < 1.0:
            self.decay_began = step
        if self.fixed_horizon is not None and step >= self.fixed_horizon:
            return False  # the run's final checkpoint comes next anyway
        return self._points_passed(step) > self.averages_done

    def average_saved(self, step: int) -> None:
        """A checkpoint for averaging is being saved after ``step`` updates; points the lr passed at once (a
        short decay, a horizon that shrank) count as done, never as one checkpoint per update."""
        self.averages_done = max(self.averages_done + 1, self._points_passed(step))

    # ------------------------------------------------------------------------------------- resume

    def state_dict(self) -> dict[str, Any]:
        return {"shape": self.shape, "horizon": self.horizon, "sec_per_update": self.sec_per_update,
                "valid_cost_s": self.valid_cost_s, "evals_done": self.evals_done,
                "averages_done": self.averages_done, "decay_began": self.decay_began, "fixed_horizon": self.fixed_horizon, "budget_s": self.budget_s}

    def load_state_dict(self, state: dict[str, Any], step: int | None = None) -> str | None:
        """Continue the saved plan. The limits a resume gives (``--max-steps``, ``--max-minutes``) are the
        saved ones unless they were changed on purpose; then the run is extended (or cut) to them, and the
        return value says how the schedule changes at update ``step`` (None when nothing changes)."""
        if state.get("shape") != self.shape:
            return None  # a checkpoint written before the plan existed, or with another schedule
        old = BudgetPlan(self.shape, self.cfg, state.get("fixed_horizon", self.fixed_horizon),
                         state.get("budget_s", self.budget_s), state["horizon"])
        for key in ("horizon", "sec_per_update", "valid_cost_s", "evals_done"):
            setattr(self, key, state[key])
        # absent from checkpoints older than train.average_last
        self.averages_done, self.decay_began = state.get("averages_done", 0), state.get("decay_began")
        if self.fixed_horizon is not None and self.budget_s <= 0:
            self.horizon = self.fixed_horizon  # a step or epoch budget given anew on resume wins
        if (old.fixed_horizon, old.budget_s) == (self.fixed_horizon, self.budget_s):
            return None
        if self.budget_s > 0 and self.sec_per_update > 0 and step is not None:  # re-project the new time budget
            left = self.budget_s - (step * self.sec_per_update) - self.reserve_s()
            projected = step + max(int(left / self.sec_per_update), 1)
            self.horizon = projected if self.fixed_horizon is None else min(projected, self.fixed_horizon)
        if step is not None:  # a new decay phase: begun already (a cut) or to come; its passed points not saved late
            self.decay_began = None
            if self.horizon is not None and step >= self.warmup and self.factor(step) < 1.0:
                self.decay_began = self.horizon - self._span(self.horizon) + 1
            self.averages_done = self._points_passed(step)
        return self.change_from(old, step)

    def change_from(self, old: BudgetPlan, step: int | None) -> str:
        """One line: the old plan, the new one, and (at update ``step``) the learning rate's factor before and after."""
        line = _("--resume changes the plan: {old} -> {new}").format(old=old._limits(), new=self._limits())
        if self.budgeted and step is not None:
            line += _("; horizon {was} -> {now} updates; at update {step} the learning-rate factor goes from "
                      "{a:.3f} to {b:.3f}").format(was=old.horizon or "?", now=self.horizon or "?", step=step,
                                                   a=old.factor(step), b=self.factor(step))
            if self.shape == "wsd" and self.horizon:
                line += _(" (decay now from update {start})").format(
                    start=self.horizon - max(1, round(self.cfg.decay_frac * self.horizon)))
        return line

    def _limits(self) -> str:
        parts = [_("{n} updates").format(n=self.fixed_horizon)] if self.fixed_horizon else []
        parts += [_("{minutes:g} min").format(minutes=self.budget_s / 60)] if self.budget_s > 0 else []
        return ", ".join(parts) or _("no limit")

    def describe(self) -> str:
        if not self.budgeted:
            return _("schedule {shape}, warm-up {steps} updates (no budget to plan for)").format(
                shape=self.shape, steps=self.cfg.warmup_steps)
        what = (_("{minutes:g} min").format(minutes=self.budget_s / 60) if self.budget_s
                else _("{n} updates").format(n=self.fixed_horizon))
        shape = (_("linear decay to 0") if self.shape == "linear"
                 else _("flat, then decay over the last {share:.0%}").format(share=self.cfg.decay_frac))
        return _("budget {what}: warm-up {share:.0%} of the horizon, {shape} at its end").format(
            what=what, share=self.cfg.warmup_frac, shape=shape)
