"""Faults: SIGKILL mid-save, a full disk, Ctrl-C / SIGTERM during training — nothing saved is ever lost.

NaN/inf losses (skip, then stop naming the tensor) are covered by
tests/training/test_loop.py::test_nonfinite_losses_skip_then_stop (see README.md).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attnlab import config as C
from attnlab import runs
from tests.cli.test_cli import assert_one_line_error
from tests.conftest import tiny_config
from tests.reliability._helpers import copy_run, plan_note

ENV = {**os.environ, "ATTNLAB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}

# A process that saves checkpoints in a loop, every tensor filled with the step number, so a loaded
# checkpoint proves by its content which step it holds (and that it is not a mix of two).
SAVER = textwrap.dedent("""
    import sys
    import torch
    from torch import nn
    from attnlab import runs

    run, step = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(384, 384), nn.Linear(384, 384))  # ~1.2 MB of weights
    print("ready", flush=True)
    while True:
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(step)
        runs.save_checkpoint(run, step, model, {"step": step, "moments": torch.full((50_000,), float(step))})
        step += 1
""")


def _check_last(run: Path) -> int:
    """Verify LAST's checksums, load it, and check its content is all one step; return that step."""
    from torch import nn

    path = runs.resolve_checkpoint(run, "last")
    manifest = runs.verify_checkpoint(path)
    step = int(path.name.split("-")[1])
    assert manifest["step"] == step
    model = nn.Sequential(nn.Linear(384, 384), nn.Linear(384, 384))
    runs.load_weights(path, model)
    assert all(torch.all(p == step) for p in model.parameters()), path
    st = runs.load_state(path)
    assert st["step"] == step and torch.all(st["moments"] == step)
    return step


@pytest.mark.slow
def test_sigkill_during_save_twenty_times(tmp_path):
    """Pass: 20 times, a saver killed with SIGKILL at a random moment leaves a LAST checkpoint whose
    sha256 match its manifest and whose tensors are all of one step, never going backwards; the next
    save removes the half-written folder a kill left behind."""
    rng = random.Random(1234)
    run = tmp_path / "run"
    last, torn = 0, 0
    for _ in range(20):
        proc = subprocess.Popen(
            [sys.executable, "-c", SAVER, str(run), str(last + 1)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=ENV,
        )
        assert proc.stdout.readline().strip() == b"ready", proc.stderr.read()
        time.sleep(rng.uniform(0.02, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert proc.returncode == -signal.SIGKILL
        if not (run / "checkpoints" / "LAST").exists():
            continue  # killed before the first save completed: nothing was promised yet
        torn += any((run / "checkpoints").glob(".step-*"))
        step = _check_last(run)
        assert step >= last
        last = step
    assert last > 0
    print(f"\n{torn} of 20 kills left a half-written checkpoint folder behind; LAST always loaded")
    from torch import nn

    runs.save_checkpoint(run, last + 1, nn.Linear(2, 2), None)  # the next save cleans the leftovers
    assert not list((run / "checkpoints").glob(".step-*"))


DISK_FULL = textwrap.dedent("""
    import resource, signal, sys
    import torch
    from torch import nn
    from attnlab.errors import CheckpointError
    from attnlab import runs

    run = sys.argv[1]
    model = nn.Linear(200, 200)  # ~160 kB of weights
    runs.save_checkpoint(run, 1, model, {"step": 1}, best=True)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, 50_000))  # a "disk" that takes 50 kB per file
    try:
        runs.save_checkpoint(run, 2, model, {"step": 2})
    except CheckpointError as e:
        print(e)
        sys.exit(3)
""")


def test_disk_full_while_saving(tmp_path):
    """Pass: the save raises CheckpointError whose one line names the folder and the cause; the earlier
    checkpoint is byte-for-byte untouched and still LAST/BEST; no half-written folder remains."""
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", DISK_FULL, str(run)], capture_output=True, text=True, env=ENV, timeout=120
    )
    assert proc.returncode == 3, proc.stderr
    msg = proc.stdout.strip()
    assert "\n" not in msg
    assert f"could not save checkpoint step-0000002 in {run / 'checkpoints'}: File too large" in msg
    assert "earlier checkpoints are untouched" in msg
    root = run / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["BEST", "LAST", "step-0000001"]
    assert runs.resolve_checkpoint(run, "last").name == "step-0000001"
    runs.verify_checkpoint(root / "step-0000001")


def _limit_file_size(limit: int):
    def pre() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # SIG_IGN survives exec: writes fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return pre


@pytest.mark.slow
def test_disk_full_during_attnlab_train(tiny_runs, tmp_path):
    """Pass: `attnlab train --resume` whose next checkpoint cannot be written exits 2 with one line
    naming the checkpoint folder and the cause; the earlier checkpoint is untouched and still LAST."""
    run = copy_run(tiny_runs("transformer"), tmp_path / "run")
    before = runs.resolve_checkpoint(run, "last")
    files = {f: (before / f).read_bytes() for f in (runs.WEIGHTS, runs.STATE, runs.MANIFEST)}
    limit = 100_000  # above every log/config file of a tiny run, below its model.safetensors
    assert len(files[runs.WEIGHTS]) > limit > max(p.stat().st_size for p in run.glob("*.json*"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnlab",
            "train",
            "--resume",
            "--out",
            str(run),
            "--quiet",
            "--max-steps",
            "44",
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
        preexec_fn=_limit_file_size(limit),
    )
    plan, proc.stderr = plan_note(proc.stderr)  # 40 -> 44 updates: the resume says how its plan moves
    assert "40 updates -> 44 updates" in plan
    assert_one_line_error(  # the next save: the extended plan's decay checkpoint after 41 (train.average_last)
        proc, f"could not save checkpoint step-0000041 in {run / 'checkpoints'}: File too large"
    )
    assert runs.resolve_checkpoint(run, "last") == before
    assert {f: (before / f).read_bytes() for f in files} == files
    assert not list((run / "checkpoints").glob(".step-*"))


# ---------------------------------------------------------------------------------- SIGINT / SIGTERM

STEPS = 120


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """An uninterrupted tiny run of STEPS steps, and its config file (for the interrupted twins)."""
    from attnlab.training.loop import train

    root = tmp_path_factory.mktemp("straight")
    cfg = tiny_config("transformer", f"train.max_steps={STEPS}", "train.log_every=1")
    train(cfg, root / "run", progress=False)
    (root / "cfg.toml").write_text(C.dumps_toml(cfg))
    return root / "run", root / "cfg.toml"


def _train_losses(run: Path) -> list[float]:
    return [r["loss"] for r in runs.read_metrics(run) if r.get("event") == "train"]


def _logged_step(run: Path) -> int:
    try:
        lines = (run / runs.METRICS).read_text().splitlines()
    except OSError:
        return 0
    steps = [0]
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == "train":
            steps.append(rec["step"])
    return max(steps)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_during_train_then_resume_equals_uninterrupted(straight_run, tmp_path, sig):
    """Pass: a signal mid-training makes `attnlab train` exit 128 + the signal (130, 143) after writing a verified LAST
    checkpoint at the step it reached; `attnlab train --resume` then ends with weights and per-step
    losses identical to the uninterrupted run of the same total steps."""
    straight, cfg_file = straight_run
    run = tmp_path / "run"
    base = [sys.executable, "-m", "attnlab", "train", "--out", str(run), "--quiet"]
    proc = subprocess.Popen(
        [*base, "--model", "transformer", "--config", str(cfg_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    deadline = time.monotonic() + 240
    while _logged_step(run) < 5:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "training never started"
        time.sleep(0.02)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, (out, err)
    assert "interrupted" in out and "--resume" in out
    last = runs.resolve_checkpoint(run, "last")
    runs.verify_checkpoint(last)
    stopped_at = int(last.name.split("-")[1])
    assert 5 <= stopped_at < STEPS, stopped_at  # really interrupted, and the last step was kept
    assert not list((run / "checkpoints").glob(".step-*"))

    resumed = subprocess.run([*base, "--resume"], capture_output=True, text=True, env=ENV, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    a = load_file(str(runs.resolve_checkpoint(straight, "last") / runs.WEIGHTS))
    b = load_file(str(runs.resolve_checkpoint(run, "last") / runs.WEIGHTS))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert _train_losses(run) == _train_losses(straight)
