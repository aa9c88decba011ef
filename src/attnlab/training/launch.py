"""`attnlab train --nproc N`: start N data-parallel workers on this machine with torchrun.

This is PyTorch's own elastic launcher (``python -m torch.distributed.run``'s ``main``), not a home-made one:
it picks a free rendezvous port (``--standalone``), sets ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/…
for each worker, watches them, and (with ``max_restarts``) restarts all of them when one dies; the
restarted workers resume from the run's ``last`` checkpoint (``loop.train``). Every worker runs the
same ``python -m attnlab train …`` command line without ``--nproc``.

Stopping: torchrun runs in a session of its own (its workers are in sessions of their own too), so
a signal meant for the job reaches it once, through this process: SIGINT and SIGTERM are forwarded
as they are and SIGHUP (a closed terminal) as SIGTERM, then ``attnlab`` waits for torchrun. torchrun
passes the signal on to the workers, which finish their step, save ``last`` and exit (it kills
them after 30 s if they do not); a worker still alive 25 s after the signal, or once torchrun is
gone, is killed here, so stopping ``attnlab`` leaves no process behind after 30 s. A launcher killed
outright (``kill -9``) takes torchrun with it, and torchrun its workers (``PR_SET_PDEATHSIG``,
:func:`attnlab.interrupts.die_with_parent`); the launcher's lock on the run folder, which torchrun shares,
keeps a second writer out until the job's last process is gone (:mod:`attnlab.training.run_lock`).

For several machines use torchrun directly (docs/distributed.md), e.g. on each machine::

    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --nnodes 2 --nproc-per-node 4 \\
        --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m attnlab train --model transformer --out runs/big
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from attnlab.errors import AttnlabError
from attnlab.i18n import _
from attnlab.interrupts import die_with_parent, exit_code
from attnlab.training.run_lock import LAUNCHER_ENV


def strip_nproc(argv: list[str]) -> list[str]:
    """``argv`` without ``--nproc N`` / ``--nproc=N`` (the workers must not launch again)."""
    out: list[str] = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--nproc":
            skip = i + 1 < len(argv)
            continue
        if a.startswith("--nproc="):
            continue
        out.append(a)
    return out


def torchrun_command(nproc: int, argv: list[str], max_restarts: int = 0) -> list[str]:
    """The torchrun command line that runs ``attnlab <argv>`` (``--nproc`` removed) on ``nproc`` workers:
    torchrun's own ``main`` through this module (:func:`torchrun_main`), which ends a stop by signal
    without torchrun's traceback."""
    return [
        sys.executable,
        "-m",
        "attnlab.training.launch",
        "--standalone",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={max_restarts}",
        "-m",
        "attnlab",
        *strip_nproc(argv),
    ]


def usable_cores() -> int:
    """CPUs this process may use: its affinity mask, as ``taskset`` or a container sets it, within its cgroup's
    CPU quota (:func:`attnlab.device.cpu_threads`)."""
    from attnlab.device import cpu_threads  # torch: only when a launch is checked

    return cpu_threads()


def processes(nproc: int, device: str = "auto") -> int:
    """How many processes ``attnlab train --nproc N`` runs: 1 (this process alone) for 0 or 1, as its
    help says, else ``nproc``, checked against the machine.

    Each worker takes a GPU of its own on CUDA (``cuda:LOCAL_RANK``, distributed.py) and at least one core
    on the CPU; more workers than that would fail at start (no such GPU) or crawl (cores shared by
    many processes), so ``device`` (``train.device``: auto, cpu, cuda, cuda:N) decides which count
    bounds ``nproc``. Raises :class:`AttnlabError` for a negative ``nproc`` or one above the bound, naming
    the count.
    """
    if nproc < 0:
        raise AttnlabError(_("--nproc {nproc} is negative; give the number of processes (0 or 1 = this "
                             "process alone, 2 or more = data-parallel workers)").format(nproc=nproc))
    if nproc <= 1:
        return 1
    from attnlab.device import pick_device  # torch: loaded only when workers are asked for

    if pick_device(device).type == "cuda":
        import torch

        gpus = torch.cuda.device_count()
        if nproc > gpus:
            visible = (_("the {gpus} GPUs visible") if gpus != 1 else _("the 1 GPU visible")).format(gpus=gpus)
            raise AttnlabError(_("--nproc {nproc} is more than {visible} (one per worker); use --nproc {gpus} or "
                                 "fewer, or train.device=cpu").format(nproc=nproc, visible=visible, gpus=gpus))
        return nproc
    cores = usable_cores()
    if nproc > cores:
        usable = (_("the {cores} CPU cores") if cores != 1 else _("the 1 CPU core")).format(cores=cores)
        raise AttnlabError(_("--nproc {nproc} is more than {usable} this process may use (one per worker at least); "
                             "use --nproc {cores} or fewer").format(nproc=nproc, usable=usable, cores=cores))
    return nproc


def launch_nproc(nproc: int, argv: list[str], max_restarts: int | None = None, lock_fd: int | None = None) -> int:
    """Run ``attnlab <argv>`` on ``nproc`` local processes under torchrun; returns its exit code.

    ``argv`` is the command line after the program name (``sys.argv[1:]``), with or without
    ``--nproc``. ``max_restarts`` defaults to ``$ATTNLAB_MAX_RESTARTS`` (else 0): how many times a
    failed worker makes the whole group restart from the last checkpoint. ``lock_fd``: this process's
    lock on the run folder (:mod:`attnlab.training.run_lock`), which torchrun inherits, so the job holds it
    until its last process ends. torchrun, and through it every worker, is killed when this process
    dies (:func:`attnlab.interrupts.die_with_parent`). Raises :class:`AttnlabError` for ``nproc < 1`` or
    when called from inside a torchrun worker.
    """
    if nproc < 1:
        raise AttnlabError(_("--nproc {nproc}: the number of processes must be at least 1").format(nproc=nproc))
    if "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ:
        raise AttnlabError(
            _("--nproc inside a torchrun worker would launch workers of workers; drop --nproc when you "
              "start attnlab with torchrun")
        )
    if max_restarts is None:
        raw = os.environ.get("ATTNLAB_MAX_RESTARTS", "0")
        try:
            max_restarts = int(raw)
        except ValueError:
            raise AttnlabError(
                _("ATTNLAB_MAX_RESTARTS={raw!r} is not a whole number; set e.g. 1 or unset it").format(raw=raw)
            ) from None
    # The workers of every round join through torchrun's own store, open on one port for the whole
    # job, each round under a prefix of its own (distributed._attempt_store): nothing of a dead round
    # is read again. Not TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: its store per round is served by rank
    # 0 on a port torch picked free and released (`get_free_port`) seconds to minutes before rank 0
    # binds it, so another process can take it meanwhile. A value the user set is passed on as it is.
    env = {**os.environ, LAUNCHER_ENV: str(os.getpid())}
    return run_forwarding_signals(torchrun_command(nproc, argv, max_restarts), env,
                                  pass_fds=() if lock_fd is None else (lock_fd,))


# What a signal to `attnlab` becomes for torchrun: SIGHUP (the terminal went away) stops the job like
# SIGTERM, so the workers save; passed on as SIGHUP, torchrun would hand the workers a SIGHUP, which
# kills them mid-step.
FORWARDED = {signal.SIGINT: signal.SIGINT, signal.SIGTERM: signal.SIGTERM, signal.SIGHUP: signal.SIGTERM}
STOP_GRACE_S = 25.0  # after a forwarded signal, the workers' time to save and exit before they are killed


def run_forwarding_signals(cmd: list[str], env: dict[str, str] | None = None, pass_fds: tuple[int, ...] = ()) -> int:
    """Run ``cmd`` (torchrun) in a new session, forward :data:`FORWARDED` signals to it, wait for it.

    Only the first signal is forwarded: torchrun is then stopping its workers (they save ``last``),
    and a second signal would interrupt torchrun's own shutdown. Workers still running
    :data:`STOP_GRACE_S` after the signal, or once torchrun is gone, are killed, so the whole stop
    takes under 30 s. Returns torchrun's exit code, or 128 + the signal received when one stopped the job
    (130 for Ctrl-C, as `attnlab train` on one process).
    """
    state: dict[str, Any] = {"proc": None, "signal": None, "forwarded": False, "workers": [], "at": float("inf"), "killed": False}

    def forward() -> None:
        proc = state["proc"]
        state["forwarded"] = True
        state["at"] = time.monotonic()
        state["workers"] = _children(proc.pid)  # torchrun's workers, each the leader of its own group
        try:
            os.killpg(proc.pid, FORWARDED[state["signal"]])
        except (ProcessLookupError, PermissionError):  # torchrun already gone
            pass

    def handle(signum: int, frame: Any) -> None:  # noqa: ARG001
        if state["signal"] is not None:
            return  # already stopping; torchrun bounds the wait
        state["signal"] = signum
        if state["proc"] is not None:
            forward()

    # A signal this process ignores (nohup's SIGHUP, SIGINT of a background job) stays ignored.
    old = {sig: signal.signal(sig, handle) for sig in FORWARDED if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, pass_fds=pass_fds)
        state["proc"] = proc
        if state["signal"] is not None and not state["forwarded"]:
            forward()  # the signal came while torchrun was being started
        while True:
            try:
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                waited = time.monotonic() - state["at"]
                if waited > STOP_GRACE_S and not state["killed"]:
                    # torchrun's own grace is 30 s; keep the whole stop within 30 s even when the
                    # workers are starved of CPU (their `last` is written atomically: never torn).
                    print(f"attnlab: the workers did not stop within {STOP_GRACE_S:g} s of the signal; "
                          "killing them", file=sys.stderr)
                    _kill_groups([*state["workers"], *_children(proc.pid)])
                    state["killed"] = True
                elif waited > STOP_GRACE_S + 2:  # torchrun, starved too, has not exited since
                    proc.kill()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if state["signal"] is None:
        return rc
    _kill_groups(state["workers"])  # still there once torchrun is gone
    return rc if rc == 0 else exit_code(state["signal"])


def _kill_groups(procs: list[tuple[int, int]]) -> None:
    """SIGKILL the process group of each ``(pid, start time)`` that is still that same process."""
    for pid, started in procs:
        if _start_time(pid) == started:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/PID/stat`` (None when the process is gone or there is no /proc)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _children(ppid: int) -> list[tuple[int, int]]:
    """``(pid, start time)`` of the processes whose parent is ``ppid`` (empty without /proc)."""
    out = []
    try:
        entries = list(Path("/proc").iterdir())
    except OSError:
        return out
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == ppid:
                out.append((int(entry.name), int(fields[19])))
        except (OSError, ValueError, IndexError):
            continue
    return out


AGENT_ENV = "ATTNLAB_AGENT_PID"  # torchrun's pid, for its workers: they die with it (distributed.setup)


def torchrun_main() -> int:
    """``python -m torch.distributed.run``'s ``main``, as the ``attnlab`` launcher runs it: killed with the
    launcher (:func:`attnlab.interrupts.die_with_parent`), and ended in one line, not torchrun's tracebacks.

    A stop by signal (which torchrun passes on to the workers: they save and exit) ends in its exit
    status, 128 + the signal. A failed worker (:func:`failure_line`) ends in one line and status 1, or
    in the worker's own status 2 when it said what was wrong (an ``error:`` line: a mistake, not a crash).
    """
    launcher = os.environ.get(LAUNCHER_ENV, "")
    if launcher.isdigit():
        die_with_parent(int(launcher))
    os.environ[AGENT_ENV] = str(os.getpid())
    if "LOGLEVEL" not in os.environ:  # torchrun's own switch for its logs: the user asked for them all
        logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(_said_by_failure_line)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main

    try:
        main()
    except SignalException as e:
        return exit_code(int(e.sigval))
    except ChildFailedError as e:
        rank, failure = first_failure(e.failures)
        if failure.exitcode == 2:
            return 2  # an AttnlabError: the worker printed its one line
        print(failure_line(rank, failure.pid, failure.exitcode, _out_dir(sys.argv)), file=sys.stderr)
        return 1
    return 0


def first_failure(failures: dict[int, Any]) -> tuple[int, Any]:
    """``(rank, failure)`` of the worker that ended the job, out of torchrun's ``ChildFailedError.failures``:
    one killed by a signal other than SIGTERM (which torchrun sends the others when one dies), then one that
    said what was wrong (status 2), before the others, which failed because it went away (their timestamps
    may come first)."""
    return min(failures.items(), key=lambda rf: (rf[1].exitcode >= 0, rf[1].exitcode == -signal.SIGTERM,
                                                 rf[1].exitcode != 2, rf[1].timestamp, rf[0]))


def _said_by_failure_line(record: logging.LogRecord) -> bool:
    """False for torchrun's log lines about a failed worker and the closing of the others, which
    :func:`failure_line` says in one line."""
    return not str(record.msg).startswith(("failed (exitcode", "Sending process", "Closing process"))


def _out_dir(argv: list[str]) -> str | None:
    """The ``--out`` of the ``attnlab train`` command torchrun ran (None when it has none)."""
    for i, a in enumerate(argv):
        if a == "--out" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--out="):
            return a.split("=", 1)[1]
    return None


def failure_line(rank: int, pid: int, exitcode: int, out_dir: str | None = None) -> str:
    """What ended the job, in one line: which worker failed and how (torchrun stopped the others), and how
    to go on: ``--resume`` from the last checkpoint of ``out_dir``, or a new start when it holds none."""
    if exitcode < 0:
        try:
            how = _("was killed by {signal}").format(signal=signal.Signals(-exitcode).name)
        except ValueError:
            how = _("was killed by signal {signal}").format(signal=-exitcode)
    else:
        how = _("exited with status {code}").format(code=exitcode)
    run = shlex.quote(out_dir) if out_dir else "RUN"
    if out_dir and not (Path(out_dir) / "checkpoints" / "LAST").is_file():
        return _("error: worker rank {rank} (pid {pid}) {how}, so the job stopped before its first checkpoint; "
                 "start it again (the same command)").format(rank=rank, pid=pid, how=how)
    return _("error: worker rank {rank} (pid {pid}) {how}, so the job stopped; the run folder keeps its last "
             "checkpoint: continue with `attnlab train --resume --out {run}`").format(rank=rank, pid=pid, how=how,
                                                                                     run=run)


if __name__ == "__main__":  # torchrun_command runs torchrun through here
    sys.exit(torchrun_main())
