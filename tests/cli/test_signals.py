"""Ctrl-C and SIGTERM stop every `attnlab` command: a training run saves its step, a command that trains
several models stops before the next one, and the exit status is 128 + the signal (130, 143)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnlab import runs
from tests.cli.test_cli import assert_one_line_error, attnlab

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX signals")

ENV = {**os.environ, "ATTNLAB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
#: How long a stopped command may take to end: the step under way, a checkpoint, the report. Generous: a
#: loaded 2-core machine; the budgets below would otherwise keep each command running for minutes.
STOP_BOUND_S = 90


def _start(*args: str) -> subprocess.Popen:
    """``attnlab ARGS`` with its stdin an open pipe (a command that reads it waits there)."""
    return subprocess.Popen([sys.executable, "-m", "attnlab", *args], env=ENV, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_training(proc: subprocess.Popen, run: Path, deadline_s: float = 300) -> None:
    """Until ``run`` has logged a training record (the loop is running, its signal flag installed)."""
    deadline = time.monotonic() + deadline_s
    while not any(r.get("event") == "train" for r in runs.read_metrics(run)):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"no training step logged after {deadline_s:g} s"
        time.sleep(0.1)


def _stop(proc: subprocess.Popen, sig: int) -> tuple[str, str, float]:
    proc.send_signal(sig)
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=STOP_BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running {STOP_BOUND_S} s after {signal.Signals(sig).name}: {err[-2000:]}")
    return out, err, time.monotonic() - t0


@pytest.mark.parametrize("minutes", ["0", "-1", "nan"])
def test_demo_refuses_no_time_budget(tmp_path, minutes):
    """`--max-minutes 0` meant no limit: only a signal ended the first model, and the second trained on."""
    out = tmp_path / "demo"
    assert_one_line_error(attnlab("demo", "--runs-dir", str(out), "--max-minutes", minutes, "--threads", "1",
                                  "--dataset", "numbers"), "needs a time budget")
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_demo_after_saving_its_first_model(tmp_path, sig):
    """Before the fix Ctrl-C stopped the first model only: the demo trained the second for its whole
    budget and exited 0 (SIGTERM likewise)."""
    out = tmp_path / "demo"
    proc = _start("demo", "--runs-dir", str(out), "--max-minutes", "2", "--threads", "1",
                  "--dataset", "numbers")
    try:
        _wait_for_training(proc, out / "bahdanau")
        stdout, stderr, _ = _stop(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + sig, (proc.returncode, stdout[-2000:], stderr[-2000:])
    assert "the demo stopped there" in stdout and "Traceback" not in stderr
    runs.verify_checkpoint(runs.resolve_checkpoint(out / "bahdanau", "last"))  # the trainer saved its step
    assert not (out / "transformer").exists()  # the second model never started


@pytest.mark.slow
def test_sigterm_stops_train_with_143(tmp_path):
    run = tmp_path / "run"
    proc = _start("train", "--model", "transformer", "--dataset", "numbers", "--out", str(run), "--quiet",
                  "--threads", "1", "--max-minutes", "5", "--size", "base", "model.num_hiddens=32",
                  "model.ffn_num_hiddens=64", "model.num_layers=1", "train.log_every=5", "train.eval_every=0",
                  "train.eval_frac=0", "train.save_every=0")
    try:
        _wait_for_training(proc, run)
        stdout, stderr, _ = _stop(proc, signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, (stdout[-2000:], stderr[-2000:])
    assert "interrupted: saved the last checkpoint" in stdout
    runs.verify_checkpoint(runs.resolve_checkpoint(run, "last"))


def test_sigterm_stops_a_command_outside_training_with_143(tiny_runs):
    """Outside the training loop SIGTERM killed the process outright (status -15: no `finally`, no line)."""
    proc = _start("translate", str(tiny_runs("transformer")), "--verbose")  # then waits for lines on stdin
    try:
        deadline = time.monotonic() + 120
        line = ""
        while "loaded" not in line:  # the command is running (its handlers installed), reading stdin
            assert proc.poll() is None and time.monotonic() < deadline, line
            line = proc.stderr.readline()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=STOP_BOUND_S)
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 143, rest
    assert rest.strip().splitlines() == ["interrupted by SIGTERM"], rest
