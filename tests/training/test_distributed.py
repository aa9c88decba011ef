"""Data-parallel training (DDP under torchrun): batch sharding, equivalence with one process, elastic restart.

The slow tests start real torchrun jobs: 2 CPU processes, gloo, tiny configs on the `numbers` task.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

from attnlab import config as config_mod
from attnlab import runs
from attnlab.data import corpus
from attnlab.data.batching import TokenBatchSampler
from attnlab.errors import AttnlabError
from attnlab.training import distributed as D
from attnlab.training import launch
from attnlab.training.loop import train
from tests.conftest import tiny_config
from tests.data.test_batching import LENGTHS, check_epoch

# ------------------------------------------------------------------------------- sharding (fast)

rng = np.random.default_rng(0)
SRC = rng.integers(1, 12, size=157).tolist()
TGT = rng.integers(1, 14, size=157).tolist()


@pytest.mark.parametrize("world", [1, 2, 3])
def test_global_batches_are_one_process_batches_with_world_times_the_budget(world):
    single = TokenBatchSampler(SRC, TGT, 40 * world, 8 * world, shuffle=True, seed=5)
    for e in range(3):
        assert D.epoch_batches(SRC, TGT, 40, 8, 5, e, world) == single.epoch(e)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_every_pair_is_seen_exactly_once_per_epoch_across_ranks(world):
    for e in range(3):
        seen: list[int] = []
        for batch in D.epoch_batches(SRC, TGT, 40, 8, 5, e, world):
            parts = [D.shard(batch, r, world) for r in range(world)]
            assert sum(real for _, real in parts) == min(world, len(batch))  # fillers only when short
            for idx, real in parts:
                if real:
                    seen += idx
                    widths = [max(SRC[i], TGT[i]) + 1 for i in idx]
                    assert len(idx) * max(widths) <= 40 + max(widths)  # per-rank budget, at most one row over
        assert sorted(seen) == list(range(len(SRC)))


@settings(max_examples=60, deadline=None)
@given(LENGTHS, st.integers(41, 400), st.integers(1, 64), st.integers(0, 5), st.integers(1, 5))
def test_rank_sharding_covers_everything_once_with_equal_counts(lengths, budget, cap, seed, world):
    """Any lengths, budget and world size: every rank has rows in every global batch (the same
    number of steps, so no rank waits at a collective) and every pair is trained on exactly once."""
    src = [a for a, _ in lengths]
    tgt = [b for _, b in lengths]
    batches = D.epoch_batches(src, tgt, budget, cap, seed, 2, world)
    check_epoch(batches, src, tgt, budget * world, cap * world)  # the global batches keep the global budget
    per_rank = [[D.shard(batch, r, world) for batch in batches] for r in range(world)]
    assert all(len(idx) >= 1 for steps in per_rank for idx, _ in steps)  # equal step counts on every rank
    seen = Counter(i for steps in per_rank for idx, real in steps if real for i in idx)
    assert set(seen) == set(range(len(lengths))) and all(c == 1 for c in seen.values())
    for batch, parts in zip(batches, zip(*per_rank)):
        assert sum(real for _, real in parts) == min(world, len(batch))  # fillers only when short
        widest = max(max(src[i], tgt[i]) + 1 for i in batch)
        for idx, _ in parts:
            assert len(idx) <= cap and len(idx) * widest <= budget + widest  # at most one row over


@pytest.mark.parametrize("worlds", [(2, 1), (1, 3), (3, 2, 4)])
def test_resume_with_another_world_size_still_sees_each_pair_once(worlds):
    """Stop after a few global batches, resume with another world size (twice for the 3-tuple)."""
    n, e, exclude, seen = len(SRC), 1, None, []
    for world in worlds[:-1]:
        batches = D.epoch_batches(SRC, TGT, 40, 8, 5, e, world, exclude)
        done = 2
        seen += [i for b in batches[:done] for i in b]
        exclude = D.consumed_mask(n, batches, done, exclude)
        assert exclude.sum() == len(seen)
    rest = D.epoch_batches(SRC, TGT, 40, 8, 5, e, worlds[-1], exclude)
    seen += [i for b in rest for i in b]
    assert sorted(seen) == list(range(n))


def test_a_pair_wider_than_the_per_process_budget_is_refused():
    with pytest.raises(ValueError, match="batch_tokens=10"):
        D.epoch_batches([3, 20], [3, 4], 10, 8, 0, 0, world=2)


def test_single_process_helpers_degrade_gracefully():
    assert not D.is_distributed() and D.rank() == 0 and D.world_size() == 1 and D.is_main()
    assert D.sum_floats(3, 4.5) == [3.0, 4.5]
    assert D.broadcast_object({"a": 1}) == {"a": 1} and D.gather_objects(7) == [7]
    t = torch.tensor([2.0])
    assert D.all_reduce_sum(t) is t and t.item() == 2.0
    dev, created = D.setup(torch.device("cpu"))  # no torchrun variables: nothing to join
    assert dev == torch.device("cpu") and not created


def test_timeout_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("ATTNLAB_DIST_TIMEOUT", raising=False)
    assert D.timeout() == datetime.timedelta(seconds=1800)
    monkeypatch.setenv("ATTNLAB_DIST_TIMEOUT", "7.5")
    assert D.timeout() == datetime.timedelta(seconds=7.5)
    for bad in ("soon", "0", "-3"):
        monkeypatch.setenv("ATTNLAB_DIST_TIMEOUT", bad)
        with pytest.raises(AttnlabError, match="ATTNLAB_DIST_TIMEOUT"):
            D.timeout()


def _fake_exit(monkeypatch) -> list[int]:
    """os._exit recorded instead of done (end_process then returns, and so does main)."""
    codes: list[int] = []
    monkeypatch.setattr(os, "_exit", codes.append)
    return codes


def test_a_process_that_joined_no_group_returns_from_main(monkeypatch, tmp_path):
    from attnlab import cli

    codes = _fake_exit(monkeypatch)
    assert cli.main(["translate", str(tmp_path / "nowhere"), "hello ."]) == 2
    assert codes == []


def test_a_worker_ends_with_the_commands_code_without_finalizing(monkeypatch, tmp_path, capsys):
    """A torchrun worker's mistake (2), and its bug (1, with the traceback), both end in os._exit."""
    from attnlab import cli

    codes = _fake_exit(monkeypatch)
    monkeypatch.setattr(D, "_joined", True)
    assert cli.main(["translate", str(tmp_path / "nowhere"), "hello ."]) == 2
    assert codes == [2] and "error:" in capsys.readouterr().err

    def bug(argv):
        raise RuntimeError("index out of range in self")  # a lost peer is one line instead: test_runs_not_mixed.py

    monkeypatch.setattr(cli, "_main", bug)
    assert cli.main([]) == 1
    assert codes == [2, 1]
    err = capsys.readouterr().err
    assert "Traceback" in err and "index out of range in self" in err


def test_a_bug_outside_a_worker_keeps_its_traceback(monkeypatch):
    from attnlab import cli

    codes = _fake_exit(monkeypatch)
    monkeypatch.setattr(cli, "_main", lambda argv: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        cli.main([])
    assert codes == []


def test_threads_are_shared_among_local_processes(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert D.threads_per_process() == max(1, cores // 2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(4 * cores))
    assert D.threads_per_process() == 1


def test_launcher_command_line(monkeypatch):
    argv = ["train", "--nproc", "2", "--model", "transformer", "--out", "r", "--nproc=3", "train.lr=1e-3"]
    assert launch.strip_nproc(argv) == ["train", "--model", "transformer", "--out", "r", "train.lr=1e-3"]
    cmd = launch.torchrun_command(2, argv, max_restarts=1)
    assert cmd[:3] == [sys.executable, "-m", "attnlab.training.launch"]  # torchrun's main (launch.torchrun_main)
    assert "--standalone" in cmd and "--nproc-per-node=2" in cmd and "--max-restarts=1" in cmd
    assert cmd[cmd.index("-m", 3) + 1 :] == ["attnlab", *launch.strip_nproc(argv)]
    with pytest.raises(AttnlabError, match="at least 1"):
        launch.launch_nproc(0, argv)
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(AttnlabError, match="torchrun worker"):
        launch.launch_nproc(2, argv)


def test_nproc_is_checked_against_the_cores_and_the_gpus(monkeypatch):
    """0 and 1 mean this process alone (the help says so); a negative count, or more workers than CPU
    cores (on the CPU) or GPUs (on CUDA), is one line naming the count. -1 used to train as one process
    and --nproc 64 on 2 cores started 64 workers."""
    assert launch.processes(0, "cpu") == launch.processes(1, "cpu") == 1
    with pytest.raises(AttnlabError, match=r"--nproc -1 is negative") as err:
        launch.processes(-1, "cpu")
    assert "\n" not in str(err.value)
    monkeypatch.setattr(launch, "usable_cores", lambda: 2)
    assert launch.processes(2, "cpu") == 2
    with pytest.raises(AttnlabError, match=r"--nproc 64 is more than the 2 CPU cores .* use --nproc 2 or fewer"):
        launch.processes(64, "cpu")
    import attnlab.device

    monkeypatch.setattr(attnlab.device, "pick_device", lambda name: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(AttnlabError, match=r"--nproc 2 is more than the 1 GPU visible"):
        launch.processes(2, "auto")


@pytest.mark.parametrize("nproc, needle", [("-1", "--nproc -1 is negative"), ("64", "--nproc 64 is more than the 2 CPU")])
def test_train_refuses_a_bad_nproc_before_starting_anything(tmp_path, monkeypatch, capsys, nproc, needle):
    from attnlab.cli import main

    started = []
    monkeypatch.setattr(launch, "usable_cores", lambda: 2)
    monkeypatch.setattr(launch, "launch_nproc", lambda *a, **k: started.append(a) or 0)
    out = tmp_path / "run"
    argv = ["train", "--model", "transformer", "--dataset", "numbers", "--out", str(out), "--nproc", nproc,
            "--quiet", "--size", "base", "train.device=cpu", "train.max_steps=1"]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    assert not started and not out.exists()


# ------------------------------------------------------------------------- real torchrun jobs (slow)

# PYTHONFAULTHANDLER: a worker that dies by a signal prints every thread's Python stack into the job's output.
ENV = {**os.environ, "ATTNLAB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}


def _write_config(cfg, path: Path) -> Path:
    path.write_text(config_mod.dumps_toml(cfg))
    return path


def _attnlab_train(cfg, out: Path, tmp: Path, *, nproc: int = 0, resume: bool = False) -> list[str]:
    args = [
        "train",
        "--config",
        str(_write_config(cfg, tmp / f"{out.name}.toml")),
        "--out",
        str(out),
        "--quiet",
    ]
    if not resume:
        args += ["--model", cfg.model.kind]
    else:
        args += ["--resume"]
    return args + ([f"--nproc={nproc}"] if nproc else [])


def _torchrun(args: list[str], *, max_restarts: int = 0) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        f"--max-restarts={max_restarts}",
        "-m",
        "attnlab",
        *args,
    ]


def _run(cmd: list[str], timeout: float = 120, env=None) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, env=env or ENV, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    return res


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(runs.resolve_checkpoint(run, "last") / runs.WEIGHTS))


def _train_losses(run: Path) -> list[float]:
    return [r["loss"] for r in runs.read_metrics(run) if r.get("event") == "train"]


@pytest.mark.slow
def test_two_processes_with_batch_b_equal_one_process_with_batch_2b(tmp_path):
    from attnlab.evaluation.evaluate import evaluate_split
    from attnlab.translator import Translator

    # Bahdanau, not the Transformer: a Transformer's key-projection bias has an exactly-zero gradient
    # (softmax ignores a shift shared by all of a query's scores), so Adam turns the rounding noise of
    # the summation order into lr-sized steps there and only there — a property of Adam, not of DDP.
    extra = (
        "model.dropout=0",
        "train.max_steps=8",
        "train.log_every=2",
        "train.eval_every=4",
        "train.lr=1e-2",
    )
    one = tiny_config("bahdanau", "data.batch_tokens=600", *extra)
    two = tiny_config("bahdanau", "data.batch_tokens=300", *extra)
    train(one, tmp_path / "one", progress=False)
    _run([sys.executable, "-m", "attnlab", *_attnlab_train(two, tmp_path / "two", tmp_path, nproc=2)])

    meta = runs.read_run(tmp_path / "two").meta
    assert meta["world_size"] == 2 and meta["steps"] == 8
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-5, msg=k)
    torch.testing.assert_close(
        _train_losses(tmp_path / "two"), _train_losses(tmp_path / "one"), rtol=1e-5, atol=0
    )
    va = [r for r in runs.read_metrics(tmp_path / "one") if r["event"] == "valid"]
    vb = [r for r in runs.read_metrics(tmp_path / "two") if r["event"] == "valid"]
    assert [r["step"] for r in va] == [r["step"] for r in vb] == [4, 8]  # once per validation, rank 0 only
    for ra, rb in zip(va, vb):
        assert rb["valid_bleu"] == ra["valid_bleu"] and rb["valid_chrf"] == ra["valid_chrf"]
        assert rb["valid_loss"] == pytest.approx(ra["valid_loss"], rel=1e-5)
    assert vb[-1]["valid_chrf"] > 0  # the figures compared are not vacuous

    prepared = corpus.prepare(one.data)
    ta = evaluate_split(Translator.from_run(tmp_path / "one", "last"), prepared.splits["test"])
    tb = evaluate_split(Translator.from_run(tmp_path / "two", "last"), prepared.splits["test"])
    assert tb["hypotheses"] == ta["hypotheses"] and tb["bleu"] == ta["bleu"] and tb["chrf"] == ta["chrf"]


@pytest.mark.slow
def test_resume_on_one_process_finishes_the_epoch_started_on_two(tmp_path):
    """2 processes stop mid-epoch; 1 process resumes: every training pair seen exactly once in the epoch."""
    cfg = tiny_config("transformer", "data.batch_tokens=300", "train.max_steps=2")
    run = tmp_path / "run"
    _run(_torchrun(_attnlab_train(cfg, run, tmp_path)))
    st = runs.load_state(runs.resolve_checkpoint(run, "last"))
    assert st["world_size"] == 2 and st["epoch"] == 0 and st["batch_in_epoch"] == 2
    assert len(st["rng"]) == 2  # one RNG state per rank
    train_split = corpus.prepare(cfg.data).splits["train"]
    n = len(train_split.src)
    first = D.epoch_batches(
        [len(s) for s in train_split.src],
        [len(t) for t in train_split.tgt],
        300,
        cfg.data.max_batch_size,
        cfg.train.seed,
        0,
        2,
    )
    assert st["examples_seen"] == len(first[0]) + len(first[1]) < n

    res = train(
        tiny_config("transformer", "data.batch_tokens=300", "train.max_epochs=1"),
        run,
        resume=True,
        progress=False,
    )
    assert res.stopped_by == "max_epochs" and res.epoch == 1
    assert res.examples_seen == n
    st = runs.load_state(runs.resolve_checkpoint(run, "last"))
    assert st["tokens_seen"] == sum(len(t) + 1 for t in train_split.tgt)  # each target once, with its <eos>
    resumes = [r for r in runs.read_metrics(run) if r.get("event") == "resume"]
    assert resumes == [
        {"event": "resume", "step": 2, "epoch": 0, "world_size": 1, "saved_world_size": 2, "restart": 0}
    ]


def _workers(agent_pid: int) -> dict[int, int]:
    """rank -> pid of the worker processes torchrun (pid ``agent_pid``) started."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid != agent_pid:
                continue
            env = dict(kv.split("=", 1) for kv in (entry / "environ").read_text().split("\0") if "=" in kv)
        except (OSError, ValueError, IndexError):
            continue
        if "RANK" in env:
            out[int(env["RANK"])] = int(entry.name)
    return out


# Deadlines of the torchrun jobs below. Generous: on 2 loaded cores (the rest of the suite, niced)
# starting torchrun and two workers alone took over 75 s, and a restarted round's 160 steps 80 s; a
# tighter bound made a healthy job look hung. Bounded all the same: a real hang still fails.
JOB_DEADLINE_S = float(os.environ.get("ATTNLAB_TEST_JOB_DEADLINE", "300"))


def _start_and_wait_for_checkpoint(
    cmd: list[str], run: Path, env=None
) -> tuple[subprocess.Popen, dict[int, int]]:
    proc = subprocess.Popen(cmd, env=env or ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + JOB_DEADLINE_S
    while not (run / "checkpoints" / "LAST").is_file():
        if proc.poll() is not None:
            raise AssertionError(proc.communicate()[0][-5000:])
        if time.monotonic() > deadline:
            _kill_job(proc)
            raise AssertionError(f"no checkpoint after {JOB_DEADLINE_S:g} s")
        time.sleep(0.02)
    workers = _workers(proc.pid)
    assert sorted(workers) == [0, 1], workers
    return proc, workers


def _kill_job(proc: subprocess.Popen) -> None:
    """SIGKILL torchrun (pid ``proc.pid``) and its workers, each in a session of its own, if still there."""
    if proc.poll() is not None:
        return
    for pid in _workers(proc.pid).values():
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    proc.kill()
    proc.communicate()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the workers through /proc")
@pytest.mark.parametrize("fresh_store", [False, True], ids=["shared-agent-store", "fresh-store-per-round"])
def test_killed_worker_restarts_from_the_last_checkpoint_and_finishes(tmp_path, fresh_store):
    """torchrun's default (workers of every attempt share the agent's store: attnlab prefixes its keys
    per attempt) and TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (what --nproc sets: a fresh store per round)."""
    from attnlab.translator import Translator

    cfg = tiny_config(
        "transformer",
        "data.batch_tokens=300",
        "train.max_steps=200",
        "train.save_every=40",
        "train.log_every=20",
    )
    run = tmp_path / "run"
    env = {**ENV, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1" if fresh_store else "0"}
    proc, workers = _start_and_wait_for_checkpoint(
        _torchrun(_attnlab_train(cfg, run, tmp_path), max_restarts=1), run, env
    )
    try:
        os.kill(workers[1], signal.SIGKILL)
        out, _ = proc.communicate(timeout=JOB_DEADLINE_S)
    finally:
        _kill_job(proc)
    assert proc.returncode == 0, out[-5000:]

    metrics = runs.read_metrics(run)
    resumes = [r for r in metrics if r.get("event") == "resume"]
    assert len(resumes) == 1 and resumes[0]["restart"] == 1 and resumes[0]["world_size"] == 2
    assert 40 <= resumes[0]["step"] < 200 and resumes[0]["step"] % 40 == 0  # from a saved step, mid-run
    steps = [r["step"] for r in metrics if r.get("event") == "train"]
    assert steps == list(range(20, 201, 20))  # work lost with the killed worker is logged once, redone
    meta = runs.read_run(run).meta
    assert meta["steps"] == 200 and meta["stopped_by"] == "max_steps"
    tr = Translator.from_run(run, "last")
    assert runs.verify_checkpoint(tr.checkpoint)["step"] == 200
    assert len(tr.translate(["twenty one"])) == 1


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the workers through /proc")
def test_a_hung_peer_makes_the_job_fail_within_the_timeout(tmp_path):
    cfg = tiny_config("transformer", "data.batch_tokens=300", "train.max_steps=100000", "train.save_every=40")
    run = tmp_path / "run"
    env = {**ENV, "ATTNLAB_DIST_TIMEOUT": "6"}
    proc, workers = _start_and_wait_for_checkpoint(_torchrun(_attnlab_train(cfg, run, tmp_path)), run, env)
    os.kill(workers[1], signal.SIGSTOP)  # hung: alive, holding its sockets, never answering
    t0 = time.monotonic()
    try:
        while Path(f"/proc/{workers[0]}").exists() and time.monotonic() - t0 < 40:
            time.sleep(0.1)
        waited = time.monotonic() - t0
    finally:
        os.kill(workers[1], signal.SIGCONT)  # let torchrun's SIGTERM through so the job ends quickly
    out, _ = proc.communicate(timeout=60)
    assert waited < 40, "rank 0 did not give up on its stopped peer"
    assert proc.returncode != 0
    assert "Timed out" in out or "timed out" in out.lower(), out[-3000:]


def _stat(pid: int) -> tuple[int, str, int] | None:
    """``(ppid, state, start time)`` of ``pid`` from /proc, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1]), fields[0], int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _descendants(root: int) -> dict[int, int]:
    """pid -> start time of every process below ``root`` (workers in their own sessions included)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            children.setdefault(st[0], []).append((int(entry.name), st[2]))
    out, todo = {}, [root]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            out[pid] = start
            todo.append(pid)
    return out


def _alive(pid: int, start: int) -> bool:
    """Whether any thread of ``pid`` still runs. A killed process's leader turns zombie while its other
    threads are still exiting, and its files (the run folder's lock) close only when the last one has."""
    st = _stat(pid)
    if st is None or st[2] != start:
        return False
    try:
        states = [t.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0]
                  for t in Path(f"/proc/{pid}/task").iterdir()]
    except (OSError, IndexError):
        states = [st[1]]
    return any(s not in ("Z", "X") for s in states)


def _lock_holders(path: Path) -> list[str]:
    """The processes with ``path`` open, for a failure message."""
    out = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) == str(path) for fd in fd_dir.iterdir()):
                out.append(f"{fd_dir.parent.name}: {(fd_dir.parent / 'cmdline').read_bytes()[:100]!r}")
        except OSError:
            continue
    return out


@contextlib.contextmanager
def _sighup_default():
    """Children started inside start with SIGHUP at its default, as from a terminal. A test run under
    ``nohup`` has SIGHUP ignored, and an ignored signal stays ignored across ``exec``: the job would then
    rightly keep ignoring it, and the SIGHUP case would test nohup instead."""
    old = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, old)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the processes through /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_to_attnlab_nproc_stops_torchrun_and_every_worker(tmp_path, sig):
    """`attnlab train --nproc 2` stopped by Ctrl-C, SIGTERM (or SIGHUP: a closed terminal) leaves no process
    behind within 30 s, and the workers stop as on Ctrl-C: they save `last` first. No traceback: torchrun's
    own (its SignalException) came after the workers' "saved" line."""
    cfg = tiny_config("transformer", "data.batch_tokens=300", "train.max_steps=1000000", "train.log_every=5")
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "attnlab", *_attnlab_train(cfg, run, tmp_path, nproc=2), "--dataset", "numbers"]
    log = tmp_path / "out.txt"  # not a pipe: leftover processes would hold it open
    with open(log, "w") as f, _sighup_default():
        proc = subprocess.Popen(cmd, env=ENV, stdout=f, stderr=subprocess.STDOUT)
    family: dict[int, int] = {}
    try:
        deadline = time.monotonic() + JOB_DEADLINE_S
        while not any(r.get("event") == "train" for r in runs.read_metrics(run)):  # both workers are training
            assert proc.poll() is None, log.read_text()[-5000:]
            assert time.monotonic() < deadline, f"no training step logged after {JOB_DEADLINE_S:g} s"
            time.sleep(0.1)
        family = _descendants(proc.pid)
        assert len(family) >= 3, family  # torchrun and its two workers
        assert not (run / "checkpoints" / "LAST").exists()  # save_every=0: only a stop writes one
        os.kill(proc.pid, sig)
        t0 = time.monotonic()
        while proc.poll() is None and time.monotonic() - t0 < 30:
            time.sleep(0.1)
        while any(_alive(p, s) for p, s in family.items()) and time.monotonic() - t0 < 30:
            time.sleep(0.1)
        left = {p: Path(f"/proc/{p}/cmdline").read_bytes()[:100] for p, s in family.items() if _alive(p, s)}
        assert proc.poll() is not None and not left, f"still running 30 s after the signal: attnlab {proc.pid}, {left}"
        out = log.read_text()
        assert proc.returncode == 128 + sig, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
        if "did not stop within" not in out:  # not starved of CPU past the grace: they saved
            assert (run / "checkpoints" / "LAST").is_file(), out[-3000:]
            st = runs.load_state(runs.resolve_checkpoint(run, "last"))
            assert st["world_size"] == 2 and len(st["rng"]) == 2
    finally:
        for pid, start in [(proc.pid, None), *family.items()]:
            if start is None or _alive(pid, start):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        proc.wait()


def _start_nproc_and_wait_for_training(cfg, run: Path, tmp_path: Path) -> tuple[subprocess.Popen, Path, dict[int, int]]:
    """`attnlab train --nproc 2` training (a step logged); its output file and its processes."""
    cmd = [sys.executable, "-m", "attnlab", *_attnlab_train(cfg, run, tmp_path, nproc=2)]
    log = tmp_path / "out.txt"  # not a pipe: leftover processes would hold it open
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env=ENV, stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + JOB_DEADLINE_S
    while not any(r.get("event") == "train" for r in runs.read_metrics(run)):
        assert proc.poll() is None, log.read_text()[-5000:]
        assert time.monotonic() < deadline, f"no training step logged after {JOB_DEADLINE_S:g} s"
        time.sleep(0.1)
    family = _descendants(proc.pid)
    assert len(family) >= 3, family  # torchrun and its two workers
    return proc, log, family


def _kill_all(proc: subprocess.Popen, family: dict[int, int]) -> None:
    for pid, start in [(proc.pid, None), *family.items()]:
        if start is None or _alive(pid, start):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    proc.wait()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) and /proc are Linux's")
def test_sigkill_of_the_launcher_leaves_no_worker_and_frees_the_run_folder(tmp_path):
    """torchrun and both workers kept training after `kill -9` of `attnlab train --nproc 2`, reparented to
    PID 1, and nothing stopped a second writer. Now the job holds the folder's lock, and its processes die
    with the launcher (bounded wait), which frees the folder."""
    from attnlab.training.run_lock import RunLockedError, lock_run_folder

    cfg = tiny_config("transformer", "data.batch_tokens=300", "train.max_steps=1000000", "train.log_every=5")
    run = tmp_path / "run"
    proc, log, family = _start_nproc_and_wait_for_training(cfg, run, tmp_path)
    try:
        with pytest.raises(RunLockedError, match=f"in use: process {proc.pid} "):  # the launcher holds it
            lock_run_folder(run)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        t0 = time.monotonic()
        while any(_alive(p, s) for p, s in family.items()) and time.monotonic() - t0 < 30:
            time.sleep(0.1)
        left = {p: Path(f"/proc/{p}/cmdline").read_bytes()[:100] for p, s in family.items() if _alive(p, s)}
        assert not left, f"still running 30 s after kill -9 of the launcher: {left}"
        while True:  # the kernel frees the lock when the last holder's files close, just after it stops
            try:
                lock = lock_run_folder(run)
                break
            except RunLockedError:
                assert time.monotonic() - t0 < 30, (
                    f"run folder still locked 30 s after kill -9: {_lock_holders(run / 'train.lock')}")
                time.sleep(0.1)
        assert lock.fd is not None
        lock.release()
    finally:
        _kill_all(proc, family)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the workers through /proc")
def test_a_killed_worker_ends_the_job_in_one_line(tmp_path):
    """Killing one worker printed two tracebacks (gloo's, in the other worker, and torchrun's)."""
    cfg = tiny_config("transformer", "data.batch_tokens=300", "train.max_steps=1000000", "train.log_every=5",
                      "train.save_every=10")
    run = tmp_path / "run"
    proc, log, family = _start_nproc_and_wait_for_training(cfg, run, tmp_path)
    try:
        torchrun = next(p for p in family if _stat(p) is not None and _stat(p)[0] == proc.pid)
        victim = _workers(torchrun)[1]
        os.kill(victim, signal.SIGKILL)
        assert proc.wait(timeout=120) == 1
        out = log.read_text()
        errors = [ln for ln in out.splitlines() if ln.startswith("error:")]
        assert "Traceback" not in out and len(errors) == 1, out[-5000:]
        assert f"worker rank 1 (pid {victim}) was killed by SIGKILL" in errors[0], errors
    finally:
        _kill_all(proc, family)


_CHILD = """
import os, signal, sys, time
got = []
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, lambda n, f: got.append(n))
open(sys.argv[1], "w").write(str(os.getpid()))
t0 = time.monotonic()
while not got and time.monotonic() - t0 < 20:
    time.sleep(0.01)
time.sleep(0.3)  # a second signal, if any were forwarded, would arrive meanwhile
open(sys.argv[2], "w").write(",".join(signal.Signals(n).name for n in got))
sys.exit(1)  # as torchrun does once a signal stopped it
"""


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
@pytest.mark.parametrize(
    ("sent", "ignored", "seen", "rc"),
    [
        ([signal.SIGTERM], False, "SIGTERM", 143),  # 128 + the signal received, as a shell says
        ([signal.SIGHUP], False, "SIGTERM", 129),  # a closed terminal stops the job as SIGTERM does (the workers save)
        ([signal.SIGINT, signal.SIGINT, signal.SIGTERM], False, "SIGINT", 130),  # the first one only
        ([signal.SIGHUP, signal.SIGTERM], True, "SIGTERM", 143),  # under nohup, SIGHUP stays ignored
    ],
    ids=["SIGTERM", "SIGHUP-as-SIGTERM", "first-only", "nohup"],
)
def test_the_launcher_forwards_a_stop_signal_once_to_its_child(tmp_path, sent, ignored, seen, rc):
    """launch.run_forwarding_signals with a stand-in for torchrun (fast: no torch in the child)."""
    ready, got = tmp_path / "ready", tmp_path / "got"
    parent = (
        "import signal, sys\n"
        # a shell's background job inherits SIGINT ignored (and the launcher keeps it so): start clean
        + "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        # under nohup (ignored) or as from a terminal, whatever the disposition this test run inherited
        + f"signal.signal(signal.SIGHUP, signal.{'SIG_IGN' if ignored else 'SIG_DFL'})\n"
        + "from attnlab.training.launch import run_forwarding_signals\n"
        + f"sys.exit(run_forwarding_signals([sys.executable, '-c', {_CHILD!r}, {str(ready)!r}, {str(got)!r}]))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], env=ENV)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() or not ready.read_text():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        child = int(ready.read_text())
        assert os.getpgid(child) == child != os.getpgid(proc.pid)  # torchrun's stand-in has a session of its own
        for sig in sent:
            os.kill(proc.pid, sig)
            time.sleep(0.05)
        assert proc.wait(timeout=30) == rc
        assert got.read_text() == seen
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
