"""Training adapts its thread count (attnlab/threads.py) and says so in meta.json; an explicit count stays."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.threads import ThreadTuner
from attnlab.training import session
from attnlab.training.loop import train
from tests.conftest import tiny_config


@pytest.fixture
def one_thread_after():
    # The tuner starts on the count in use (session.thread_tuner), which is process-wide: an earlier test's
    # in-process `attnlab train` (train.threads=0 by default) can leave it at 2, and a tuner that starts on
    # its maximum has nothing to change. Start from the conftest's one, and leave it so for later tests.
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(1)


class FakeMachine:
    """Two threads 1000 times faster than one, on a clock that moves only when the tuner reads it."""

    def __init__(self) -> None:
        self.t, self.n, self.applied = 0.0, 1, []

    def clock(self) -> float:
        self.t += {1: 1000.0, 2: 1.0}[self.n]
        return self.t

    def apply(self, n: int) -> None:
        self.n = n
        self.applied.append(n)


def test_training_records_the_tuners_decisions_in_meta(tmp_path, monkeypatch, one_thread_after):
    fake = FakeMachine()
    monkeypatch.setattr(session, "cpu_threads", lambda: 2)  # the same bounds on a one-CPU machine
    monkeypatch.setattr(session, "idle_sampler", lambda: (lambda: 1))  # the load sample: one core free
    monkeypatch.setattr(session, "ThreadTuner", lambda most, start, sense: ThreadTuner(
        most, start=start, window=2, warmup=1, clock=fake.clock, apply=fake.apply, sense=sense))
    res = train(tiny_config("transformer", "train.threads=0", "train.max_steps=8"), tmp_path / "run", progress=False)
    rec = json.loads((tmp_path / "run" / "meta.json").read_text())["thread_tuning"]
    assert rec["mode"] == "auto" and (rec["min"], rec["max"]) == (1, 2) and rec["final"] == 2
    assert rec["free_at_start"] == 1
    (change,) = rec["changes"]
    assert (change["old"], change["new"], change["why"]) == (1, 2, "start") and change["speedup"] > 100
    assert fake.applied[0] == 1 and fake.applied[-1] == 2
    assert "1 → 2" in res.threads


def test_an_explicit_thread_count_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(session, "ThreadTuner", lambda *a, **k: pytest.fail("train.threads=1 must not adapt"))
    res = train(tiny_config("transformer", "train.threads=1", "train.max_steps=3"), tmp_path / "run", progress=False)
    rec = json.loads((tmp_path / "run" / "meta.json").read_text())["thread_tuning"]
    assert rec == {"mode": "fixed", "threads": 1} and res.threads == ""
