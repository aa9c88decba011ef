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
    w2 = World({1: 0.9, 2: 1.0})  # 10 % faster, window after window: kept once the check confirms it
    t2 = tuner(w2)
    w2.run(t2, 200)
    assert t2.n == 1 and w2.threads == 1 and [(c.old, c.new) for c in t2.changes] == [(2, 1)]
    assert t2.changes[0].speedup == pytest.approx(1 / 0.9)


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


@pytest.mark.parametrize("load", ["a burst over the first window", "a cost that drifts down"])
def test_a_win_is_checked_against_the_old_count_measured_again(load):
    """One thread is 10-20 % slower, but the window on two threads just before its try ran slow (a burst
    that spanned it, or a cost per unit that falls along the run): the try wins against that window alone,
    not against the mean of it and the old count measured again right after."""
    w = World({1: 1.0, 2: 0.83 if load.startswith("a burst") else 0.91})
    t = tuner(w)  # windows of 4 after 2 warm-up units

    def factor(i: int) -> float:
        return (1.5 if 2 <= i < 6 else 1.0) if load.startswith("a burst") else max(0.3, 1 - 0.03 * i)

    for i in range(30):
        t0 = t.begin()
        w.t += w.cost[w.threads] * 100 * factor(i)
        t.end(t0, 100)
    assert t.changes == [] and t.n == 2 and w.threads == 2
    assert w.applied[:3] == [2, 1, 2]  # it was tried, and won its window


def test_a_first_unit_three_times_as_slow_ends_the_try_at_once():
    w = World({1: 1.0, 2: 3.5})  # a busy neighbour: the second thread costs two and a half steps more
    t = tuner(w, start=1)
    w.run(t, 2 + 4 + 1)  # warm-up, a window on 1, and the one unit the try of 2 gets
    assert w.threads == 1 and t.n == 1 and t.tries == 1 and w.applied == [1, 2, 1]


class Load:
    """Fake load samples: each sample started answers the free cores ``free`` held when it started,
    after ``delay`` calls (None before)."""

    def __init__(self, free: int, delay: int = 0) -> None:
        self.free, self.delay, self.started = free, delay, 0

    def __call__(self):
        self.started += 1
        answer, calls = self.free, iter(range(10**9))
        return lambda: answer if next(calls) >= self.delay else None


def test_the_load_sample_sets_the_start_and_more_threads_wait_for_a_free_core():
    load = Load(1, delay=5)  # the sample answers at the third unit's end: one core is free
    w = World({1: 1.0, 2: 0.55})  # ...but the machine is in fact quiet
    t = tuner(w, sense=load)
    w.run(t, 3)
    assert t.sensed == 1 and w.threads == 1 and t.changes == []
    w.run(t, 20)
    assert t.n == 1 and w.applied.count(2) == 0  # no try of two threads while no core is free
    load.delay, load.free = 0, 2  # the next sample finds the second core free: it is tried at once
    w.run(t, 16)
    assert t.n == 2 and [(c.old, c.new, c.why) for c in t.changes] == [(1, 2, "free")]
    assert t.to_json()["free_at_start"] == 1
    busy = World({1: 1.0, 2: 5.0})
    t2 = tuner(busy, sense=Load(1))
    busy.run(t2, 60)
    assert t2.n == 1 and busy.applied.count(2) == 0  # the sample said no core was free: never tried
    quiet = World({1: 1.0, 2: 0.55})
    t3 = tuner(quiet, sense=Load(2, delay=1))
    quiet.run(t3, 10)
    assert t3.sensed == 2 and quiet.applied[:2] == [1, 2]  # one thread until it knows; all cores were free


def test_a_free_core_that_does_not_help_is_not_tried_again_at_every_window():
    load = Load(1)
    w = World({1: 1.0, 2: 1.5})  # two threads are slower even with both cores free
    t = tuner(w, sense=load)
    w.run(t, 20)
    load.free = 2
    w.run(t, 30)
    assert t.n == 1 and w.applied.count(2) == 1 and t.tries == 1  # one try, lost: not again...
    w.run(t, 200)
    assert t.n == 1 and 1 < w.applied.count(2) <= 5  # ...until the periodic search, which ignores the sample


def test_a_sample_that_never_sees_a_free_core_cannot_hold_the_count_down_for_good():
    w = World({1: 1.0, 2: 0.55})
    t = tuner(w, sense=Load(1))  # wrong: the machine is quiet
    w.run(t, 200)
    assert t.n == 2 and t.changes[-1].why == "recheck"


def test_a_sample_slower_than_a_window_still_rules_on_more_threads():
    """Decoding's windows can end before a sample's minimum time: the sample runs on over the next
    windows, and until it answers the last answer stands (it used to restart every window, never answer,
    and leave a jump free to try a thread on a busy core)."""
    load = Load(1, delay=3)  # a sample answers at its fourth reading: one window's end reads it once
    w = World({1: 2.0, 2: 10.0})
    t = tuner(w, sense=load)
    w.run(t, 20)
    assert t.sensed == 1 and t.n == 1
    w.cost[1] = 1.0  # one thread's cost falls: a jump, while no window's sample has answered
    w.run(t, 12)
    assert w.applied.count(2) == 0
    load.free, w.cost[2] = 2, 0.55  # a core comes free: the next sample started finds it
    w.run(t, 60)
    assert t.n == 2 and t.changes[-1].why == "free"


def test_a_cost_that_falls_tries_more_threads_only_with_a_core_free():
    load = Load(1)
    w = World({1: 2.0, 2: 6.0})
    t = tuner(w, sense=load)
    w.run(t, 20)
    w.cost[1] = 1.0  # one thread's cost falls: a jump, but the sample still sees no core free
    w.run(t, 12)
    assert w.applied.count(2) == 0 and t.n == 1


def test_a_try_slower_by_four_margins_over_half_a_window_ends_there():
    w = World({1: 1.3, 2: 1.0})  # one thread 30 % slower: clear after half a window, not a whole one
    t = ThreadTuner(2, window=8, warmup=2, recheck_every=1000, clock=w.clock, apply=w.apply)
    w.run(t, 2 + 8 + 1 + 4)  # warm-up, a window on 2, the switch's unit, half a window on 1
    assert w.threads == 2 and t.n == 2 and t.tries == 1
    w2 = World({1: 1.1, 2: 1.0})  # 10 % slower: within four margins, so it gets the whole window
    t2 = ThreadTuner(2, window=8, warmup=2, recheck_every=1000, clock=w2.clock, apply=w2.apply)
    w2.run(t2, 2 + 8 + 1 + 4)
    assert w2.threads == 1


def test_units_run_while_the_start_sample_is_pending_measure_nothing():
    w = World({1: 1.0, 2: 0.55})
    t = tuner(w, sense=Load(2, delay=40))  # a slow answer: a whole window passes on one thread meanwhile
    w.run(t, 20)
    assert t.sensed is None and t.tries == 0 and w.applied == [1]  # no search on a count about to change
    w.run(t, 25)
    assert t.sensed == 2 and w.threads == 2 and t.changes == []  # it starts where the sample says


def test_bursts_of_other_work_start_no_search():
    w = World({1: 1.0, 2: 0.55})
    t = tuner(w)
    w.run(t, 40)
    tries = t.tries
    real = w.run

    def bursty(tuner_, units, work=100.0):  # every fourth unit a burst: one window's median does not move
        for i in range(units):
            t0 = tuner_.begin()
            w.t += w.cost[w.threads] * work * (5 if i % 4 == 0 else 1)
            tuner_.end(t0, work)

    bursty(t, 30)
    assert t.tries == tries and t.n == 2
    w.run = real


def test_a_jump_up_on_one_thread_tries_no_more_threads():
    w = World({1: 1.0, 2: 3.0})
    t = tuner(w, start=1)
    w.run(t, 30)
    tries = t.tries
    w.cost[1] = 2.0  # a neighbour arrives: one thread's cost jumps; more threads cannot help
    w.run(t, 30)
    assert t.n == 1 and t.tries == tries and w.applied.count(2) == 1  # only the first search tried it


def test_bad_bounds_and_one_tuner_per_thread():
    with pytest.raises(ValueError):
        ThreadTuner(1, 2)
    made = []
    per = PerThread(lambda: made.append(1) or ThreadTuner(2, apply=lambda n: None))
    assert per.get() is per.get() and len(made) == 1
