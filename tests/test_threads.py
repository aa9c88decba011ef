"""The thread controller's decisions on a simulated clock: no timing is measured, only what it chooses."""

from __future__ import annotations

import pytest

from attnlab.threads import PerThread, ThreadTuner


class World:
    """A fake machine: ``cost[n]`` seconds per unit of work on ``n`` threads; the tuner's clock and setter."""

    def __init__(self, cost: dict[int, float]) -> None:
        self.cost, self.t, self.applied = dict(cost), 0.0, []

    def clock(self) -> float:
        return self.t

    def apply(self, n: int) -> None:
        self.applied.append(n)

    @property
    def threads(self) -> int:
        return self.applied[-1]

    def run(self, tuner: ThreadTuner, units: int, work: float = 100.0) -> None:
        for i in range(units):
            t0 = tuner.begin()
            w = work * (1 + (i % 3))  # batches differ in size: the tuner compares cost per unit of work
            self.t += self.cost[self.threads] * w
            tuner.end(t0, w)


def tuner(world: World, hi: int = 2, lo: int = 1, **kw) -> ThreadTuner:
    return ThreadTuner(hi, lo, window=4, warmup=2, recheck_every=40, clock=world.clock, apply=world.apply, **kw)


def test_a_quiet_machine_keeps_its_threads():
    w = World({1: 1.0, 2: 0.55})
    t = tuner(w)
    w.run(t, 300)
    assert w.threads == 2 and t.n == 2 and t.changes == []
    assert t.tries >= 2  # it did look, at the start and again later
    assert 1 in w.applied


def test_fewer_threads_must_be_more_than_the_margin_faster():
    w = World({1: 0.97, 2: 1.0})  # one thread 3 % faster: noise, not contention
    t = tuner(w)
    w.run(t, 200)
    assert t.n == 2 and w.threads == 2 and t.changes == []


def test_it_switches_when_the_other_count_is_faster():
    w = World({1: 1.0, 2: 3.0})  # a busy neighbour: two threads wait for each other
    t = tuner(w)
    w.run(t, 40)
    assert t.n == 1 and w.threads == 1
    (c,) = t.changes
    assert (c.old, c.new, c.why) == (2, 1, "start") and c.speedup == pytest.approx(3.0)
    assert t.to_json()["changes"][0]["new"] == 1 and t.to_json()["final"] == 1


def test_it_rechecks_after_a_jump_and_periodically():
    w = World({1: 1.0, 2: 0.55})
    t = tuner(w)
    w.run(t, 60)
    assert t.n == 2
    w.cost[2] = 4.0  # a neighbour arrives: the step time jumps
    w.run(t, 20)
    assert t.n == 1 and t.changes[-1].why == "jump"
    w.cost[2] = 0.55  # it leaves; one thread's cost does not move, so only a periodic re-check sees it
    w.run(t, 400)
    assert t.n == 2 and w.threads == 2
    assert [(c.old, c.new) for c in t.changes] == [(2, 1), (1, 2)] and t.changes[-1].why == "recheck"


def test_it_respects_the_minimum_and_the_maximum():
    w = World({1: 0.5, 2: 1.0, 3: 2.0, 4: 4.0})  # fewer is always faster
    t = tuner(w, hi=4, lo=2)
    w.run(t, 300)
    assert t.n == 2 and min(w.applied) == 2 and max(w.applied) == 4
    assert [(c.old, c.new) for c in t.changes] == [(4, 3), (3, 2)]
    w2 = World({1: 4.0, 2: 2.0, 3: 1.0})  # more is always faster; it starts low and may not pass 3
    t2 = tuner(w2, hi=3, start=1)
    w2.run(t2, 600)
    assert t2.n == 3 and max(w2.applied) == 3


def test_a_try_that_is_clearly_slower_is_cut_short():
    w = World({1: 20.0, 2: 1.0})
    t = tuner(w)
    w.run(t, 2 + 4 + 1 + 2)  # warm-up, a window on 2, the change's settling unit, two units on 1
    assert w.threads == 2 and t.n == 2


def test_bad_bounds_and_one_tuner_per_thread():
    with pytest.raises(ValueError):
        ThreadTuner(1, 2)
    made = []
    per = PerThread(lambda: made.append(1) or ThreadTuner(2, apply=lambda n: None))
    assert per.get() is per.get() and len(made) == 1
