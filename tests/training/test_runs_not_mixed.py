"""Runs that cannot be mixed up: one writer per run folder, a resume on the run's own corpus only, a
``--checkpoint PATH`` checked against the vocabulary of the run it is loaded into, a sweep's follow-up
command that names the corpus, and progress intervals that are finite. The ``--nproc`` cases (a killed
launcher, a killed worker) are in test_distributed.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from attnlab import runs
from attnlab.cli import main
from attnlab.data import numbers
from attnlab.errors import CheckpointError, CorpusError
from attnlab.training import distributed as D
from attnlab.training.loop import train
from attnlab.training.run_lock import LAUNCHER_ENV, LOCK_FILE, RunLockedError, lock_run_folder
from attnlab.translator import Translator
from tests.conftest import tiny_config
from tests.reliability._helpers import copy_run, last_checkpoint

# ----------------------------------------------------------------------------- one writer per folder

_HOLDER = """
import sys, time
from attnlab.training.run_lock import lock_run_folder
lock = lock_run_folder(sys.argv[1])
print("locked", flush=True)
time.sleep(120)
"""


def _hold_in_another_process(run: Path) -> subprocess.Popen:
    """A process that locks ``run`` as training does and keeps it (no torch: starts quickly)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(run)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def _gone(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(timeout=30)


def test_a_second_writer_is_refused_with_the_holders_pid_until_it_is_killed(tmp_path):
    """Nothing locked a run folder: a second `train --resume` started beside a running one."""
    run = tmp_path / "run"
    holder = _hold_in_another_process(run)
    try:
        with pytest.raises(RunLockedError) as err:
            train(tiny_config("transformer", "train.max_steps=1"), run, progress=False)
        msg = str(err.value)
        assert "\n" not in msg and f"process {holder.pid} (" in msg and str(run / LOCK_FILE) in msg, msg
        assert sorted(p.name for p in run.iterdir()) == [LOCK_FILE]  # refused before anything was written
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # as `kill -9`: the kernel drops the lock with the process
        holder.wait(timeout=30)
    lock = lock_run_folder(run)
    assert lock.fd is not None
    lock.release()


@pytest.mark.slow
def test_a_lock_is_released_at_the_end_of_train_and_a_folder_with_only_the_lock_is_a_new_run(tmp_path):
    run = tmp_path / "run"
    lock = lock_run_folder(run)
    with pytest.raises(RunLockedError, match=f"process {os.getpid()} "):  # another open file: refused too
        lock_run_folder(run)
    lock.release()
    train(tiny_config("transformer", "train.max_steps=1"), run, progress=False)  # the lock file alone: a new run
    lock = lock_run_folder(run)  # train let it go
    lock.release()


def test_the_lock_of_this_jobs_launcher_covers_its_workers(tmp_path, monkeypatch):
    """`attnlab train --nproc` holds the lock for the whole job; its rank 0 must not refuse it."""
    run = tmp_path / "run"
    holder = _hold_in_another_process(run)
    try:
        monkeypatch.setenv(LAUNCHER_ENV, str(holder.pid))
        lock = lock_run_folder(run)
        assert lock.fd is None  # held by the launcher, not by this process
        monkeypatch.setenv(LAUNCHER_ENV, str(holder.pid + 1))  # another job's launcher
        with pytest.raises(RunLockedError):
            lock_run_folder(run)
    finally:
        _gone(holder)


def test_a_lock_whose_recorded_holder_has_ended_is_waited_for_then_refused(tmp_path, monkeypatch):
    """After `kill -9` of an `attnlab --nproc` launcher, the lock it recorded is still held for a moment by
    its torchrun and workers, which are dying with it: a restart at once waits for them instead of being
    refused in the name of a process that no longer exists; one that never lets go is still refused."""
    from attnlab.training import run_lock

    run = tmp_path / "run"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    holder = _hold_in_another_process(run)
    try:
        (run / LOCK_FILE).write_text(f"{dead}\nattnlab train --nproc 2\n")  # the launcher's note, as kill -9 leaves it
        monkeypatch.setattr(run_lock, "_GONE_GRACE_S", 0.3)
        with pytest.raises(RunLockedError, match=f"process {dead} "):  # never let go: refused after the grace
            lock_run_folder(run)
        monkeypatch.setattr(run_lock, "_GONE_GRACE_S", 30.0)
        threading.Timer(0.5, holder.kill).start()
        t0 = time.monotonic()
        lock = lock_run_folder(run)
        assert lock.fd is not None and time.monotonic() - t0 >= 0.4
        lock.release()
    finally:
        _gone(holder)


# ------------------------------------------------------------------------------ the run's own corpus


def _numbers_tsv(path: Path, n: int, offset: int = 0) -> Path:
    pairs = numbers.numbers_pairs(n + offset, "fr")[offset:]
    path.write_text("".join(f"{en}\t{fr}\n" for en, fr in pairs), encoding="utf-8")
    return path


OWN = ("data.dataset=file", "data.src_lang=en", "data.tgt_lang=fr", "train.eval_max_sentences=4")


@pytest.fixture
def tsv_run(tmp_path) -> tuple[Path, Path]:
    """A one-step run trained on ``a.tsv``: ``(run, a.tsv)``."""
    a = _numbers_tsv(tmp_path / "a.tsv", 300)
    run = tmp_path / "run"
    train(tiny_config("transformer", *OWN, f"data.data_path={a}", "train.max_steps=1"), run, progress=False)
    return run, a


def test_resume_on_another_corpus_is_refused(tsv_run, tmp_path):
    """`train --resume --data other.tsv` trained on another corpus and meta.json then recorded it."""
    run, _ = tsv_run
    b = _numbers_tsv(tmp_path / "b.tsv", 300, offset=50)
    meta = (run / runs.META).read_text()
    with pytest.raises(CorpusError) as err:
        train(tiny_config("transformer", *OWN, f"data.data_path={b}", "train.max_steps=2"), run, resume=True,
              progress=False)
    msg = str(err.value)
    assert "\n" not in msg and str(b) in msg and "a.tsv" in msg and "--data" in msg, msg
    assert (run / runs.META).read_text() == meta  # nothing was written


@pytest.mark.slow
def test_resume_on_the_same_corpus_moved_elsewhere_goes_on(tsv_run, tmp_path):
    run, a = tsv_run
    moved = tmp_path / "elsewhere" / "a.tsv"
    moved.parent.mkdir()
    moved.write_bytes(a.read_bytes())
    res = train(tiny_config("transformer", *OWN, f"data.data_path={moved}", "train.max_steps=2"), run, resume=True,
                progress=False)
    assert res.step == 2


# ------------------------------------------------------------------------------ --checkpoint PATH


def test_a_checkpoint_path_from_another_run_is_checked_against_this_runs_vocabulary(tiny_runs, tmp_path):
    """A copy with two target tokens swapped refused its own checkpoint but loaded the original's silently."""
    original = tiny_runs("transformer")
    run = copy_run(original, tmp_path / "run")
    tpath = run / runs.TOKENIZERS
    toks = json.loads(tpath.read_text())
    table = toks["tgt"]["idx_to_token"]
    table[4], table[5] = table[5], table[4]  # same size, two embedding rows mean other words
    tpath.write_text(json.dumps(toks))
    theirs = str(last_checkpoint(original))
    with pytest.raises(CheckpointError, match=r"another target vocabulary .*" + str(run / runs.TOKENIZERS)):
        Translator.from_run(run, theirs)
    Translator.from_run(original, theirs)  # into its own run: fine


# -------------------------------------------------------------------------------------- the sweep


def test_the_sweeps_follow_up_command_names_its_corpus(tmp_path):
    """A sweep on your own corpus printed `attnlab train … --config best.toml` without --data, which fails:
    a run's config records no corpus path."""
    from attnlab.analysis.experiments.sweep import SweepResult

    cfg = tiny_config("transformer", "data.dataset=file", "data.src_lang=en", "data.tgt_lang=fr")
    result = SweepResult(tmp_path / "s", {"train.lr": ["1e-3"]}, best=0, best_config=runs.run_config(cfg),
                         data_path="my corpus.tsv")
    assert "--data 'my corpus.tsv' --out runs/best" in result.train_command()
    result.data_path = None  # a named dataset: nothing to add
    assert "--data" not in result.train_command()


# ---------------------------------------------------------------------------------- --log-interval


@pytest.mark.parametrize("value", ["nan", "inf", "0"])
def test_a_log_interval_that_is_not_a_finite_positive_number_is_refused(tmp_path, capsys, value):
    """`--log-interval nan` (or inf) was accepted and no progress line was ever printed."""
    out = tmp_path / "run"
    tiny = ["--dataset", "numbers", "--size", "base", "--max-steps", "1", "data.numbers_size=300", "train.threads=1"]
    assert main(["train", "--model", "transformer", "--out", str(out), "--log-interval", value, *tiny]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--log-interval" in err[0] and "finite" in err[0], err
    assert not out.exists()


# ---------------------------------------------------------------------------- a lost worker, in one line


def test_a_worker_that_lost_a_peer_says_so_in_one_line(monkeypatch):
    gloo = RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:63149: Connection reset by peer. "
                        "This is typically caused by a remote worker hanging")
    monkeypatch.delenv("ATTNLAB_AGENT_PID", raising=False)
    monkeypatch.setenv("RANK", "0")
    line = D.lost_peer_line(gloo)
    assert line is not None and "\n" not in line and "rank 0 lost another worker" in line
    assert D.lost_peer_line(RuntimeError("shape mismatch")) is None  # a bug keeps its traceback
    monkeypatch.setenv("ATTNLAB_AGENT_PID", "123")  # under `attnlab --nproc` the launcher's line says it
    assert D.lost_peer_line(gloo) == ""


def test_the_launchers_line_names_the_failed_worker():
    from attnlab.training.launch import failure_line

    line = failure_line(1, 4242, -signal.SIGKILL)
    assert "worker rank 1 (pid 4242) was killed by SIGKILL" in line and "--resume" in line and "\n" not in line
    assert "exited with status 1" in failure_line(0, 7, 1)


def test_the_launchers_line_blames_the_killed_worker_names_the_folder_and_resumes_only_a_checkpoint(tmp_path):
    """rank 1 killed by SIGKILL, then rank 0 stopped by torchrun's SIGTERM: the line named rank 0 and SIGTERM,
    printed a literal RUN, and advised --resume for a folder with no checkpoint."""
    from types import SimpleNamespace

    from attnlab.training.launch import failure_line, first_failure

    failures = {0: SimpleNamespace(exitcode=-signal.SIGTERM, timestamp=1, pid=10),
                1: SimpleNamespace(exitcode=-signal.SIGKILL, timestamp=2, pid=11)}
    assert first_failure(failures)[0] == 1
    run = tmp_path / "my run"
    line = failure_line(1, 11, -signal.SIGKILL, str(run))
    assert "first checkpoint" in line and "--resume" not in line
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "LAST").write_text("step-0000010\n")
    assert f"--resume --out '{run}'" in failure_line(1, 11, -signal.SIGKILL, str(run))


def test_die_with_parent_ends_a_child_whose_parent_is_already_gone():
    """The race the parent-death signal leaves: a parent that died before the child asked for it."""
    if not sys.platform.startswith("linux"):
        pytest.skip("prctl is Linux's")
    code = ("import sys; from attnlab.interrupts import die_with_parent; "
            "die_with_parent(int(sys.argv[1])); print('alive')")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    alive = subprocess.run([sys.executable, "-c", code, str(os.getpid())], capture_output=True, text=True, env=env,
                           timeout=60)
    assert alive.returncode == 0 and alive.stdout.strip() == "alive"  # its parent (this process) is there
    dead = subprocess.run([sys.executable, "-c", code, "1"], capture_output=True, text=True, env=env, timeout=60)
    assert dead.returncode == -signal.SIGKILL and dead.stdout == ""


@pytest.mark.parametrize("what", ["symlink", "folder", "fifo"])
def test_a_lock_file_that_is_not_a_regular_file_is_refused_and_what_it_points_at_is_kept(tmp_path, what):
    """A run folder from elsewhere whose train.lock is a symlink must not make training truncate the file it
    points at; a folder or a FIFO in its place must not turn the lock off (two writers then mixed one
    metrics.jsonl)."""
    run, victim = tmp_path / "run", tmp_path / "precious.txt"
    run.mkdir()
    victim.write_text("precious\n")
    lock = run / LOCK_FILE
    {"symlink": lambda: lock.symlink_to(victim), "folder": lock.mkdir, "fifo": lambda: os.mkfifo(lock)}[what]()
    with pytest.raises(RunLockedError, match="not a regular file") as e:
        lock_run_folder(run)
    assert "\n" not in str(e.value) and str(lock) in str(e.value)
    assert victim.read_text() == "precious\n"
