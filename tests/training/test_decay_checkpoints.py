"""train.average_last: a budgeted run keeps checkpoints spread over its lr's decay phase, for `attnlab average
--from-decay`, and a resume across one of them equals the run uninterrupted (same weights, same checkpoints)."""

from __future__ import annotations

import os
import signal

import pytest
import torch
from safetensors.torch import load_file

from attnlab import runs
from tests.conftest import tiny_config

# 30 updates, the last 5 at a decaying lr (after 25 at the peak): the lr's factor falls to 0.8, 0.6, 0.4 and 0.2
# before updates 27, 28, 29 and 30, so checkpoints after 26, 27, 28, 29 and the final 30;
# save_every=10 with keep_checkpoints=1 rotates 10 away and keeps 20.
CFG = ("train.max_steps=30", "train.save_every=10", "train.keep_checkpoints=1", "train.average_last=5")
EXPECTED = [20, 26, 27, 28, 29, 30]


def _steps(run) -> list[int]:
    return [runs.step_of(p.name) for p in runs.step_checkpoints(run)]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    from attnlab.training import loop

    run = tmp_path_factory.mktemp("decay") / "straight"
    loop.train(tiny_config("transformer", *CFG), run, progress=False)
    return run


def test_a_step_budget_keeps_checkpoints_inside_the_decay(straight):
    assert runs.run_decay_start(straight) == 25
    assert _steps(straight) == EXPECTED
    assert [runs.step_of(p.name) for p in runs.decay_checkpoints(straight)] == EXPECTED[1:]


def test_resume_across_a_decay_checkpoint_equals_uninterrupted(straight, tmp_path, monkeypatch):
    from attnlab.training import loop

    cfg = tiny_config("transformer", *CFG)
    real, calls = loop.sequence_loss, {"n": 0}

    def interrupting(*a, **k):
        calls["n"] += 1
        if calls["n"] == 26:  # update 26, itself a decay checkpoint: the loop saves it, then stops
            os.kill(os.getpid(), signal.SIGINT)
        return real(*a, **k)

    monkeypatch.setattr(loop, "sequence_loss", interrupting)
    first = loop.train(cfg, tmp_path / "stopped", progress=False)
    monkeypatch.setattr(loop, "sequence_loss", real)
    assert (first.stopped_by, first.step) == ("signal", 26)
    loop.train(cfg, tmp_path / "stopped", resume=True, progress=False)
    assert _steps(tmp_path / "stopped") == EXPECTED
    for a, b in zip(runs.step_checkpoints(straight), runs.step_checkpoints(tmp_path / "stopped")):
        wa, wb = load_file(str(a / runs.WEIGHTS)), load_file(str(b / runs.WEIGHTS))
        assert all(torch.equal(wa[k], wb[k]) for k in wa), a.name
