"""Device selection, mixed precision and the machine's matmul peak: CPU everywhere, the GPU when one is present."""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch

from attnlab.errors import AttnlabError
from attnlab.i18n import _


def pick_device(name: str = "auto") -> torch.device:
    """``auto`` → ``cuda`` when available, else ``cpu``; an unavailable CUDA request is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise AttnlabError(_("train.device={name!r} is not a device; use auto, cpu, cuda or cuda:N").format(name=name)) from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise AttnlabError(_("train.device={name!r} but no CUDA GPU is visible; use train.device=cpu "
                             "or auto").format(name=name))
    return dev


def autocast(device: torch.device, enabled: bool = True):
    """bf16 autocast on CUDA (Hopper/Ampere run bf16 matmuls at several times fp32 speed); no-op on CPU."""
    if enabled and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def set_threads(n: int) -> None:
    """Use ``n`` torch threads; ``n <= 0``: PyTorch's default (one per core), but no more than the CPUs a
    quota lets this process use (:func:`cpu_threads`). Threads past a CPU quota (a container's ``--cpus``,
    a cgroup limit) do not compute more: they wait for their turn, and OpenMP's spinning while they wait
    spends the quota itself."""
    if n > 0:
        torch.set_num_threads(n)
    elif (quota := cpu_threads()) < torch.get_num_threads():
        torch.set_num_threads(quota)


def cpu_threads() -> int:
    """The CPUs this process may use: the cores it may run on (its affinity), and no more than its cgroup's
    CPU quota allows, rounded up (a quota of 0.76 of a CPU is one thread's worth). ``os.cpu_count`` knows
    neither."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(cores, math.ceil(quota))) if quota is not None else max(1, cores)


def idle_sampler(min_s: float = 0.1) -> Callable[[], int | None] | None:
    """Start sampling the load; the returned function answers, once ``min_s`` has passed, how many of
    :func:`cpu_threads` other programs leave free: each allowed core's busy share over the interval, from
    ``/proc/stat``, less this process's own CPU time and less niced programs that yield to it
    (:func:`_niced_share_that_competes`); any other program's share past a quarter of a core takes a whole
    one, since a busy neighbour gets less than a core while this process computes (at least 1 is left).
    Before then it answers None. None instead of a function off Linux (no ``/proc/stat``). The sample
    costs no waiting: the caller's own units of work are its interval (:class:`attnlab.threads.ThreadTuner`)."""
    most = cpu_threads()
    try:
        cores = sorted(os.sched_getaffinity(0))
        before = _cpu_jiffies(cores)
    except (AttributeError, OSError, ValueError, KeyError):
        return None
    own0, t0 = time.process_time(), time.perf_counter()

    def ready() -> int | None:
        t1 = time.perf_counter()
        if t1 - t0 < min_s:
            return None
        try:
            after = _cpu_jiffies(cores)
        except (OSError, ValueError, KeyError):
            return most  # cannot tell: every core
        share = [(a[0] - b[0]) / max(1, a[2] - b[2]) for a, b in zip(after, before, strict=True)]
        niced = sum((a[1] - b[1]) / max(1, a[2] - b[2]) for a, b in zip(after, before, strict=True))
        own = (time.process_time() - own0) / (t1 - t0)
        if _own_nice() > 0:  # this process's own time is niced time too
            niced = max(0.0, niced - own)
        others = max(0.0, sum(share) - own)
        if niced > 0.25:
            others = max(0.0, others - niced * (1 - _niced_share_that_competes()))
        return max(1, min(most, len(cores) - math.ceil(max(0.0, others - 0.25))))

    return ready


def _own_nice() -> int:
    try:
        return os.getpriority(os.PRIO_PROCESS, 0)
    except (AttributeError, OSError):
        return 0


_NICED_CACHE: list[float] = []  # [when, share]: the processes change less often than a tuner samples
_YIELD_NICE = 10  # a program this much nicer gets under a tenth of a core beside one that computes


def _niced_share_that_competes(max_age_s: float = 10.0) -> float:
    """Of the niced programs running now, the share that takes a core from this process as if it were not
    niced: one that yields is :data:`_YIELD_NICE` nicer than this process. With the scheduler's session
    groups (autogroup) a nice value only orders the programs of one group, and groups share the cores by
    their own nice values, so a niced program of another session competes unless its group is that much
    nicer. With no niced program seen running: 1 under session groups, else 0."""
    now = time.monotonic()
    if _NICED_CACHE and now - _NICED_CACHE[0] < max_age_s:
        return _NICED_CACHE[1]
    try:
        enabled = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
        found = _autogroup("self") if enabled else None
    except OSError:
        found = None
    groups, mine = found is not None, found or ("", 0)
    running = competing = 0
    own = _own_nice()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[16]) <= 0 or fields[0] != "R":
                continue
            group = (_autogroup(entry.name) or ("", 0)) if groups else mine
        except (OSError, ValueError, IndexError):
            continue
        running += 1
        # another group: the groups' nice values share the cores; this group: the programs' own
        nicer = group[1] - mine[1] if group[0] != mine[0] else int(fields[16]) - own
        competing += nicer < _YIELD_NICE
    share = competing / running if running else float(groups)
    _NICED_CACHE[:] = [now, share]
    return share


def _autogroup(pid: str) -> tuple[str, int] | None:
    """``(name, nice)`` of a process's scheduler session group, from ``/proc/PID/autogroup``; None when it
    is in none (the file reads empty for a process whose cgroup has its own CPU share, as in a container:
    there the cgroup, not a session group, is what shares the cores with other programs)."""
    words = Path(f"/proc/{pid}/autogroup").read_text().split()
    return (words[0], int(words[2])) if len(words) == 3 else None


def _cpu_jiffies(cores: list[int]) -> list[tuple[int, int, int]]:
    """(busy, niced, total) jiffies of each of ``cores`` from ``/proc/stat``: busy is all but idle and
    iowait, niced the user time of niced programs (part of busy)."""
    rows = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *ticks = line.split()
        if name.startswith("cpu") and name != "cpu":
            t = [int(x) for x in ticks[:8]]
            rows[int(name[3:])] = (sum(t) - t[3] - t[4], t[1], sum(t))
    return [rows[c] for c in cores]


def _cgroup_quota() -> float | None:
    """CPUs' worth of time per period the process's cgroup allows (cgroup v2 ``cpu.max``, v1
    ``cpu.cfs_quota_us / cpu.cfs_period_us``), or None without a quota (or off Linux)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        try:
            if controllers == "":  # cgroup v2: one unified hierarchy
                quota, period = Path(f"/sys/fs/cgroup{path}/cpu.max").read_text().split()[:2]
                if quota != "max":
                    return int(quota) / int(period)
            elif "cpu" in controllers.split(","):
                base = Path("/sys/fs/cgroup") / controllers
                if not base.is_dir():
                    base = Path("/sys/fs/cgroup/cpu")
                quota = int((base / path.lstrip("/") / "cpu.cfs_quota_us").read_text())
                period = int((base / path.lstrip("/") / "cpu.cfs_period_us").read_text())
                if quota > 0 and period > 0:
                    return quota / period
        except (OSError, ValueError):
            continue
    return None


def measure_peak_gflops(
    seconds: float = 1.0, n: int | None = None, device: str | torch.device | None = None, dtype: torch.dtype | None = None,
    typical: bool = False,
) -> float:
    """The machine's matmul peak in GFLOP/s: the best of timed batches of ``n × n`` products into a
    preallocated output over about ``seconds`` (2 warm-up products first: thread pool, kernels, clocks).

    The one probe of the package: ``train.size=auto`` keys on it (training/sizing.py), ``scaling`` records
    it, the benchmarks divide by it (MFU). ``device``: ``None`` = the CPU, on this process's torch threads;
    ``dtype``: ``None`` = float32. ``n``: ``None`` = 1024 on the CPU, 8192 on CUDA (large enough to keep
    the GPU's units busy). ``typical``: the median batch instead of the best, the speed to expect while
    other programs share the cores rather than their quietest moment (the demo under load). Call it as
    ``device.measure_peak_gflops()`` so that tests can replace it.
    """
    dev = torch.device(device) if device is not None else torch.device("cpu")
    dtype = dtype or torch.float32
    n = n or (8192 if dev.type == "cuda" else 1024)
    a, b = torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)
    c = torch.empty(n, n, device=dev, dtype=dtype)
    reps = 10 if dev.type == "cuda" else 2

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    for _rep in range(2):
        torch.mm(a, b, out=c)
    sync()
    rates: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or not rates:
        t0 = time.perf_counter()
        for _rep in range(reps):
            torch.mm(a, b, out=c)
        sync()
        rates.append(reps * 2.0 * n**3 / max(time.perf_counter() - t0, 1e-12))
    return (sorted(rates)[len(rates) // 2] if typical else max(rates)) / 1e9
